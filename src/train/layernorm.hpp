#pragma once
// LayerNorm over the last axis: y = (x − μ)/√(σ² + ε) · γ + β, for x [M, D].
#include <cstdint>
#include <vector>

#include "train/param.hpp"

namespace attnlab::train {

template <class T>
class LayerNorm {
 public:
  static constexpr double kEps = 1e-5;
  LayerNorm() = default;
  LayerNorm(const std::string& name, int64_t D);

  // x [M, D] → y [M, D]; caches x̂ and 1/σ for the backward.
  void forward(const T* x, T* y, int64_t M);
  // dy [M, D] → dx [M, D] (overwritten); accumulates into γ's and β's gradients.
  void backward(const T* dy, T* dx);

  Param<T> gamma, beta;  // [1, D]

 private:
  int64_t D_ = 0, M_ = 0;
  std::vector<T> xhat_;  // [M, D]
  std::vector<T> rstd_;  // [M]
};

}  // namespace attnlab::train
