#include "train/optimizer.hpp"

#include <cmath>

namespace attnlab::train {

Optimizer::Optimizer(OptimizerKind kind, const std::vector<Param<float>*>& params, double qk_lr_scale)
    : kind_(kind), params_(params) {
  auto ends_with = [](const std::string& s, const char* tail) {
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (auto* p : params_) {
    lr_factor_.push_back(ends_with(p->name, ".w_q") || ends_with(p->name, ".w_k") ? qk_lr_scale : 1.0);
    m_.emplace_back(p->value.size(), 0.0f);
    if (kind_ == OptimizerKind::adam) v_.emplace_back(p->value.size(), 0.0f);
  }
}

void Optimizer::step(double lr) {
  ++t_;
  if (kind_ == OptimizerKind::sgd) {
    for (size_t k = 0; k < params_.size(); ++k) {
      auto& w = params_[k]->value;
      const auto& g = params_[k]->grad;
      auto& m = m_[k];
      const auto rate = static_cast<float>(lr * lr_factor_[k]);
      for (size_t i = 0; i < w.size(); ++i) {
        m[i] = static_cast<float>(kMomentum) * m[i] + g[i];
        w[i] -= rate * m[i];
      }
    }
    return;
  }
  const double c1 = 1.0 - std::pow(kBeta1, static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(kBeta2, static_cast<double>(t_));
  for (size_t k = 0; k < params_.size(); ++k) {
    auto& w = params_[k]->value;
    const auto& g = params_[k]->grad;
    auto& m = m_[k];
    auto& v = v_[k];
    const double rate = lr * lr_factor_[k];
    for (size_t i = 0; i < w.size(); ++i) {
      // m and v in float like every framework; the update itself in double.
      m[i] = static_cast<float>(kBeta1 * m[i] + (1 - kBeta1) * g[i]);
      v[i] = static_cast<float>(kBeta2 * v[i] + (1 - kBeta2) * static_cast<double>(g[i]) * g[i]);
      const double mhat = m[i] / c1, vhat = v[i] / c2;
      w[i] -= static_cast<float>(rate * mhat / (std::sqrt(vhat) + kEps));
    }
  }
}

}  // namespace attnlab::train
