#pragma once
// Adam (Kingma & Ba; bias-corrected) and SGD with momentum (PyTorch's form: m ← μ m + g;
// w ← w − lr m), for the float models of both studies. The toy study uses the defaults
// (β₁ = 0.9, β₂ = 0.999, ε = 1e−8, μ = 0.9) with no weight decay and no clipping: both would
// change the very gradient sizes it measures. The language-model study uses AdamW (β₂ = 0.95,
// decoupled weight decay on the parameters marked for it, PyTorch's AdamW order: w ← w(1 − lr·λ)
// before the Adam step).
#include <vector>

#include "attnlab/train.hpp"
#include "train/param.hpp"

namespace attnlab::train {

struct OptimizerSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, momentum = 0.9;
  double weight_decay = 0;  // λ, Adam only, on the parameters whose `decay` entry is true
};

class Optimizer {
 public:
  // `decay[i]` says whether params[i] is decayed (empty: none is).
  Optimizer(OptimizerKind kind, const std::vector<Param<float>*>& params, const OptimizerSettings& settings = {},
            const std::vector<bool>& decay = {});
  // One update of every parameter from its grad, with learning rate lr.
  void step(double lr);

 private:
  OptimizerKind kind_;
  OptimizerSettings settings_;
  std::vector<Param<float>*> params_;
  std::vector<bool> decay_;
  std::vector<std::vector<float>> m_, v_;  // per parameter, same size as its value
  int64_t t_ = 0;
};

}  // namespace attnlab::train
