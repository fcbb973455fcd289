#include "train/optimizer.hpp"

#include <cmath>

#include "attnlab/error.hpp"
#include "train/adam_update.hpp"

namespace attnlab::train {

Optimizer::Optimizer(OptimizerKind kind, const std::vector<Param<float>*>& params, const OptimizerSettings& settings,
                     const std::vector<bool>& decay)
    : kind_(kind), settings_(settings), params_(params), decay_(decay) {
  if (decay_.empty()) decay_.assign(params_.size(), false);
  if (decay_.size() != params_.size()) throw Error("optimizer: one weight-decay flag per parameter is needed");
  auto ends_with = [](const std::string& s, const char* tail) {
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (auto* p : params_) {
    lr_factor_.push_back(ends_with(p->name, ".w_q") || ends_with(p->name, ".w_k") ? settings_.qk_lr_scale : 1.0);
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
      const auto rate = static_cast<float>(lr * lr_factor_[k]);
      for (size_t i = 0; i < w.size(); ++i) {
        m[i] = static_cast<float>(s.momentum) * m[i] + g[i];
        w[i] -= rate * m[i];
      }
    }
    return;
  }
  AdamScalars a{s.beta1, s.beta2, s.eps, 1.0 - std::pow(s.beta1, static_cast<double>(t_)),
                1.0 - std::pow(s.beta2, static_cast<double>(t_)), 0, 1.0f};
  for (size_t k = 0; k < params_.size(); ++k) {
    auto& w = params_[k]->value;
    a.rate = lr * lr_factor_[k];
    a.shrink = decay_[k] && s.weight_decay > 0 ? static_cast<float>(1.0 - a.rate * s.weight_decay) : 1.0f;
    // m and v in float like every framework; the update itself in double.
    adam_update(w.data(), params_[k]->grad.data(), m_[k].data(), v_[k].data(), w.size(), a);
  }
}

}  // namespace attnlab::train
