// The decode kernels' per-target facts (kTarget) and every raw intrinsic they use, each
// with a portable fallback, so that the kernels carry no #if. Included once per SIMD
// target (hence the toggle guard).
#if defined(ATTNLAB_ENGINE_DECODE_TARGET_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_TARGET_INL_H_
#undef ATTNLAB_ENGINE_DECODE_TARGET_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_TARGET_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "engine/decode_strategy.hpp"
#include "engine/exp-inl.h"
#include "engine/gemm-inl.h"
#include "engine/tile_ops-inl.h"

// The x86 AVX-512 targets (AVX3 and later): 512-bit intrinsics, requests into L2.
#undef ATTNLAB_DECODE_AVX512
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define ATTNLAB_DECODE_AVX512 1
#else
#define ATTNLAB_DECODE_AVX512 0
#endif

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// This target's facts, in one place. `avx512` is the one fact behind the requests into
// L2, the fused step for one row and for 16-bit caches, its requests during the scores,
// its 16 keys ahead and 8 rows: AVX-512's 32 registers and L2-bound prefetches (the rows
// and element types it brings are decode_strategy.hpp's fused_* functions of it).
struct DecodeTarget {
  static constexpr bool avx512 = ATTNLAB_DECODE_AVX512;
  static DecodeTargetFacts facts() {
    return {static_cast<int64_t>(hn::Lanes(DF())), avx512, avx512 && cpu_has_bf16_dot_products()};
  }
};

// Where a decode prefetch puts its line: into L2 on AVX-512 (prefetcht1: a prefetcht0
// that misses holds one of L1's few miss buffers for the trip to memory, and the fused
// step's requests filled them), else L1.
HWY_INLINE void PrefetchLine(const char* line) {
  if constexpr (DecodeTarget::avx512) __builtin_prefetch(line, 0, 2);  // prefetcht1
  else hwy::Prefetch(line);                                      // prefetcht0
}

// An empty asm that says it reads and writes v in a vector register: the compiler then
// loads v once rather than folding a load into each instruction that uses it (GCC did:
// a load per FMA, load-bound). x86 vector targets only.
HWY_INLINE void KeepInRegister(VF& v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

#if HWY_TARGET == HWY_AVX2
// The 8 × 8 block at x (row stride x_rs) transposed into y (row stride y_rs): unpacks
// within 128-bit halves, then 64-bit unpacks, then the halves exchanged (24 shuffles
// for 64 floats, where gathers take a load per float).
HWY_INLINE void TransposeSquare(const float* HWY_RESTRICT x, size_t x_rs, float* HWY_RESTRICT y, size_t y_rs) {
  const DF df;
  const hn::Repartition<double, DF> dd;
  VF r[8];
  for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(df, x + i * x_rs);
  VF t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = hn::InterleaveLower(df, r[2 * i], r[2 * i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[2 * i + 1] = hn::InterleaveUpper(df, r[2 * i], r[2 * i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  VF u[8];  // u[4h + c]: rows 4h…4h+3 of columns c and c + 4
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 2; ++c) {
      const auto lo = hn::BitCast(dd, t[4 * h + c]), hi = hn::BitCast(dd, t[4 * h + 2 + c]);
      u[4 * h + 2 * c] = hn::BitCast(df, hn::InterleaveLower(dd, lo, hi));
      u[4 * h + 2 * c + 1] = hn::BitCast(df, hn::InterleaveUpper(dd, lo, hi));
    }
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(df, u[4 + c], u[c]), df, y + c * y_rs);
    hn::StoreU(hn::ConcatUpperUpper(df, u[4 + c], u[c]), df, y + (c + 4) * y_rs);
  }
}
inline constexpr int64_t kTransposeSide = 8;
#elif ATTNLAB_DECODE_AVX512
// The 16 × 16 block, as the 8 × 8 one a level deeper: 32-bit unpacks of row pairs,
// 64-bit unpacks, then two rounds of 128-bit block shuffles. After the unpacks u[4g + c]
// holds, in its block k, rows 4g…4g+3 of column 4k + c; the block shuffles gather each
// column's four blocks in row order.
HWY_INLINE void TransposeSquare(const float* HWY_RESTRICT x, size_t x_rs, float* HWY_RESTRICT y, size_t y_rs) {
  __m512 r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(x + i * x_rs);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // per block: a0 b0 a1 b1
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // a2 b2 a3 b3
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d ablo = _mm512_castps_pd(t[4 * g]), abhi = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d cdlo = _mm512_castps_pd(t[4 * g + 2]), cdhi = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(ablo, cdlo));      // a0 b0 c0 d0
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(ablo, cdlo));  // a1 b1 c1 d1
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(abhi, cdhi));  // a2 b2 c2 d2
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(abhi, cdhi));  // a3 b3 c3 d3
  }
  // t[c], t[4 + c]: rows 0–7 of columns c, 8 + c and 4 + c, 12 + c; t[8 + c], t[12 + c]: rows 8–15.
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    _mm512_storeu_ps(y + c * y_rs, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
    _mm512_storeu_ps(y + (8 + c) * y_rs, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD));
    _mm512_storeu_ps(y + (4 + c) * y_rs, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88));
    _mm512_storeu_ps(y + (12 + c) * y_rs, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD));
  }
}
inline constexpr int64_t kTransposeSide = 16;
#else
// No register transpose: TransposeScores gathers a vector of keys at a time.
HWY_INLINE void TransposeSquare(const float*, size_t, float*, size_t) {}
inline constexpr int64_t kTransposeSide = 0;
#endif

// The lane sums of the fused scores' accumulators acc_out [R][8 keys][lanes] into
// s [R × 8]. AVX-512: a tree of shuffles for two rows' 16 sums (LaneSums16); AVX2: a tree
// of horizontal adds for a row's 8; else one reduction per key. Every tree adds the same
// pairs in the same order as SumOfLanes, so the sums are bitwise those of SumOfLanes.
#if ATTNLAB_DECODE_AVX512
// Lane i of the result is vector i's sum (vectors a[16·i, 16·i + 16), i < n ≤ 16, the
// others zero): 256-bit halves, then 128-bit blocks, then 64-bit pairs, then single lanes
// added. That leaves slot 4t + m's sum in lane 4m + t; vector 4(i % 4) + i / 4 read into
// slot i puts vector i's sum in lane i.
HWY_INLINE __m512 LaneSums16(const float* HWY_RESTRICT a, size_t n) {
  auto slot = [&](int i) {
    const size_t src = static_cast<size_t>(4 * (i % 4) + i / 4);
    return src < n ? _mm512_load_ps(a + src * 16) : _mm512_setzero_ps();
  };
  __m512 halves[8], blocks[4], pairs[2];
  for (int k = 0; k < 8; ++k) {
    const __m512 x = slot(2 * k), y = slot(2 * k + 1);
    halves[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 x = halves[2 * k], y = halves[2 * k + 1];
    blocks[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  }
  for (int k = 0; k < 2; ++k) {
    const __m512d x = _mm512_castps_pd(blocks[2 * k]), y = _mm512_castps_pd(blocks[2 * k + 1]);
    pairs[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(pairs[0], pairs[1], 0x88), _mm512_shuffle_ps(pairs[0], pairs[1], 0xDD));
}
#endif

template <int R>
HWY_INLINE void FusedLaneSums(const float* HWY_RESTRICT acc_out, float* HWY_RESTRICT s) {
  constexpr size_t kKeys = 8;
  const DF df;
  const size_t L = hn::Lanes(df);
#if ATTNLAB_DECODE_AVX512
  for (int r = 0; r < R; r += 2) {  // two rows' 16 scores per tree; an odd last row's 8 alone
    const __m512 sums = LaneSums16(acc_out + r * kKeys * L, r + 1 < R ? 16 : 8);
    if (r + 1 < R) _mm512_storeu_ps(s + r * kKeys, sums);
    else _mm512_mask_storeu_ps(s + r * kKeys, 0xFF, sums);
  }
#elif HWY_TARGET == HWY_AVX2
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, …]: two rounds leave each key's
  // sum in lanes j (keys 0–3) and j + 4 (keys 4–7) of y and z; one exchange of 128-bit
  // halves and an add put key j's whole sum in lane j.
  for (int r = 0; r < R; ++r) {
    const float* a = acc_out + r * kKeys * L;
    auto h = [&](int j) { return _mm256_hadd_ps(hn::Load(df, a + j * L).raw, hn::Load(df, a + (j + 1) * L).raw); };
    const __m256 y = _mm256_hadd_ps(h(0), h(2)), z = _mm256_hadd_ps(h(4), h(6));
    _mm256_storeu_ps(s + r * kKeys, _mm256_add_ps(_mm256_permute2f128_ps(y, z, 0x20), _mm256_permute2f128_ps(y, z, 0x31)));
  }
#else
  for (int r = 0; r < R; ++r) {
    const float* a = acc_out + r * kKeys * L;
    for (size_t j = 0; j < kKeys; ++j) s[r * kKeys + j] = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, a + j * L)));
  }
#endif
}

// AVX512_BF16's VDPBF16PS: each float lane += the two products of a pair of bfloat16
// values (32 multiply-adds per instruction). Issued by inline asm: Debian's Highway has
// no target with AVX512_BF16. Runs only where the CPU has it (DecodeStrategy::bf16_dots);
// elsewhere these are never called.
#if ATTNLAB_DECODE_AVX512
using Bf16Pairs = __m512i;
using Bf16Acc = __m512;
HWY_INLINE Bf16Pairs LoadBf16Pairs(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE Bf16Acc ZeroBf16Acc() { return _mm512_setzero_ps(); }
HWY_INLINE void StoreBf16Acc(Bf16Acc acc, float* aligned) { _mm512_store_ps(aligned, acc); }
HWY_INLINE Bf16Acc DotPairsBf16(Bf16Acc acc, Bf16Pairs a, Bf16Pairs b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#else
struct Bf16Pairs {};
struct Bf16Acc {};
HWY_INLINE Bf16Pairs LoadBf16Pairs(const void*) { return {}; }
HWY_INLINE Bf16Acc ZeroBf16Acc() { return {}; }
HWY_INLINE void StoreBf16Acc(Bf16Acc, float*) { HWY_ABORT("bfloat16 dot products on a target without them"); }
HWY_INLINE Bf16Acc DotPairsBf16(Bf16Acc acc, Bf16Pairs, Bf16Pairs) { return acc; }
#endif

// Two rows' online-softmax step on one vector (AVX-512; s holds row r's 8 scores then
// row r + 1's): when both rows' scaled scores are at or below their references m (the
// lazy max's common case, a NaN fails it), P = exp(x − m) into s, l += ΣP, and true; else
// false and nothing changed. The sum adds each half's lanes in the pairs SumOfLanes adds
// them over 8 lanes (k with k + 4, then 0 with 2, then 0 with 1): bitwise the rows alone.
// Elsewhere false: the rows go one at a time.
HWY_INLINE bool SoftmaxPairBelowMax(float* HWY_RESTRICT s, float scale0, float scale1, float m0, float m1, float& l0,
                                    float& l1) {
#if ATTNLAB_DECODE_AVX512
  const hn::Full512<float> d16;
  // Two floats' broadcasts, one per half: lo in lanes 0-7, hi in lanes 8-15.
  auto halves = [](float lo, float hi) { return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1); };
  const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s), halves(scale0, scale1));
  const __m512 vm = halves(m0, m1);
  if (_mm512_cmp_ps_mask(x, vm, _CMP_LE_OQ) != 0xFFFF) return false;
  const __m512 pr = ExpNonPositive(d16, hn::Vec512<float>{_mm512_sub_ps(x, vm)}).raw;
  _mm512_storeu_ps(s, pr);
  __m512 t = _mm512_add_ps(pr, _mm512_shuffle_f32x4(pr, pr, 0xB1));  // lane k + lane k + 4
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
  l0 += _mm512_cvtss_f32(t);
  l1 += _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));
  return true;
#else
  (void)s, (void)scale0, (void)scale1, (void)m0, (void)m1, (void)l0, (void)l1;
  return false;
#endif
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_TARGET_INL_H_
