#pragma once
// One Adam(W) update of a float tensor (train/optimizer.hpp), lane by lane in double as the
// scalar form writes it, so every SIMD target gives the bits the scalar loop gives:
//   w ← w·shrink (float; 1 for a parameter not decayed: exact), m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g·g (float),
//   w ← w − (rate·m/c₁) / (√(v/c₂) + ε).
#include <cstddef>

namespace attnlab::train {

struct AdamScalars {
  double beta1, beta2, eps;
  double c1, c2;  // the bias corrections 1 − βᵗ
  double rate;
  float shrink;  // 1 − rate·λ (decoupled weight decay), or 1
};

void adam_update(float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s);

}  // namespace attnlab::train
