// The loop of stream_arithmetic.hpp, per SIMD target (Highway runtime dispatch).
#include "stream_arithmetic.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/stream_arithmetic.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// F multiply-adds per loaded vector, spread over the eight work accumulators so that
// consecutive ones are independent.
template <int F>
float Stream(const float* HWY_RESTRICT x, size_t n, size_t prefetch_bytes) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  V sum[8], work[8];
  for (int i = 0; i < 8; ++i) sum[i] = hn::Zero(df), work[i] = hn::Set(df, 1.0f);
  const V decay = hn::Set(df, 0.9999f);
  const size_t block_bytes = 8 * L * sizeof(float);
  for (size_t i = 0; i < n; i += 8 * L) {
    if (prefetch_bytes != 0) {
      const char* at = reinterpret_cast<const char*>(x + i) + prefetch_bytes;
      for (size_t b = 0; b < block_bytes; b += 64) hwy::Prefetch(at + b);
    }
    for (int u = 0; u < 8; ++u) {
      const V v = hn::Load(df, x + i + u * L);
      sum[u] = hn::Add(sum[u], v);
      for (int f = 0; f < F; ++f) work[(u + f) & 7] = hn::MulAdd(work[(u + f) & 7], decay, v);
    }
  }
  V total = hn::Zero(df);
  for (int u = 0; u < 8; ++u) total = hn::Add(total, hn::Add(sum[u], work[u]));
  return hn::GetLane(hn::SumOfLanes(df, total));
}

float StreamWithArithmetic(const float* x, size_t n, int fmas, size_t prefetch_bytes) {
  switch (fmas) {
    case 0: return Stream<0>(x, n, prefetch_bytes);
    case 1: return Stream<1>(x, n, prefetch_bytes);
    case 2: return Stream<2>(x, n, prefetch_bytes);
    case 4: return Stream<4>(x, n, prefetch_bytes);
    case 8: return Stream<8>(x, n, prefetch_bytes);
    default: HWY_ABORT("stream_with_arithmetic: %d multiply-adds per vector (0, 1, 2, 4 or 8)", fmas);
  }
}

}  // namespace attnlab::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::bench {

HWY_EXPORT(StreamWithArithmetic);

float stream_with_arithmetic(const float* x, size_t n, int fmas, size_t prefetch_bytes) {
  return HWY_DYNAMIC_DISPATCH(StreamWithArithmetic)(x, n, fmas, prefetch_bytes);
}

}  // namespace attnlab::bench
#endif  // HWY_ONCE
