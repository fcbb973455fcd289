#pragma once
// The GPT's feed-forward layer, without the residual (attnlab/lm.hpp):
//   u = m W_fc  [B·T, 4D];   g = GELU(u) = u Φ(u) (the exact, erf form);   y = g W_proj  [B·T, D]
// No biases. Buffers are kept between calls.
#include <cstdint>
#include <string>
#include <vector>

#include "train/param.hpp"

namespace attnlab::train::lm {

template <class T>
class Mlp {
 public:
  Mlp(const std::string& name, int64_t d_model, int64_t hidden);

  // m [M, D] → y [M, D] (overwritten); m must stay unchanged until backward.
  void forward(const T* m, T* y, int64_t M);
  // dy [M, D] → dm [M, D] (overwritten); accumulates the parameters' gradients.
  void backward(const T* dy, T* dm);
  std::vector<Param<T>*> params() { return {&w_fc, &w_proj}; }

  Param<T> w_fc;    // [D, 4D]
  Param<T> w_proj;  // [4D, D]

 private:
  int64_t D_ = 0, F_ = 0, M_ = 0;
  const T* m_ = nullptr;
  std::vector<T> u_, g_;  // [M, F] pre-activation and GELU
  std::vector<T> slope_;  // [M, F] GELU'(u)
  std::vector<T> dg_;     // [M, F] backward scratch
};

}  // namespace attnlab::train::lm
