// The fused decoding step: a row block of few rows (DecodeStrategy::fused) takes the keys
// 8 at a time through scores, online softmax and O += P·V, asking for the K and V lines
// ahead as it goes, so that the memory is kept busy while the core computes (the tile
// step asks in bursts, a tile's V rows during its scores and none during its product).
// Its parts are in decode_fused_parts-inl.h and decode_fused_softmax-inl.h. Included once
// per SIMD target.
//
// It takes the common case only: K and V read in place, every row seeing every key of the
// tile (no mask, window edge or cache end inside it), whole blocks of 8 keys, and of the
// treatments between the scale and the softmax softcap and ALiBi only (no score_mod or
// mask_mod). Sinks are merged after the chunks (MergeRow) and do not concern it.
#if defined(ATTNLAB_ENGINE_DECODE_FUSED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_FUSED_INL_H_
#undef ATTNLAB_ENGINE_DECODE_FUSED_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_FUSED_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "engine/decode_fused_parts-inl.h"
#include "engine/decode_fused_softmax-inl.h"
#include "engine/decode_target-inl.h"
#include "engine/decode_work-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// Whether the fused step takes tile [j0, j0 + nc) of batch b (the strategy said the call
// may): whole blocks of keys, and every row's key range covering the tile.
bool FusedTakesTile(const DecodeWork& w, int64_t b, int64_t j0, int64_t nc) {
  const Plan& p = *w.p;
  if (nc % static_cast<int64_t>(kFusedKeys) != 0) return false;
  for (int64_t i = 0; i < p.dims.Nq; ++i) {
    const int64_t at = b * p.dims.Nq + i;
    if (w.begin[at] > j0 || w.end[at] < j0 + nc) return false;
  }
  return true;
}

// The fused step for the R = w.rows rows of item `item` on a tile of nc keys: K's rows at
// k_rows, V's at v_rows (the tile's first row first), `ahead` keys from there that may be
// asked for (the item's keys). kBesideLoads: requests beside the loads; kRowVectors > 0:
// row order (vectors per row), else requests spread over each block; kBf16Dots: scores
// on VDPBF16PS. sc.q holds the item's packed queries. Kept out of line: inlined into
// DecodeBlock it made the grouped-heads step slower.
template <int R, bool kBesideLoads, class E, bool kBf16Dots, int kRowVectors>
HWY_NOINLINE void FusedDecodeBlock(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t key0, int64_t nc,
                                   int64_t ahead, InPlaceRows<E> k_rows, InPlaceRows<E> v_rows, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const DecodeStrategy& st = w.strategy;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df), dv_pad = static_cast<size_t>(p.dv_pad), d = static_cast<size_t>(dm.d);
  const int64_t row0 = item * w.rows;
  float* o = w.o + row0 * p.dv_pad;  // O [R × dv_pad], this item's rows
  // The rows' running maximum, sum and NaN flag, kept in locals for the call and written back
  // at its end: the partials of the items other threads run share their cache lines, which
  // would pass between the cores at every block of 8 keys (docs/tuning.md).
  float m[R], l[R];
  bool nan_score[R];
  std::copy_n(w.m + row0, R, m), std::copy_n(w.l + row0, R, l), std::copy_n(w.nan_score + row0, R, nan_score);
  float scale[R];
  for (int r = 0; r < R; ++r) scale[r] = w.scale[(b * dm.Hq + w.head_of(hk, r)) * dm.Nq + w.query_of(r)];
  // Softcap and ALiBi are applied to each block's raw products (FusedTreatScores), and the
  // softmax then takes a scale of 1; without them it scales the products itself.
  const bool treated = p.softcap != 0.0f || p.alibi;
  float slope[R], unit_scale[R];
  int64_t diag[R];
  FusedTreatment treatment;
  if (treated) {
    for (int r = 0; r < R; ++r) {
      const detail::RowFrame f = p.row_frame(b, w.query_of(r));
      slope[r] = p.alibi_slope(f.seq, w.head_of(hk, r)), diag[r] = f.diag, unit_scale[r] = 1.0f;
    }
    treatment = {p.softcap, p.softcap != 0.0f ? 1.0f / p.softcap : 0.0f, p.softcap_reciprocal, slope, diag};
  }
  // The product's register blocks, R rows × NV vectors of columns (DecodeStrategy::value_vectors).
  constexpr int kNarrowNV = fused_narrow_value_vectors(R);
  const bool three = st.value_vectors == 3;
  const size_t NV = three ? 3 : kNarrowNV;
  // Keys per group of the scores: R × KB accumulators.
  constexpr int KB = R <= 2 ? 4 : 2;
  // 64-byte lines asked for as each column block of the product starts (and on AVX-512 as
  // each group of keys of the scores starts): all of the K and V lines of the block
  // kFusedAhead keys ahead, spread over those calls.
  const RowCodec<E> kc = RowCodec<E>::Of(p, true, hk), vc = RowCodec<E>::Of(p, false, hk);
  const size_t k_lines = (kc.RowBytes(d) + 63) / 64, v_lines = (vc.RowBytes(dv_pad) + 63) / 64;
  const size_t calls = (dv_pad / L + NV - 1) / NV + (DecodeTarget::avx512 ? kFusedKeys / KB : 0);
  const size_t per_call = (std::max(k_lines, v_lines) * kFusedKeys + calls - 1) / calls;
  HWY_ALIGN float s[R * kFusedKeys];  // S, then P, of the block [R × kFusedKeys]
  // With kBf16Dots, the rows' queries as bfloat16 bits [R × d]: the high half of each packed
  // float, exact, as they were bfloat16 values.
  HWY_ALIGN uint16_t q16[kBf16Dots ? R * kBf16DotsMaxDim : 1];
  if constexpr (kBf16Dots)
    for (int r = 0; r < R; ++r)
      for (size_t c = 0; c < d; ++c)
        q16[r * d + c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(sc.q.get()[r * p.d_pad + c]) >> 16);
  // Row 0's raw scores · 0, accumulated: NaN if K held a NaN or ±inf (check_finite, see DecodeBlock).
  const hn::CappedTag<float, kFusedKeys> d8;
  auto finite8 = hn::Zero(d8);
  for (int64_t j = 0; j < nc; j += static_cast<int64_t>(kFusedKeys)) {
    const E* k = k_rows.data + static_cast<size_t>(j) * k_rows.stride;
    const E* v = v_rows.data + static_cast<size_t>(j) * v_rows.stride;
    // The block kFusedAhead keys ahead, if it is the item's; else none (LinePrefetcher::At
    // then asks for this block's lines again). In row order none of these.
    const bool ask = kRowVectors == 0 && j + static_cast<int64_t>(kFusedAhead + kFusedKeys) <= ahead;
    const size_t pf_rows = ask ? kFusedKeys : 0, pf_key = static_cast<size_t>(j) + (ask ? kFusedAhead : 0);
    LinePrefetcher kpf{reinterpret_cast<const char*>(RowAhead(p, k_rows, true, b, hk, key0, nc, pf_key)),
                       k_rows.stride * sizeof(E), k_lines, pf_rows};
    LinePrefetcher vpf{reinterpret_cast<const char*>(RowAhead(p, v_rows, false, b, hk, key0, nc, pf_key)),
                       v_rows.stride * sizeof(E), v_lines, pf_rows};
    // In row order, the next block's first lines as this one starts (DecodeStrategy::
    // asks_next_block, compiled in): a float32 block of 8 keys at d = 128 is one 4 KiB page, which the
    // CPU's prefetchers do not cross. One row asks for the whole first row, more its first line.
    if constexpr (kRowVectors > 0 && row_order_asks_next_block(R, std::is_same_v<E, float>)) {
      const size_t next = static_cast<size_t>(j) + kFusedKeys;
      if (static_cast<int64_t>(next + kFusedKeys) <= ahead) {
        PrefetchRows(RowAhead(p, k_rows, true, b, hk, key0, nc, next), k_rows.stride, 0, 1, d * sizeof(E),
                     /*first_line=*/R > 1);
        PrefetchRows(RowAhead(p, v_rows, false, b, hk, key0, nc, next), v_rows.stride, 0, 1, dv_pad * sizeof(E),
                     /*first_line=*/R > 1);
      }
    }
    if constexpr (kRowVectors > 0 && kBf16Dots)
      FusedScoresOnBf16DotsInRowOrder<R, kRowVectors / 2>(q16, d, reinterpret_cast<const bfloat16*>(k), k_rows.stride, s);
    else if constexpr (kRowVectors > 0)
      FusedScoresInRowOrder<R, kRowVectors>(sc.q.get(), static_cast<size_t>(p.d_pad), k, k_rows.stride, s);
    else if constexpr (kBf16Dots)
      FusedScoresOnBf16Dots<R, KB, kBesideLoads>(d, q16, d, reinterpret_cast<const bfloat16*>(k), k_rows.stride, s,
                                                 per_call, kpf, vpf);
    else
      FusedScores<R, KB, kBesideLoads>(d, sc.q.get(), static_cast<size_t>(p.d_pad), kc, k, k_rows.stride, s, per_call,
                                       kpf, vpf);
    if (w.kv_suspect != nullptr)
      for (size_t j8 = 0; j8 < kFusedKeys; j8 += hn::Lanes(d8)) finite8 = hn::MulAdd(hn::LoadU(d8, s + j8), hn::Zero(d8), finite8);
    if (treated) FusedTreatScores<R>(s, scale, treatment, key0 + j);
    FusedSoftmaxRows<R>(s, treated ? unit_scale : scale, m, l, nan_score, o, dv_pad);
    if constexpr (kRowVectors > 0) FusedValuesInRowOrder<R, kRowVectors>(s, v, v_rows.stride, o);
    else if (three) FusedValues<R, 3, kBesideLoads>(0, dv_pad, s, vc, v, v_rows.stride, o, per_call, kpf, vpf);
    else FusedValues<R, kNarrowNV, kBesideLoads>(0, dv_pad, s, vc, v, v_rows.stride, o, per_call, kpf, vpf);
  }
  std::copy_n(m, R, w.m + row0), std::copy_n(l, R, w.l + row0), std::copy_n(nan_score, R, w.nan_score + row0);
  if (w.kv_suspect != nullptr && !hn::AllFalse(d8, hn::IsNaN(finite8))) w.kv_suspect->store(true, std::memory_order_relaxed);
}

// FusedDecodeBlock for the strategy's rows, reads and products. Only the variants the
// strategy can choose on this target are compiled: off AVX-512, 2 to 4 rows of float32
// and of each code with spread requests; on it 1 to 8 rows of each type in each reading
// order, bfloat16 dot products from 3 rows, rows of 4 vectors (d = 64) from 5 rows only
// with them, and each code's rows beside the loads.
template <class E>
void FusedDecodeRows(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t key0, int64_t nc, int64_t ahead,
                     InPlaceRows<E> k_rows, InPlaceRows<E> v_rows, DecodeScratch& sc) {
  const DecodeStrategy& st = w.strategy;
  auto block = [&](auto r, auto on_dots) {
    constexpr int R = decltype(r)::value;
    constexpr bool kDots = decltype(on_dots)::value;
    if constexpr (kIsCode<E>) {
      // Codes: the strategy's one way of reading them (every way gives the same bits).
      FusedDecodeBlock<R, DecodeTarget::avx512, E, false, 0>(w, item, b, hk, key0, nc, ahead, k_rows, v_rows, sc);
    } else {
      if constexpr (DecodeTarget::avx512) {
        if (st.reads == FusedReads::beside_loads)
          return FusedDecodeBlock<R, true, E, kDots, 0>(w, item, b, hk, key0, nc, ahead, k_rows, v_rows, sc);
        if (st.row_vectors == 8)
          return FusedDecodeBlock<R, false, E, kDots, 8>(w, item, b, hk, key0, nc, ahead, k_rows, v_rows, sc);
        if constexpr (R <= 4 || kDots)
          if (st.row_vectors == 4)
            return FusedDecodeBlock<R, false, E, kDots, 4>(w, item, b, hk, key0, nc, ahead, k_rows, v_rows, sc);
      }
      FusedDecodeBlock<R, false, E, kDots, 0>(w, item, b, hk, key0, nc, ahead, k_rows, v_rows, sc);
    }
  };
  auto for_rows = [&](auto r) {
    constexpr int R = decltype(r)::value;
    if constexpr (DecodeTarget::avx512 && std::is_same_v<E, bfloat16> && R >= 3)
      if (st.bf16_dots) return block(r, std::true_type());
    block(r, std::false_type());
  };
  // The rows this target fuses (decode_strategy.hpp), each compiled for its R.
  constexpr int kMinRows = static_cast<int>(fused_min_rows(DecodeTarget::avx512));
  constexpr int kMaxRows = static_cast<int>(fused_max_rows(DecodeTarget::avx512));
  const bool ran = [&]<int... I>(std::integer_sequence<int, I...>) {
    return ((st.rows == kMinRows + I ? (for_rows(std::integral_constant<int, kMinRows + I>()), true) : false) || ...);
  }(std::make_integer_sequence<int, kMaxRows - kMinRows + 1>());
  if (!ran) HWY_ABORT("fused decoding step: %d rows", static_cast<int>(st.rows));
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_FUSED_INL_H_
