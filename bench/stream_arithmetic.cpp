// The loop of stream_arithmetic.hpp, per SIMD target (Highway runtime dispatch).
#include "stream_arithmetic.hpp"

#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/stream_arithmetic.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// F multiply-adds per loaded vector, spread over the eight work accumulators so that
// consecutive ones are independent. Reads x[0, n), or with y, `row` floats of x and then
// the same `row` of y in turn (the order a decoding step reads K and V: key after key).
template <int F>
float Stream(const float* HWY_RESTRICT x, const float* HWY_RESTRICT y, size_t n, size_t row, size_t prefetch_bytes,
             int step_order) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  V sum[8], work[8];
  for (int i = 0; i < 8; ++i) sum[i] = hn::Zero(df), work[i] = hn::Set(df, 1.0f);
  const V decay = hn::Set(df, 0.9999f);
  const size_t block_bytes = 8 * L * sizeof(float);
  // The u-th of 8 loaded vectors: summed, and F multiply-adds on the work accumulators.
  auto consume = [&](int u, const V v) {
    sum[u] = hn::Add(sum[u], v);
    for (int f = 0; f < F; ++f) work[(u + f) & 7] = hn::MulAdd(work[(u + f) & 7], decay, v);
  };
  auto block = [&](const float* HWY_RESTRICT at) {
    if (prefetch_bytes != 0) {
      const char* line = reinterpret_cast<const char*>(at) + prefetch_bytes;
      for (size_t b = 0; b < block_bytes; b += 64) hwy::Prefetch(line + b);
    }
    for (int u = 0; u < 8; ++u) consume(u, hn::LoadU(df, at + u * L));
  };
  // The same on 8 vectors at any addresses, for the step's order below.
  auto gather8 = [&](const float* const* at) {
    for (int u = 0; u < 8; ++u) consume(u, hn::LoadU(df, at[u]));
  };
  if (y == nullptr) {
    for (size_t i = 0; i < n; i += 8 * L) block(x + i);
  } else if (step_order) {
    // The fused decoding step's order over a block of 8 keys: the scores read two rows of
    // K at a time, their columns in step; the product reads V by blocks of 3 vectors of
    // columns, each block down the 8 rows. No software prefetch.
    for (size_t r = 0; r < n; r += 8 * row) {
      const float* at[8];
      if (!(step_order & kStepOrderK)) {
        for (size_t i = 0; i < 8 * row; i += 8 * L) block(x + r + i);
      } else {
        for (size_t j = 0; j < 8; j += 2)
          for (size_t c = 0; c < row; c += 4 * L) {
            for (int u = 0; u < 4; ++u) at[2 * u] = x + r + j * row + c + u * L, at[2 * u + 1] = at[2 * u] + row;
            gather8(at);
          }
      }
      // With kStepOrderGap, a pause without loads between the two phases, as the step's
      // softmax makes one: a chain of 64 dependent multiply-adds (about 256 cycles).
      if (step_order & kStepOrderGap) {
        V chain = work[0];
        for (int g = 0; g < 64; ++g) chain = hn::MulAdd(chain, decay, decay);
        work[0] = chain;
      }
      // Column blocks of 3 vectors (the last of what is left), each down the 8 rows, 8 loads at a time.
      if (!(step_order & kStepOrderV)) {
        for (size_t i = 0; i < 8 * row; i += 8 * L) block(y + r + i);
      } else {
        for (size_t c = 0; c < row; c += 3 * L) {
          const size_t nv = std::min<size_t>(3, (row - c) / L);
          int filled = 0;
          for (size_t j = 0; j < 8; ++j)
            for (size_t u = 0; u < nv; ++u) {
              at[filled++] = y + r + j * row + c + u * L;
              if (filled == 8) gather8(at), filled = 0;
            }
        }
      }
    }
  } else {
    for (size_t r = 0; r < n; r += row) {
      for (size_t i = 0; i < row; i += 8 * L) block(x + r + i);
      for (size_t i = 0; i < row; i += 8 * L) block(y + r + i);
    }
  }
  // The sum of the values read; the work joins it times zero, so that it is kept (0 · w
  // is not folded away without fast-math) and the result is the plain sum (w is finite
  // for finite data), which read_once's callers and tests check.
  V total = hn::Zero(df), kept = hn::Zero(df);
  for (int u = 0; u < 8; ++u) total = hn::Add(total, sum[u]), kept = hn::Add(kept, work[u]);
  return hn::GetLane(hn::SumOfLanes(df, hn::MulAdd(kept, hn::Zero(df), total)));
}

float StreamWithArithmetic(const float* x, const float* y, size_t n, size_t row, int fmas, size_t prefetch_bytes,
                           int step_order) {
  switch (fmas) {
    case 0: return Stream<0>(x, y, n, row, prefetch_bytes, step_order);
    case 1: return Stream<1>(x, y, n, row, prefetch_bytes, step_order);
    case 2: return Stream<2>(x, y, n, row, prefetch_bytes, step_order);
    case 4: return Stream<4>(x, y, n, row, prefetch_bytes, step_order);
    case 8: return Stream<8>(x, y, n, row, prefetch_bytes, step_order);
    default: HWY_ABORT("stream_with_arithmetic: %d multiply-adds per vector (0, 1, 2, 4 or 8)", fmas);
  }
}

const char* StreamTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::bench {

HWY_EXPORT(StreamWithArithmetic);
HWY_EXPORT(StreamTargetName);

const char* stream_target_name() { return HWY_DYNAMIC_DISPATCH(StreamTargetName)(); }

float stream_with_arithmetic(const float* x, size_t n, int fmas, size_t prefetch_bytes) {
  return HWY_DYNAMIC_DISPATCH(StreamWithArithmetic)(x, nullptr, n, n, fmas, prefetch_bytes, 0);
}

float stream_pair_with_arithmetic(const float* x, const float* y, size_t n, size_t row, int fmas, size_t prefetch_bytes) {
  return HWY_DYNAMIC_DISPATCH(StreamWithArithmetic)(x, y, n, row, fmas, prefetch_bytes, 0);
}

float stream_pair_in_step_order(const float* x, const float* y, size_t n, size_t row, int fmas, int which) {
  return HWY_DYNAMIC_DISPATCH(StreamWithArithmetic)(x, y, n, row, fmas, 0, which);
}

}  // namespace attnlab::bench
#endif  // HWY_ONCE
