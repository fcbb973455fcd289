// Dropout's random words in SIMD: Philox-4x32-10 with one counter per u32 lane,
// bitwise the scalar generator of core/philox.hpp (tested: EngineDropout), so that
// the engine's masks are the reference's. Per-target code: included once per SIMD
// target, hence the toggle guard.
//
// Lane l of one step holds the counter (j0/4 + l, i, h, b); its four output words
// are keys j0 + 4l … j0 + 4l + 3, which StoreInterleaved4 puts in key order. A step
// makes 4·Lanes words: 10 rounds of two 32×32→64-bit products (MulEven on the even
// and the odd lanes) and a few xors, about 5 instructions per key on AVX2, against
// the 2·d multiply-adds per key of the two products around the softmax.
#if defined(ATTNLAB_ENGINE_PHILOX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_PHILOX_INL_H_
#undef ATTNLAB_ENGINE_PHILOX_INL_H_
#else
#define ATTNLAB_ENGINE_PHILOX_INL_H_
#endif

#include <cstdint>

#include "core/philox.hpp"
#include "engine/plan.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DU32 = hn::ScalableTag<uint32_t>;
using VU32 = hn::Vec<DU32>;

// DropoutWords writes whole steps: up to 4·Lanes − 1 words past n (kDropoutSlack, plan.hpp).
static_assert(4 * HWY_LANES(uint32_t) <= kDropoutSlack, "DropoutWords' buffers are too short for this target");

#if HWY_TARGET == HWY_SCALAR
// One lane has no odd half for MulEven: the scalar generator, word by word.
inline void DropoutWords(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, uint32_t* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = detail::dropout_word(seed, b, h, i, j0 + j);
}
#else
// hi and lo halves of the 64-bit products a·m, lane by lane.
HWY_INLINE void MulHiLo(VU32 a, VU32 m, VU32& hi, VU32& lo) {
  const DU32 du;
  const hn::Repartition<uint64_t, DU32> d64;
  const auto even = hn::MulEven(a, m);  // a[2k]·m
  const auto odd = hn::MulEven(hn::BitCast(du, hn::ShiftRight<32>(hn::BitCast(d64, a))), m);  // a[2k+1]·m
  lo = hn::OddEven(hn::BitCast(du, hn::ShiftLeft<32>(odd)), hn::BitCast(du, even));
  hi = hn::OddEven(hn::BitCast(du, odd), hn::BitCast(du, hn::ShiftRight<32>(even)));
}

// out[j] = detail::dropout_word(seed, b, h, i, j0 + j) for j < n (j0 a multiple of 4);
// words up to kDropoutSlack past n are written too.
inline void DropoutWords(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, uint32_t* out) {
  const DU32 du;
  const auto L = static_cast<int64_t>(hn::Lanes(du));
  const VU32 m0 = hn::Set(du, detail::kPhiloxM0), m1 = hn::Set(du, detail::kPhiloxM1);
  const VU32 row = hn::Set(du, static_cast<uint32_t>(i)), head = hn::Set(du, static_cast<uint32_t>(h)),
             batch = hn::Set(du, static_cast<uint32_t>(b));
  for (int64_t c = 0; c < n; c += 4 * L) {
    VU32 x0 = hn::Add(hn::Set(du, static_cast<uint32_t>((j0 + c) >> 2)), hn::Iota(du, 0)), x1 = row, x2 = head,
         x3 = batch;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += detail::kPhiloxW0;
        k1 += detail::kPhiloxW1;
      }
      VU32 hi0, lo0, hi1, lo1;
      MulHiLo(x0, m0, hi0, lo0);
      MulHiLo(x2, m1, hi1, lo1);
      const VU32 y0 = hn::Xor(hn::Xor(hi1, x1), hn::Set(du, k0));
      const VU32 y2 = hn::Xor(hn::Xor(hi0, x3), hn::Set(du, k1));
      x0 = y0, x1 = lo1, x2 = y2, x3 = lo0;
    }
    hn::StoreInterleaved4(x0, x1, x2, x3, du, out + c);
  }
}
#endif

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_PHILOX_INL_H_
