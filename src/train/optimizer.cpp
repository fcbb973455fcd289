#include "train/optimizer.hpp"

#include <cmath>

#include "attnlab/error.hpp"

namespace attnlab::train {

Optimizer::Optimizer(OptimizerKind kind, const std::vector<Param<float>*>& params, const OptimizerSettings& settings,
                     const std::vector<bool>& decay)
    : kind_(kind), settings_(settings), params_(params), decay_(decay) {
  if (decay_.empty()) decay_.assign(params_.size(), false);
  if (decay_.size() != params_.size()) throw Error("optimizer: one weight-decay flag per parameter is needed");
  for (auto* p : params_) {
    m_.emplace_back(p->value.size(), 0.0f);
    if (kind_ == OptimizerKind::adam) v_.emplace_back(p->value.size(), 0.0f);
  }
}

void Optimizer::step(double lr) {
  ++t_;
  const auto& s = settings_;
  if (kind_ == OptimizerKind::sgd) {
    for (size_t k = 0; k < params_.size(); ++k) {
      auto& w = params_[k]->value;
      const auto& g = params_[k]->grad;
      auto& m = m_[k];
      for (size_t i = 0; i < w.size(); ++i) {
        m[i] = static_cast<float>(s.momentum) * m[i] + g[i];
        w[i] -= static_cast<float>(lr) * m[i];
      }
    }
    return;
  }
  const double c1 = 1.0 - std::pow(s.beta1, static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(s.beta2, static_cast<double>(t_));
  for (size_t k = 0; k < params_.size(); ++k) {
    auto& w = params_[k]->value;
    const auto& g = params_[k]->grad;
    auto& m = m_[k];
    auto& v = v_[k];
    if (decay_[k] && s.weight_decay > 0) {
      const auto shrink = static_cast<float>(1.0 - lr * s.weight_decay);
      for (float& x : w) x *= shrink;
    }
    for (size_t i = 0; i < w.size(); ++i) {
      // m and v in float like every framework; the update itself in double.
      m[i] = static_cast<float>(s.beta1 * m[i] + (1 - s.beta1) * g[i]);
      v[i] = static_cast<float>(s.beta2 * v[i] + (1 - s.beta2) * static_cast<double>(g[i]) * g[i]);
      const double mhat = m[i] / c1, vhat = v[i] / c2;
      w[i] -= static_cast<float>(lr * mhat / (std::sqrt(vhat) + s.eps));
    }
  }
}

}  // namespace attnlab::train
