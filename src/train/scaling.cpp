// The study's scaling axis: a library scale policy, or qk-norm with a learned temperature.
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {

namespace {
constexpr const char* kQkNormName = "qknorm";
constexpr const char* kAdditiveName = "additive";
constexpr const char* kAdditiveUnitName = "additive_unit";
}  // namespace

Scaling Scaling::qk_norm_temperature() {
  Scaling s;
  s.qk_norm = true;
  return s;
}

Scaling Scaling::additive_score(bool unit_a) {
  Scaling s;
  s.additive = true;
  s.additive_unit_a = unit_a;
  return s;
}

std::string Scaling::name() const {
  return qk_norm ? kQkNormName : additive ? (additive_unit_a ? kAdditiveUnitName : kAdditiveName) : policy.name();
}

Scaling Scaling::parse(const std::string& text) {
  if (text == kQkNormName) return qk_norm_temperature();
  if (text == kAdditiveName) return additive_score();
  if (text == kAdditiveUnitName) return additive_score(true);
  try {
    return ScalePolicy::parse(text);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; or qknorm (qk-norm with a learned temperature), or additive (aᵀtanh(q + k)), or additive_unit (the same with a ~ N(0, 1))");
  }
}

bool operator==(const Scaling& a, const Scaling& b) {
  if (a.qk_norm || b.qk_norm) return a.qk_norm == b.qk_norm;
  if (a.additive || b.additive) return a.additive == b.additive && a.additive_unit_a == b.additive_unit_a;
  return a.policy.kind() == b.policy.kind() && a.policy.parameter() == b.policy.parameter();
}

}  // namespace attnlab::train
