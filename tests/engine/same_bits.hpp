#pragma once
// Bitwise equality of two float tensors: the engine's determinism promise (any thread
// count, any scratch state, either request pattern of the decode step) is the same bits,
// not values within a tolerance.
#include <cstring>

#include "attnlab/tensor.hpp"

namespace attnlab::test {

inline bool same_bits(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

}  // namespace attnlab::test
