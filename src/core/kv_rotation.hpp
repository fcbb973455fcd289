#pragma once
// The KV cache's rotation (KVCacheConfig::key_rotation, value_rotation): a randomized
// Hadamard transform R = H·D/√b, D a fixed diagonal of signs, H the Sylvester Hadamard matrix
// of size b, applied to each block of b channels, b the largest power of two dividing the
// row's length (128 for d = 128, 32 for d = 96). R is orthogonal, so q·k = (Rq)·(Rk): a
// rotated key quantized with the rotated query changes no score, while the rotation spreads an
// outlier channel over all b channels before a group's scale is fixed (QuaRot, Ashkboos et al.
// 2024). The signs come from a fixed seed, and the transform is adds, subtracts and one
// multiply a value in a fixed order: the same row gives the same bits on every machine.
#include <cstdint>
#include <vector>

namespace attnlab::detail {

class Rotation {
 public:
  explicit Rotation(int64_t dim);  // the rotation of rows of `dim` values
  int64_t dim() const { return static_cast<int64_t>(sign_.size()); }
  int64_t block() const { return block_; }
  // x ← R x and x ← Rᵀ x, in place (float: as rows are stored; double: the exact check).
  void rotate(float* x) const;
  void unrotate(float* x) const;
  void rotate(double* x) const;
  void unrotate(double* x) const;

 private:
  std::vector<float> sign_;  // D: ±1 per channel
  int64_t block_ = 1;
};

}  // namespace attnlab::detail
