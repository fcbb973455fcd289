// The KV cache's randomized Hadamard rotation (core/kv_rotation.hpp).
#include "core/kv_rotation.hpp"

#include <cmath>

namespace attnlab::detail {
namespace {

// splitmix64: the signs' source, fixed so that every cache of a row length rotates alike.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr uint64_t kSignSeed = 0x6174746E6C6162ull;  // "attnlab"

// y ← H y over each block of b values (b a power of two): log₂ b passes of butterflies.
template <class T>
void hadamard(T* y, int64_t n, int64_t b) {
  for (int64_t b0 = 0; b0 < n; b0 += b)
    for (int64_t len = 1; len < b; len *= 2)
      for (int64_t i = b0; i < b0 + b; i += 2 * len)
        for (int64_t j = i; j < i + len; ++j) {
          const T u = y[j], v = y[j + len];
          y[j] = u + v, y[j + len] = u - v;
        }
}

template <class T>
void apply(const std::vector<float>& sign, int64_t block, T* x, bool transpose) {
  const auto n = static_cast<int64_t>(sign.size());
  const T norm = static_cast<T>(1.0 / std::sqrt(static_cast<double>(block)));
  if (!transpose)
    for (int64_t c = 0; c < n; ++c) x[c] *= static_cast<T>(sign[static_cast<size_t>(c)]);
  hadamard(x, n, block);
  for (int64_t c = 0; c < n; ++c) x[c] *= norm;
  if (transpose)
    for (int64_t c = 0; c < n; ++c) x[c] *= static_cast<T>(sign[static_cast<size_t>(c)]);
}

}  // namespace

Rotation::Rotation(int64_t dim) : sign_(static_cast<size_t>(dim)) {
  while (dim % (2 * block_) == 0) block_ *= 2;
  for (int64_t c = 0; c < dim; ++c)
    sign_[static_cast<size_t>(c)] = (splitmix64(kSignSeed + static_cast<uint64_t>(c)) >> 63) != 0 ? -1.0f : 1.0f;
}

void Rotation::rotate(float* x) const { apply(sign_, block_, x, false); }
void Rotation::unrotate(float* x) const { apply(sign_, block_, x, true); }
void Rotation::rotate(double* x) const { apply(sign_, block_, x, false); }
void Rotation::unrotate(double* x) const { apply(sign_, block_, x, true); }

}  // namespace attnlab::detail
