// Tensor's storage starts on a 64-byte boundary (a cache line) whatever its element type
// and size: small blocks from malloc's arenas and large ones from mmap, where
// std::vector's own allocator gives 16 bytes past a page. Copies and moves keep it.
#include <gtest/gtest.h>

#include <cstdint>

#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace al = attnlab;

namespace {
template <class T>
bool on_cache_line(const al::Tensor<T>& t) {
  return reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0;
}
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (requires { a.bits; }) return a.bits == b.bits;
  else return a == b;
}
template <class T>
void expect_aligned(T fill) {
  for (int64_t n : {1, 3, 1000, 40000, 3000000}) {  // 3e6 floats: 12 MB, an mmap'd block
    al::Tensor<T> t({1, 1, n, 1}, fill);
    EXPECT_TRUE(on_cache_line(t)) << n << " elements of " << sizeof(T) << " bytes";
    EXPECT_EQ(t.numel(), n);
    EXPECT_TRUE(same(t.storage().front(), fill) && same(t.storage().back(), fill));
    const al::Tensor<T> copy = t;
    EXPECT_TRUE(on_cache_line(copy));
    al::Tensor<T> moved = std::move(t);
    EXPECT_TRUE(on_cache_line(moved));
  }
}
}  // namespace

TEST(Tensor, StorageStartsOnACacheLine) {
  expect_aligned<float>(1.5f);
  expect_aligned<double>(-2.0);
  expect_aligned<uint8_t>(uint8_t{1});
  expect_aligned<al::bfloat16>(al::bfloat16::from_float(0.5f));
  expect_aligned<al::float16>(al::float16::from_float(0.25f));
}
