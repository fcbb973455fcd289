// Per-target forward of one query tile (FlashAttention-2's inner loop): the online
// softmax step between the two products, the running diagnostics, and the loop over key
// tiles. flash_forward_kernels.cpp explains the tiling; this file holds the tile, that TU the
// parallel loops. Included once per SIMD target (hence the toggle guard).
#if defined(ATTNLAB_ENGINE_FORWARD_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_FORWARD_TILE_INL_H_
#undef ATTNLAB_ENGINE_FORWARD_TILE_INL_H_
#else
#define ATTNLAB_ENGINE_FORWARD_TILE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "engine/bf16_products.hpp"
#include "engine/exp-inl.h"
#include "engine/gemm-inl.h"
#include "engine/philox-inl.h"
#include "engine/row_end.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// Running per-row diagnostics (see the comment at the top), in double.
struct RowDiag {
  double lo = 0, u2 = 0, u3 = 0, h = 0;  // over the non-max elements (h: over all)
};

// Per-thread buffers of the forward.
struct ForwardScratch {
  ScratchBuffer<float> s, o;      // S/P tile [Br × Bc], O accumulator [Br × dv_pad]
  ScratchBuffer<float> v;         // one key tile's V rows [Bc × dv_pad] (or pairs), when V is not packed whole
  ScratchBuffer<float> q;         // the query tile [Br × d_pad] converted to float (16-bit q only), or
                                  // as bfloat16 for the bfloat16 products
  ScratchBuffer<float> p16;       // P rounded to bfloat16 [Br × Bc] for its product (bfloat16 products only)
  ScratchBuffer<uint32_t> words;  // dropout's random words of one row [Bc + kDropoutSlack]
  float m[kBr], l[kBr], scale[kBr], slope[kBr];
  int64_t diagonal[kBr];  // each row's diagonal as a key index (ALiBi)
  TileRows rows;         // each row's key range [begin, end)
  bool nan_score[kBr];  // a visible score was NaN (see SoftmaxTile)
  RowDiag diag[kBr];
  ForwardScratch(const Plan& p)
      : s(Scratch(kBr * kBc)), o(Scratch(kBr * p.dv_pad)), v(Scratch(kBc * p.dv_pad)),
        q(Scratch(p.q.is_f32() ? 0 : kBr * p.d_pad)), p16(Scratch(Bf16Products(p) ? kBr * kBc / 2 : 0)),
        words(ScratchWords(p.dropout ? kBc + kDropoutSlack : 0)) {}
};

// Online-softmax update of one row of the tile: turns scores s into
// probabilities relative to the new running max, rescales the row's O. `width` is a
// whole number of vectors of df: full vectors for a tile, at most 8 lanes for the decode
// path's blocks of 8 keys (FusedSoftmaxRow). Always inlined: the decode path's fused step
// calls it for every row and block of 8 keys, and there a call spills the caller's
// vectors (every vector register is caller-saved) and hides the rows' independent
// chains from each other (results bitwise the same either way). Tiles call
// SoftmaxUpdateRow, the out-of-line copy: inlined there too, prefill was slower
// (docs/tuning.md).
template <class D = DF>
HWY_INLINE void SoftmaxUpdateRowInline(float* s, int64_t width, float tile_max, float& m, float& l, float* o_row,
                                       int64_t dv_pad, RowDiag* diag, D df = D()) {
  using V = hn::Vec<D>;
  const size_t L = hn::Lanes(df);
  const float m_new = std::max(m, tile_max);
  if (m_new == kNegInf) {  // nothing visible yet: P = 0
    std::memset(s, 0, sizeof(float) * static_cast<size_t>(width));
    return;
  }
  const float alpha = (m == kNegInf) ? 0.0f : (m == m_new) ? 1.0f : hn::GetLane(ExpNonPositive(df, hn::Set(df, m - m_new)));
  const V vm = hn::Set(df, m_new);
  V sum = hn::Zero(df);
  if (diag == nullptr) {
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      const V pj = ExpNonPositive(df, hn::Sub(hn::LoadU(df, s + j), vm));
      sum = hn::Add(sum, pj);
      hn::StoreU(pj, df, s + j);
    }
  } else {
    // Sums over the tile's elements below the max (u < 1 strictly) and the
    // count of elements equal to the max (u = 1); see the comment at the top.
    V s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df), hs = hn::Zero(df), neq = hn::Zero(df);
    const V one = hn::Set(df, 1.0f);
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      const V x = hn::Sub(hn::LoadU(df, s + j), vm);
      const V pj = ExpNonPositive(df, x);
      sum = hn::Add(sum, pj);
      hn::StoreU(pj, df, s + j);
      const auto below = hn::Lt(x, hn::Zero(df));
      const V pb = hn::IfThenElseZero(below, pj);
      s1 = hn::Add(s1, pb);
      const V p2 = hn::Mul(pb, pb);
      s2 = hn::Add(s2, p2);
      s3 = hn::MulAdd(p2, pb, s3);
      // u·(S − m), with 0·(−inf) for hidden keys avoided
      hs = hn::Add(hs, hn::IfThenElseZero(hn::Gt(pj, hn::Zero(df)), hn::Mul(pj, x)));
      neq = hn::Add(neq, hn::IfThenElseZero(hn::Eq(x, hn::Zero(df)), one));
    }
    const double t1 = hn::GetLane(hn::SumOfLanes(df, s1)), t2 = hn::GetLane(hn::SumOfLanes(df, s2)),
                 t3 = hn::GetLane(hn::SumOfLanes(df, s3)), th = hn::GetLane(hn::SumOfLanes(df, hs)),
                 n_eq = hn::GetLane(hn::SumOfLanes(df, neq));
    RowDiag& g = *diag;
    if (tile_max > m) {  // the max moved into this tile: one of its n_eq maxima is "the" max
      const double a = alpha, had = (m == kNegInf) ? 0.0 : 1.0;
      // Σ u (S − m) rescaled to the new max; 1 + lo is the old Σ u.
      g.h = (m == kNegInf) ? 0.0 : a * (g.h + (1.0 + g.lo) * (static_cast<double>(m) - m_new));
      g.lo = a * (g.lo + had) + t1 + (n_eq - 1);
      g.u2 = a * a * (g.u2 + had) + t2 + (n_eq - 1);
      g.u3 = a * a * a * (g.u3 + had) + t3 + (n_eq - 1);
    } else {  // ties with the current max count as "others"
      g.lo += t1 + n_eq;
      g.u2 += t2 + n_eq;
      g.u3 += t3 + n_eq;
    }
    g.h += th;
  }
  const float tile_sum = hn::GetLane(hn::SumOfLanes(df, sum));
  l = l * alpha + tile_sum;
  if (alpha != 1.0f) {
    const DF dfo;  // O's row: whole vectors (dv_pad)
    const VF va = hn::Set(dfo, alpha);
    for (size_t c = 0; c < static_cast<size_t>(dv_pad); c += hn::Lanes(dfo))
      hn::StoreU(hn::Mul(hn::LoadU(dfo, o_row + c), va), dfo, o_row + c);
  }
  m = m_new;
}
template <class D = DF>
void SoftmaxUpdateRow(float* s, int64_t width, float tile_max, float& m, float& l, float* o_row, int64_t dv_pad,
                      RowDiag* diag, D df = D()) {
  SoftmaxUpdateRowInline(s, width, tile_max, m, l, o_row, dv_pad, diag, df);
}

// Resets the running state of query rows [i0, i0 + rows) before their first key
// tile: m = −inf, l = 0, O = 0, no diagnostics yet; each row's scale, key range,
// diagonal and ALiBi slope.
void BeginQueryTile(const Plan& p, int64_t b, int64_t h, int64_t i0, int64_t rows, ForwardScratch& w) {
  std::memset(w.o.get(), 0, sizeof(float) * static_cast<size_t>(rows * p.dv_pad));
  w.rows.rows = rows;
  for (int64_t r = 0; r < rows; ++r) {
    w.m[r] = kNegInf;
    w.l[r] = 0.0f;
    w.scale[r] = p.scale(b, h, i0 + r);
    const detail::RowFrame f = p.row_frame(b, i0 + r);
    const detail::KeyRange kr = detail::key_range(f, p.options->causal, p.options->window);
    w.rows.begin[r] = kr.begin;
    w.rows.end[r] = kr.end;
    w.diagonal[r] = f.diag;
    w.slope[r] = p.alibi_slope(f.seq, h);
    w.diag[r] = RowDiag{};
    w.nan_score[r] = false;
  }
}

// The online-softmax step of row i of (b, h) on key tile [j0, j0 + nc): its raw scores
// s (a row of q·k products) are masked and scaled (MaskRow), become probabilities, and
// the row's running m, l, O (and diagnostics) are updated. `end` and `scale` are the
// row's key_end and scale_i. Shared by the forward's query tiles and the decode path.
[[maybe_unused]] void SoftmaxRow(const Plan& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t nc, int64_t end, float scale,
                float* s, float& m, float& l, bool& nan_score, float* o_row, RowDiag* diag) {
  const int64_t limit = std::clamp<int64_t>(end - j0, 0, nc);
  const float tile_max = MaskRow(p, b, h, i, j0, limit, TileWidth(nc), scale, 0.0f, s);
  // A NaN score (0 · ∞, ∞ − ∞ in a dot product, or a NaN input with the check off) may
  // be skipped by SIMD max or become the max. Beside finite scores it still poisons l
  // (exp(NaN) = NaN); a tile of nothing but NaN and hidden keys gives a max of −inf or
  // NaN and would pass for masked, so only then look for it.
  if (!(tile_max > kNegInf) && !nan_score)
    for (int64_t j = 0; j < limit; ++j) nan_score |= std::isnan(s[j]);
  SoftmaxUpdateRow(s, TileWidth(nc), tile_max, m, l, o_row, p.dv_pad, diag);
}

// The keys [j0, j0 + nc) of one key tile that rows [r0, r1) of a query tile starting at
// i0 see: the scores of those rows in w.s (row r at w.s + r·kBc, key j0 + j at column j).
struct SubTile {
  int64_t r0, r1, j0, nc, width;  // width: nc rounded up to whole vectors
  bool mask_mod;                  // a partial tile of mask_mod's BlockMask
};

// The online-softmax step between the two products: the tile's raw scores in
// w.s become probabilities, and each row's m, l, O (and diagnostics) are updated.
// With dropout, the probabilities that go on to P·V are those of the kept keys, times
// 1/(1 − p) (the sum l is of all of them: the lse is the softmax's, before dropout).
void SoftmaxTile(const Plan& p, int64_t b, int64_t h, int64_t i0, const SubTile& t, ForwardScratch& w, bool diag) {
  float* s = w.s.get();
  const TensorView<uint8_t> applied = p.dropout_mask;
  for (int64_t r = t.r0; r < t.r1; ++r) {
    const int64_t i = i0 + r;
    float* sr = s + r * kBc;
    RowTreatment rt;
    rt.b = b, rt.h = h, rt.i = i;
    rt.lo = std::clamp<int64_t>(w.rows.begin[r] - t.j0, 0, t.nc);
    rt.hi = std::clamp<int64_t>(w.rows.end[r] - t.j0, rt.lo, t.nc);
    rt.diag = w.diagonal[r];
    rt.slope = w.slope[r];
    rt.scale = w.scale[r];
    rt.mask_mod = t.mask_mod;
    const float tile_max = MaskRow(p, rt, t.j0, t.width, sr, nullptr);
    // A NaN score (0 · ∞, ∞ − ∞ in a dot product, or a NaN input with the check off) may
    // be skipped by SIMD max or become the max. Beside finite scores it still poisons l
    // (exp(NaN) = NaN); a tile of nothing but NaN and hidden keys gives a max of −inf or
    // NaN and would pass for masked, so only then look for it.
    if (!(tile_max > kNegInf) && !w.nan_score[r])
      for (int64_t j = rt.lo; j < rt.hi; ++j) w.nan_score[r] |= std::isnan(sr[j]);
    if (p.dropout) {
      DropoutWords(p.dropout_seed, b, h, i, t.j0, t.width, w.words.get());
      if (applied.present())  // the keys that entered the softmax and were kept
        for (int64_t j = rt.lo; j < rt.hi; ++j)
          applied(b, h, i, t.j0 + j) = sr[j] > kNegInf && w.words[static_cast<size_t>(j)] >= p.dropout_threshold;
    }
    SoftmaxUpdateRow(sr, t.width, tile_max, w.m[r], w.l[r], w.o.get() + r * p.dv_pad, p.dv_pad,
                     diag ? &w.diag[r] : nullptr);
    // Kept probabilities times 1/(1 − p) here rather than on O at the end: the backward's
    // dP then rounds as D = dO·O does (it multiplies V by 1/(1 − p) before dO·vᵀ), so that
    // dP − D cancels exactly where the row is one-hot, as without dropout.
    if (p.dropout) DropoutRow(w.words.get(), p.dropout_threshold, p.dropout_scale, t.width, sr, sr);
  }
}

// The sink of head h joins each row's softmax as one more score with no value row:
// the running max, sum (and diagnostics) take it in, O is only rescaled.
void AddSinks(const Plan& p, int64_t h, int64_t rows, ForwardScratch& w, bool diag) {
  const DF df;
  const auto L = static_cast<int64_t>(hn::Lanes(df));
  const float sink = p.sink(h);
  float* one = w.s.get();  // a pseudo-tile of one score, −inf past it
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < L; ++j) one[j] = j == 0 ? sink : kNegInf;
    SoftmaxUpdateRow(one, L, sink, w.m[r], w.l[r], w.o.get() + r * p.dv_pad, p.dv_pad,
                     diag ? &w.diag[r] : nullptr);
  }
}

// A finished row's O and L written (row_end.hpp's rules); an overflowed row logged for the
// entry point to report.
RowEnd FinishRow(const Plan& p, int64_t b, int64_t h, int64_t i, float m, float l, bool nan_score, const float* acc,
                 TensorView<float> out, TensorView<float> lse) {
  const auto& dm = p.dims;
  const RowEnd e = finish_row(m, l, nan_score, acc, dm.dv, out.row(b, h, i), out.stride(Axis::dim));
  if (e.overflow) p.overflowed_rows.record((b * dm.Hq + h) * dm.Nq + i);
  lse(b, h, i, 0) = e.lse;
  return e;
}

// v_head: the head's packed V rows [Nk][dv_pad], or nullptr to copy each key tile's rows here.
// Only the pairs of (query tile, key tile) in which some row sees some key are computed
// (TileRows::rect: the others are skipped, and so are those mask_mod's BlockMask or the
// boolean mask hides), and within a pair only the rows and keys that take part.
void ForwardQueryTile(const Plan& p, int64_t b, int64_t h, int64_t qt, const float* kt_head, const float* v_head,
                      ForwardScratch& w, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag) {
  const auto& dm = p.dims;
  const int64_t i0 = qt * kBr, rows = std::min(kBr, dm.Nq - i0);
  const auto L = static_cast<int64_t>(hn::Lanes(DF()));
  // Q is the A operand of S = Q Kᵀ (read by scalar broadcasts): any strides do. 16-bit
  // queries are converted once per query tile (Br·d values per Br·Nk·d products).
  const float* q_tile = nullptr;
  size_t q_rs = static_cast<size_t>(p.d_pad), q_ks = 1;
  // bfloat16 products: the query tile as bfloat16 rows of d_pad (even) values, zero past d.
  const bool bf16 = Bf16Products(p);
  auto* const q16 = reinterpret_cast<bfloat16*>(w.q.get());
  if (bf16) {
    bf16::pack_rows(p.q.as<bfloat16>(), b, h, i0, rows, dm.d, p.d_pad, q16);
  } else if (p.q.is_f32()) {
    q_tile = p.q.f32().row(b, h, i0);
    q_rs = static_cast<size_t>(p.q.stride(Axis::seq)), q_ks = static_cast<size_t>(p.q.stride(Axis::dim));
  } else {
    PackRows(p.q, b, h, i0, rows, dm.d, p.d_pad, w.q.get());
    q_tile = w.q.get();
  }
  BeginQueryTile(p, b, h, i0, rows, w);
  const auto [t_first, t_last] = w.rows.key_tiles();
  int64_t computed = 0;
  for (int64_t t = t_first; t <= t_last; ++t) {
    const int64_t j0 = t * kBc, nc = std::min(kBc, dm.Nk - j0);
    const TileRect rect = w.rows.rect(j0, j0 + nc);
    if (rect.empty()) continue;
    const BlockMask::Block block = p.mask_block(b, h, qt, t);
    if (block == BlockMask::Block::empty) continue;
    if (p.tile_masked_out(b, h, i0 + rect.r0, i0 + rect.r1, rect.c0, rect.c1)) continue;
    ++computed;
    // The keys [c0, c1) that the rows see, from a whole vector: the tile's packed Kᵀ
    // (row stride TileWidth(nc)) is read from column `col`.
    const int64_t col = (rect.c0 - j0) / L * L;
    SubTile st{rect.r0, rect.r1, j0 + col, rect.c1 - j0 - col, 0, block == BlockMask::Block::partial};
    st.width = (st.nc + L - 1) / L * L;
    const int64_t rr = rect.r1 - rect.r0;
    float* s = w.s.get() + rect.r0 * kBc;
    if (bf16) {
      const auto* kt_pairs = reinterpret_cast<const uint32_t*>(kt_head + t * dm.d * kBc);
      bf16::gemm(rr, st.width, round_up(dm.d, 2), q16 + rect.r0 * p.d_pad, p.d_pad, kt_pairs + col,
                 KtPairStride(p, nc), s, kBc, false);
      SoftmaxTile(p, b, h, i0, st, w, diag != nullptr);
      // P rounded to bfloat16 for its product, as FlashAttention does (l sums it unrounded).
      bfloat16* p16 = reinterpret_cast<bfloat16*>(w.p16.get()) + rect.r0 * kBc;
      bf16::round_rows(s, kBc, rr, st.width, p16, kBc);
      const uint32_t* v_pairs = reinterpret_cast<const uint32_t*>(w.v.get());
      if (v_head != nullptr)
        v_pairs = reinterpret_cast<const uint32_t*>(v_head) + st.j0 / 2 * VPairStride(p);
      else
        bf16::pack_value_pairs(p.v.as<bfloat16>(), b, h / dm.group(), st.j0, st.nc, dm.dv, p.dv_pad, VPairStride(p),
                               reinterpret_cast<uint32_t*>(w.v.get()));
      bf16::gemm(rr, p.dv_pad, st.nc, p16, kBc, v_pairs, VPairStride(p), w.o.get() + rect.r0 * p.dv_pad, p.dv_pad,
                 true);
      continue;
    }
    Gemm(static_cast<size_t>(rr), static_cast<size_t>(st.width), static_cast<size_t>(dm.d),
         q_tile + rect.r0 * q_rs, q_rs, q_ks, kt_head + t * dm.d * kBc + col, static_cast<size_t>(TileWidth(nc)), s,
         kBc, false);
    SoftmaxTile(p, b, h, i0, st, w, diag != nullptr);
    const float* v_rows = w.v.get();
    if (v_head != nullptr)
      v_rows = v_head + st.j0 * p.dv_pad;
    else  // V not packed whole (see ForwardImpl): these keys' rows only
      PackRows(p.v, b, h / dm.group(), st.j0, st.nc, dm.dv, p.dv_pad, w.v.get());
    Gemm(static_cast<size_t>(rr), static_cast<size_t>(p.dv_pad), static_cast<size_t>(st.nc), s, kBc, 1, v_rows,
         static_cast<size_t>(p.dv_pad), w.o.get() + rect.r0 * p.dv_pad, static_cast<size_t>(p.dv_pad), true);
  }
  count_tiles(&TileCounts::forward, computed);
  if (bf16) count_tiles(&TileCounts::forward_bf16_products, computed);
  if (p.sinks) AddSinks(p, h, rows, w, diag != nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const RowEnd e = FinishRow(p, b, h, i, w.m[r], w.l[r], w.nan_score[r], w.o.get() + r * p.dv_pad, out, lse);
    if (diag == nullptr) continue;
    float pmax = e.fill, ent = e.fill, fro = e.fill;
    if (!e.empty) {
      const RowDiag& g = w.diag[r];
      const double l = 1.0 + g.lo, pm = 1.0 / l, eps = g.lo / l, e2 = g.u2 / (l * l), e3 = g.u3 / (l * l * l);
      pmax = static_cast<float>(pm);
      ent = static_cast<float>(std::log1p(g.lo) - g.h / l);  // log1p: near one-hot, 1 + lo rounds to 1
      fro = static_cast<float>(pm * pm * eps * eps + 2 * pm * pm * e2 + (e2 - 2 * e3) + e2 * e2);
    }
    if (diag->max_prob.present()) diag->max_prob(b, h, i, 0) = pmax;
    if (diag->entropy.present()) diag->entropy(b, h, i, 0) = ent;
    if (diag->jacobian_fro_sq.present()) diag->jacobian_fro_sq(b, h, i, 0) = fro;
  }
}


}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_FORWARD_TILE_INL_H_
