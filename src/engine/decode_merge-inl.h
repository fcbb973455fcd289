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

// Row r of key/value head kv (batch item kvl): its partials merged in chunk order and
// the finished O and L written (FinishRow's rules for overflowed and empty rows).
void MergeRow(const DecodeWork& w, int64_t kvl, int64_t kv, int64_t r, TensorView<float> out, TensorView<float> lse) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df);
  const int64_t b = kv / dm.Hkv, hk = kv % dm.Hkv, h = w.head_of(hk, r), i = w.query_of(r);
  auto at = [&](int64_t c) { return (kvl * w.n_chunks + c) * w.rows + r; };
  float m = kNegInf;
  bool nan_score = false, nan_m = false;
  for (int64_t c = 0; c < w.n_chunks; ++c) {
    nan_m |= std::isnan(w.m[at(c)]);
    nan_score |= w.nan_score[at(c)];
    m = std::max(m, w.m[at(c)]);
  }
  // A sink is one more logit with no value row (attention_variants.hpp): a partial of its
  // own with m = sink, l = 1, O = 0, merged after the chunks.
  const bool sink = p.sinks;
  if (sink) m = std::max(m, p.sink(h));
  if (nan_m) m = std::numeric_limits<float>::quiet_NaN();
  // The chunks' sums rescaled to the common max, added in chunk order into chunk 0's O.
  float* acc = w.o + at(0) * p.dv_pad;
  float l = 0.0f;
  if (m > kNegInf && m < std::numeric_limits<float>::infinity()) {
    for (int64_t c = 0; c < w.n_chunks; ++c) {
      const float mc = w.m[at(c)];
      const float alpha = mc == m ? 1.0f : mc == kNegInf ? 0.0f : hn::GetLane(ExpNonPositive(df, hn::Set(df, mc - m)));
      l += alpha * w.l[at(c)];
      const float* oc = w.o + at(c) * p.dv_pad;
      const VF va = hn::Set(df, alpha);
      for (size_t col = 0; col < static_cast<size_t>(p.dv_pad); col += L) {
        const VF x = hn::LoadU(df, oc + col);
        hn::StoreU(c == 0 ? hn::Mul(va, x) : hn::MulAdd(va, x, hn::LoadU(df, acc + col)), df, acc + col);
      }
    }
    if (sink) l += hn::GetLane(ExpNonPositive(df, hn::Set(df, p.sink(h) - m)));
  }
  FinishRow(p, b, h, i, m, l, nan_score, acc, out, lse);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_MERGE_INL_H_
