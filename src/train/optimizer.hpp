#pragma once
// Adam (Kingma & Ba; β₁ = 0.9, β₂ = 0.999, ε = 1e−8, bias-corrected) and SGD with
// momentum 0.9 (PyTorch's form: m ← μ m + g; w ← w − lr m). No weight decay and no
// gradient clipping: both would change the very gradient sizes the study measures.
#include <vector>

#include "attnlab/train.hpp"
#include "train/param.hpp"

namespace attnlab::train {

class Optimizer {
 public:
  // qk_lr_scale multiplies the rate of the query and key projections (parameters named "….w_q", "….w_k").
  Optimizer(OptimizerKind kind, const std::vector<Param<float>*>& params, double qk_lr_scale = 1);
  // One update of every parameter from its grad, with learning rate lr (times its own factor).
  void step(double lr);

  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kMomentum = 0.9;

 private:
  OptimizerKind kind_;
  std::vector<Param<float>*> params_;
  std::vector<std::vector<float>> m_, v_;  // per parameter, same size as its value
  std::vector<double> lr_factor_;          // per parameter
  int64_t t_ = 0;
};

}  // namespace attnlab::train
