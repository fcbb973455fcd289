// The fused decoding step's online softmax on a block of 8 keys, for one row and for the
// R rows of a block (two rows a vector on AVX-512). Included once per SIMD target.
//
// The running max is lazy (FlashAttention-4's conditional rescaling): m is a reference at
// or above every score seen, not their max. While a block's scaled scores are all at or
// below m, P = exp(x − m) and l += ΣP directly: no max reduction, no rescale of O, and a
// branch nearly always taken the same way. A block with a score above m (or a NaN, or the
// chunk's first block) takes the exact update with the reference set kLazyMaxHeadroom
// above the block's max, so later blocks rarely move it again. m + log l and O / l are
// what they were (any reference ≥ the max gives the same quotient); P ≤ e^−8 then, so
// nothing overflows that did not before, and keys more than 80 below the max (not 88)
// flush to zero, a relative e^−80 that float cannot see.
#if defined(ATTNLAB_ENGINE_DECODE_FUSED_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_FUSED_SOFTMAX_INL_H_
#undef ATTNLAB_ENGINE_DECODE_FUSED_SOFTMAX_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_FUSED_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "engine/decode_fused_parts-inl.h"
#include "engine/decode_target-inl.h"
#include "engine/exp-inl.h"
#include "engine/forward_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

inline constexpr float kLazyMaxHeadroom = 8.0f;

// The online-softmax step of one row on a block of kFusedKeys raw scores x (in place:
// they become P): the scale, then the update. Every key of the block is visible.
HWY_INLINE void FusedSoftmaxRow(float* x, float scale, float& m, float& l, bool& nan_score, float* o_row,
                                size_t dv_pad) {
  const hn::CappedTag<float, kFusedKeys> d8;
  const size_t N = hn::Lanes(d8);
  const auto vscale = hn::Set(d8, scale);
  if (m > kNegInf) {
    const auto vm = hn::Set(d8, m);
    bool below = true;  // false for a NaN too: it takes the exact update and its checks
    for (size_t j = 0; j < kFusedKeys; j += N)
      below &= hn::AllTrue(d8, hn::Le(hn::Mul(hn::LoadU(d8, x + j), vscale), vm));
    if (below) {
      auto sum = hn::Zero(d8);
      for (size_t j = 0; j < kFusedKeys; j += N) {
        const auto pj = ExpNonPositive(d8, hn::Sub(hn::Mul(hn::LoadU(d8, x + j), vscale), vm));
        sum = hn::Add(sum, pj);
        hn::StoreU(pj, d8, x + j);
      }
      l += hn::GetLane(hn::SumOfLanes(d8, sum));
      return;
    }
  }
  auto vmax = hn::Set(d8, kNegInf);
  for (size_t j = 0; j < kFusedKeys; j += N) {
    const auto xj = hn::Mul(hn::LoadU(d8, x + j), vscale);
    hn::StoreU(xj, d8, x + j);
    vmax = hn::Max(vmax, xj);
  }
  const float block_max = hn::GetLane(hn::MaxOfLanes(d8, vmax));
  // Every key of a fused block is visible (no mask takes this path): a block with no finite
  // max holds only NaN (which the max may skip) or −inf scores, which overflowed float32
  // and would pass for masked keys (MaskRow's rule), so the row is logged as overflowed.
  if (!(block_max > kNegInf)) nan_score = true;
  // −inf and NaN stay what they are with the headroom added, and the update treats them as before.
  SoftmaxUpdateRowInline(x, static_cast<int64_t>(kFusedKeys), block_max + kLazyMaxHeadroom, m, l, o_row,
                         static_cast<int64_t>(dv_pad), nullptr, d8);
}

// Softcap and ALiBi on the R rows of a block, s [R × kFusedKeys] raw q·k products of keys
// key … key + kFusedKeys, in place and in MaskRow's order (attention_variants.hpp): the scale,
// c·tanh(x/c), − slope·|diag − j|. The softmax then takes a scale of 1 (exact). A score that
// overflowed float32 becomes NaN first, as MaskRow marks it: c·tanh(±inf) = ±c would pass for
// a plausible score, and the NaN logs the row.
struct FusedTreatment {
  float cap = 0.0f, inv_cap = 0.0f;  // softcap's c and 1/c, or 0 for none
  bool reciprocal = true;            // x·(1/c): 1/c is a normal float (Plan::softcap_reciprocal)
  const float* slope = nullptr;      // [R] each row's ALiBi slope (0: none)
  const int64_t* diag = nullptr;     // [R] each row's diagonal as a key index
};

template <int R>
HWY_INLINE void FusedTreatScores(float* HWY_RESTRICT s, const float* scale, const FusedTreatment& t, int64_t key) {
  const hn::CappedTag<float, kFusedKeys> d8;
  const size_t N = hn::Lanes(d8);
  const auto vcap = hn::Set(d8, t.cap), vinv_cap = hn::Set(d8, t.inv_cap);
  const auto vnan = hn::Set(d8, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < R; ++r) {
    const auto vscale = hn::Set(d8, scale[r]), vslope = hn::Set(d8, t.slope[r]);
    for (size_t j = 0; j < kFusedKeys; j += N) {
      float* x_at = s + r * kFusedKeys + j;
      auto x = hn::Mul(hn::LoadU(d8, x_at), vscale);
      x = hn::IfThenElse(hn::IsFinite(x), x, vnan);
      if (t.cap != 0.0f) x = hn::Mul(vcap, SoftcapTanh(d8, t.reciprocal ? hn::Mul(x, vinv_cap) : hn::Div(x, vcap)));
      if (t.slope[r] != 0.0f) {  // |diag − j| exactly: integers below 2^24, as in MaskRow
        const auto to_diag = hn::Set(d8, static_cast<float>(t.diag[r] - key - static_cast<int64_t>(j)));
        x = hn::NegMulAdd(vslope, hn::Abs(hn::Sub(to_diag, hn::Iota(d8, 0.0f))), x);
      }
      hn::StoreU(x, d8, x_at);
    }
  }
}

// FusedSoftmaxRow for the R rows of a block, s [R × kFusedKeys]; m, l, nan_score and the
// rows of O (o, dv_pad apart) are the rows' own, row 0 first. From kFusedSoftmaxPairsMinRows
// (decode_strategy.hpp) rows on AVX-512 two rows share a vector. Two rows share a vector
// where both are below their references (SoftmaxPairBelowMax), else each goes alone:
// bitwise what the rows alone give.
template <int R>
HWY_INLINE void FusedSoftmaxRows(float* HWY_RESTRICT s, const float* scale, float* m, float* l, bool* nan_score,
                                 float* o, size_t dv_pad) {
  int r = 0;
  if constexpr (DecodeTarget::avx512 && R >= kFusedSoftmaxPairsMinRows) {
    static_assert(kFusedKeys == 8, "a vector holds two rows of 8 keys");
    for (; r + 1 < R; r += 2) {
      if (m[r] > kNegInf && m[r + 1] > kNegInf &&
          SoftmaxPairBelowMax(s + r * kFusedKeys, scale[r], scale[r + 1], m[r], m[r + 1], l[r], l[r + 1]))
        continue;
      for (int i = r; i < r + 2; ++i)
        FusedSoftmaxRow(s + i * kFusedKeys, scale[i], m[i], l[i], nan_score[i], o + i * dv_pad, dv_pad);
    }
  }
  for (; r < R; ++r) FusedSoftmaxRow(s + r * kFusedKeys, scale[r], m[r], l[r], nan_score[r], o + r * dv_pad, dv_pad);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_FUSED_SOFTMAX_INL_H_
