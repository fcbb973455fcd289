// The decode path's merge: a row's partials (m_c, l_c, O_c), one per key chunk, combined
// in chunk order, m = max m_c, l = Σ e^{m_c − m} l_c, O = Σ e^{m_c − m} O_c, then O/l and
// L = m + log l as the tiled path finishes a row (FinishRow). Included once per SIMD target.
#if defined(ATTNLAB_ENGINE_DECODE_MERGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_MERGE_INL_H_
#undef ATTNLAB_ENGINE_DECODE_MERGE_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_MERGE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "engine/decode_work-inl.h"
#include "engine/exp-inl.h"
#include "engine/forward_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// A row's n partials, chunk c's at m[c·stride], l[c·stride] and o + c·o_stride (cols values),
// merged in chunk order into acc (which may be chunk 0's O), then a sink: one more logit with
// no value row (−inf: none; attention_variants.hpp), as a partial of its own with m = sink,
// l = 1, O = 0. Returns the merged m (NaN if a chunk's was) and l. Both decode paths merge
// here: the contiguous one (MergeRow) and the paged cache's (kv_cache_decode_kernels.cpp).
HWY_INLINE MergedRow MergePartials(int64_t n, const float* m, const float* l, int64_t stride, const float* o,
                                   int64_t o_stride, int64_t cols, float sink, float* acc) {
  const DF df;
  const auto L = static_cast<int64_t>(hn::Lanes(df));
  MergedRow r;
  bool nan_m = false;
  for (int64_t c = 0; c < n; ++c) {
    nan_m |= std::isnan(m[c * stride]);
    r.m = std::max(r.m, m[c * stride]);
  }
  r.m = std::max(r.m, sink);
  if (nan_m) r.m = std::numeric_limits<float>::quiet_NaN();
  // The chunks' sums rescaled to the common max, added in chunk order.
  if (r.m > kNegInf && r.m < std::numeric_limits<float>::infinity()) {
    for (int64_t c = 0; c < n; ++c) {
      const float mc = m[c * stride];
      const float alpha = mc == r.m    ? 1.0f
                          : mc == kNegInf ? 0.0f
                                          : hn::GetLane(ExpNonPositive(df, hn::Set(df, mc - r.m)));
      r.l += alpha * l[c * stride];
      const float* oc = o + c * o_stride;
      const VF va = hn::Set(df, alpha);
      for (int64_t col = 0; col < cols; col += L) {
        const VF x = hn::LoadU(df, oc + col);
        hn::StoreU(c == 0 ? hn::Mul(va, x) : hn::MulAdd(va, x, hn::LoadU(df, acc + col)), df, acc + col);
      }
    }
    if (sink > kNegInf) r.l += hn::GetLane(ExpNonPositive(df, hn::Set(df, sink - r.m)));
  }
  return r;
}

// Row r of key/value head kv (batch item kvl): its partials merged in chunk order and
// the finished O and L written (FinishRow's rules for overflowed and empty rows).
void MergeRow(const DecodeWork& w, int64_t kvl, int64_t kv, int64_t r, TensorView<float> out, TensorView<float> lse) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const int64_t b = kv / dm.Hkv, hk = kv % dm.Hkv, h = w.head_of(hk, r), i = w.query_of(r);
  const int64_t at0 = kvl * w.n_chunks * w.rows + r;  // chunk c's partial row: at0 + c·rows
  bool nan_score = false;
  for (int64_t c = 0; c < w.n_chunks; ++c) nan_score |= w.nan_score[at0 + c * w.rows];
  float* acc = w.o + at0 * p.dv_pad;  // into chunk 0's O
  const MergedRow mr = MergePartials(w.n_chunks, w.m + at0, w.l + at0, w.rows, acc, w.rows * p.dv_pad, p.dv_pad,
                                     p.sinks ? p.sink(h) : kNegInf, acc);
  FinishRow(p, b, h, i, mr.m, mr.l, nan_score, acc, out, lse);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_MERGE_INL_H_
