// Per-target pieces of the decode path (decode_path.hpp says when it runs): the work of
// one split-KV item, (batch, key/value head, key chunk), and the ordered merge of the
// items' partial results. decode_kernels.cpp holds the parallel loops. Included once
// per SIMD target (hence the toggle guard).
//
// Rows. The M = group·Nq query rows that share key/value head hk are one problem:
// row r is query head hk·group + r / Nq, query r % Nq. They are taken kBr at a time
// (a row block); every row block of a key tile uses the tile while it is in L2, so K
// and V are read from memory once per key/value head whatever the group size.
//
// Scores without a packed Kᵀ. The tiled path computes S = Q·Kᵀ with Kᵀ packed (a
// transposing copy per key, repaid by the 64 query rows of every query tile of the
// head). Here a key is used by M rows, often 1, so the copy would cost more than the
// product. Instead Sᵀ = K·Qᵀ: the microkernel's A operand is read one scalar at a time
// with any strides, so K's rows are read in place, and Qᵀ (the B operand) is a small
// packed block [d × W]. Each score is then the same chain of fused multiply-adds over
// c = 0 … d−1 as the tiled path's (fma(k_c, q_c, ·) = fma(q_c, k_c, ·)), so S is bitwise
// the tiled path's and the backward's, which recomputes P = exp(scale·S − L) and needs
// S − L = 0 exactly where a row is one-hot (docs/engine.md, "Tolerances"). Sᵀ is then
// transposed into rows (M·nc moves per M·nc·(d + dv) multiply-adds) for the shared
// per-row score treatment (SoftmaxRow: MaskRow's masks and scale, the online softmax).
//
// Values in place: O += P·V reads V's rows from the caller's memory when they are
// unit-stride and a whole number of vectors long (RowsOperand), else copies the tile's
// rows once into L2-resident scratch for all row blocks.
//
// Split-KV. Each item runs the online softmax over its own chunk of keys (m, l and an
// unnormalised O per row: its partial). MergeRow combines a row's partials in chunk
// order, m = max m_c, l = Σ e^{m_c − m} l_c, O = Σ e^{m_c − m} O_c, then O/l and
// L = m + log l as the tiled path finishes a row (FinishRow). The chunks are fixed by
// the shapes (kDecodeChunk), so every row's sums are the same sequence of float
// operations for any number of threads: bitwise identical results, as in the tiled path.
#if defined(ATTNLAB_ENGINE_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_INL_H_
#undef ATTNLAB_ENGINE_DECODE_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "engine/decode_path.hpp"
#include "engine/exp-inl.h"
#include "engine/forward_tile-inl.h"
#include "engine/gemm-inl.h"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// What every item of one call reads (the Plan, per-row values computed once) and the
// partials of the current batch of key/value heads, which items write and MergeRow reads.
struct DecodeWork {
  const Plan* p = nullptr;
  int64_t rows = 0;            // M = group·Nq rows per key/value head
  int64_t n_chunks = 0;        // key chunks per (batch, key/value head)
  const int64_t* end = nullptr;    // [B, Nq] key_end of query i of batch b
  const float* scale = nullptr;    // [B, Hq, Nq] scale_i
  // Partials, per item (key/value head of the batch, chunk) = kvl·n_chunks + c:
  float* o = nullptr;          // [items, M, dv_pad] unnormalised O
  float* m = nullptr;          // [items, M] running max
  float* l = nullptr;          // [items, M] running sum
  bool* nan_score = nullptr;   // [items, M] a visible score was NaN (see SoftmaxRow)

  int64_t head_of(int64_t hk, int64_t r) const { return hk * p->dims.group() + r / p->dims.Nq; }
  int64_t query_of(int64_t r) const { return r % p->dims.Nq; }
};

// Per-thread buffers of the decode path.
struct DecodeScratch {
  hwy::AlignedFreeUniquePtr<float[]> qt;  // Qᵀ of a row block [d × W_pad]
  hwy::AlignedFreeUniquePtr<float[]> st;  // Sᵀ = K·Qᵀ of a key tile [Bc × W_pad]
  hwy::AlignedFreeUniquePtr<float[]> s;   // S, then P, of the row block [Br × Bc]
  hwy::AlignedFreeUniquePtr<float[]> v;   // the tile's V rows [Bc × dv_pad], when not read in place
  explicit DecodeScratch(const Plan& p)
      : qt(Scratch(p.dims.d * kBr)), st(Scratch(kBc * kBr)), s(Scratch(kBr * kBc)), v(Scratch(kBc * p.dv_pad)) {}
};

// True if no row of block [r0, r0 + W) may see any key of tile [j0, j0 + nc): by
// causality and padding (key_end), or because the boolean mask hides them all.
bool DecodeBlockHidden(const DecodeWork& w, int64_t b, int64_t hk, int64_t r0, int64_t W, int64_t j0, int64_t nc) {
  const Plan& p = *w.p;
  const int64_t Nq = p.dims.Nq;
  bool hidden = true;
  for (int64_t r = r0; r < r0 + W && hidden; ++r) hidden = w.end[b * Nq + w.query_of(r)] <= j0;
  if (hidden) return true;
  // The block's rows, cut where the query head changes: runs of consecutive queries.
  for (int64_t r = r0; r < r0 + W;) {
    const int64_t i0 = w.query_of(r), run = std::min(r0 + W - r, Nq - i0);
    if (!p.tile_masked_out(b, w.head_of(hk, r), i0, i0 + run, j0, j0 + nc)) return false;
    r += run;
  }
  return true;
}

// One row block on one key tile: S = scores, the online-softmax step, O += P·V.
// k_rows: K[b, hk, j0, :] (any strides); v_rows [nc × dv_pad], row stride v_rs.
void DecodeBlock(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t r0, int64_t W, int64_t j0,
                 int64_t nc, const float* v_rows, size_t v_rs, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t w_pad = round_up(W, L), width = TileWidth(nc);
  // Qᵀ [d × w_pad], zero past the block's W rows.
  float* qt = sc.qt.get();
  const int64_t q_ks = p.q.stride(kDim);
  for (int64_t r = 0; r < W; ++r) {
    const float* q = p.q.row(b, w.head_of(hk, r0 + r), w.query_of(r0 + r));
    for (int64_t c = 0; c < dm.d; ++c) qt[c * w_pad + r] = q[c * q_ks];
  }
  for (int64_t c = 0; c < dm.d; ++c)
    for (int64_t r = W; r < w_pad; ++r) qt[c * w_pad + r] = 0.0f;
  // Sᵀ [nc × w_pad] = K·Qᵀ, K's rows read in place.
  float* st = sc.st.get();
  Gemm(static_cast<size_t>(nc), static_cast<size_t>(w_pad), static_cast<size_t>(dm.d), p.k.row(b, hk, j0),
       static_cast<size_t>(p.k.stride(kSeq)), static_cast<size_t>(p.k.stride(kDim)), qt, static_cast<size_t>(w_pad),
       st, static_cast<size_t>(w_pad), false);
  // S [W × width] (row stride kBc), then the per-row softmax step.
  float* s = sc.s.get();
  const int64_t row0 = item * w.rows;  // this item's first partial row
  for (int64_t r = 0; r < W; ++r) {
    float* srow = s + r * kBc;
    for (int64_t j = 0; j < nc; ++j) srow[j] = st[j * w_pad + r];
    for (int64_t j = nc; j < width; ++j) srow[j] = 0.0f;
    const int64_t row = r0 + r, h = w.head_of(hk, row), i = w.query_of(row);
    const int64_t at = row0 + row;
    SoftmaxRow(p, b, h, i, j0, nc, w.end[b * dm.Nq + i], w.scale[(b * dm.Hq + h) * dm.Nq + i], srow, w.m[at], w.l[at],
               w.nan_score[at], w.o + at * p.dv_pad, nullptr);
  }
  // O [W × dv_pad] += P [W × nc] · V [nc × dv_pad]
  Gemm(static_cast<size_t>(W), static_cast<size_t>(p.dv_pad), static_cast<size_t>(nc), s, kBc, 1, v_rows, v_rs,
       w.o + (row0 + r0) * p.dv_pad, static_cast<size_t>(p.dv_pad), true);
}

// Item `item` of the batch: key/value head kv = b·Hkv + hk, chunk c. Writes its partial.
void DecodeChunk(const DecodeWork& w, int64_t item, int64_t kv, int64_t c, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const int64_t b = kv / dm.Hkv, hk = kv % dm.Hkv;
  const int64_t row0 = item * w.rows;
  std::fill(w.m + row0, w.m + row0 + w.rows, kNegInf);
  std::fill(w.l + row0, w.l + row0 + w.rows, 0.0f);
  std::fill(w.nan_score + row0, w.nan_score + row0 + w.rows, false);
  std::memset(w.o + row0 * p.dv_pad, 0, sizeof(float) * static_cast<size_t>(w.rows * p.dv_pad));
  // Keys past the last query's key_end are hidden from every row (key_end grows with i).
  const int64_t keys_end = std::min({dm.Nk, (c + 1) * kDecodeChunk, w.end[b * dm.Nq + dm.Nq - 1]});
  for (int64_t j0 = c * kDecodeChunk; j0 < keys_end; j0 += kBc) {
    const int64_t nc = std::min(kBc, dm.Nk - j0);  // a whole tile (masking hides what lies past keys_end)
    size_t v_rs = 0;
    const float* v_rows = nullptr;  // copied only if some block needs it
    for (int64_t r0 = 0; r0 < w.rows; r0 += kBr) {
      const int64_t W = std::min(kBr, w.rows - r0);
      if (DecodeBlockHidden(w, b, hk, r0, W, j0, nc)) continue;
      if (v_rows == nullptr) v_rows = RowsOperand(p.v, b, hk, j0, nc, dm.dv, p.dv_pad, sc.v.get(), v_rs);
      DecodeBlock(w, item, b, hk, r0, W, j0, nc, v_rows, v_rs, sc);
    }
  }
}

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
  }
  FinishRow(p, b, h, i, m, l, nan_score, acc, out, lse);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_INL_H_
