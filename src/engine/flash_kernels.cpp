// The fused attention kernels, forward and backward, compiled once per SIMD
// target (hwy/foreach_target.h) and chosen at run time (HWY_DYNAMIC_DISPATCH).
//
// ============================================================================
// How the work is tiled (FlashAttention-2, Dao 2023, on a CPU)
// ============================================================================
//
// Shapes: q [B, Hq, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv]. Query head
// h reads key/value head hk = h / (Hq / Hkv). The Nq × Nk score matrix S is
// never stored: it is cut into tiles of Br = 64 query rows × Bc = 256 keys
// (plan.hpp), and only one tile of S (64 × 256 floats = 64 KB, L2-resident)
// exists per thread at a time. Memory therefore grows as N·d, not N². A wide
// key tile divides the per-row costs of each tile (two reductions, a rescale of
// the row of O, the bookkeeping) over more products and lengthens the PV
// product's inner loop; measured on Zen 4 at N = 4096, d = 64, forward: 58 % of
// peak at Bc = 64, 66 % at 128, 75–80 % at 256 (backward 69 → 74 → 80 %);
// Bc = 512 or Br = 32 or 128 were no better. A tile with fewer keys (the last
// one, or a short sequence) is packed and computed only to TileWidth(nc), its
// length rounded up to whole vectors.
//
// Packing. The caller's tensors may have any non-negative strides, and the
// products want unit-stride, vector-aligned rows, so operands are copied into
// padded buffers first (row lengths rounded up to 16 floats, the padding
// zero so that it adds nothing):
//   forward:  for each key/value head, Kᵀ per key tile [d × Bc] and V rows
//             [Nk_pad × dv_pad], packed once and shared by all query tiles
//             (packing per tile pair would cost a transpose of Bc·d elements
//             per Br·Bc·(d+dv) FMAs, i.e. 20-40 %). Heads are packed in batches
//             of at most 64 MB so that memory stays linear in N and bounded.
//   backward: each thread packs its own key tile (K rows, Kᵀ, Vᵀ) once and
//             each query tile (Q, dO rows) per tile pair (Br·(d+dv) copies per
//             5·Br·Bc·d FMAs: about 1 %).
//
// Forward, for each (batch, query head, query tile) — the parallel loop — and
// then for each key tile t that causality and padding leave visible (the loop
// stops at the first tile past the tile's last key_end; a tile the boolean
// mask hides entirely is skipped):
//     S   = Q_tile · Kᵀ_t                      [Br × Bc]   microkernel
//     S   = scale_i · S (+ additive mask, −inf where hidden)
//     m'  = max(m, rowmax S);  α = exp(m − m');  P = exp(S − m')
//     l   = α·l + rowsum P;    O = α·O + P · V_t          microkernel
// and at the end O /= l, L = m + log l (online softmax: m and l are the running
// max and sum, so one pass over the keys suffices). A row that never sees a
// finite score keeps m = −inf and gets O = 0, L = −inf.
//
// Diagnostics (optional) ride on the same pass with the same rescaling. With
// u_j = exp(S_j − m) the row keeps, in double, lo = Σ_{j≠argmax} u_j, the
// sums of u_j² and u_j³ over the same j, and h = Σ_j u_j (S_j − m). Then
// l = 1 + lo, p_max = 1/l, entropy = log1p(lo) − h/l (both terms ≥ 0) and
//   ‖J‖_F² = p*²ε² + 2p*²e₂ + e₂ − 2e₃ + e₂²,  ε = lo/l, e_k = Σ_{j≠*} p_j^k,
// every term of which is ≥ 0 (e₂ − 2e₃ = Σ q²(1 − 2q) and q ≤ ½ for a
// non-max element). The closed form Σp² − 2Σp³ + (Σp²)² would instead cancel
// to 0 near one-hot, where the lab needs values like 1e-20. When the running
// max moves, the old max element joins the "others" with weight α.
//
// Backward, parallel over key tiles (each thread owns dK_t and dV_t of its
// tile, summed over all the query heads that share the key/value head):
//     P   = exp(scale_i · Q Kᵀ − L)     (recomputed; L from the forward)
//     dV += Pᵀ dO;   dP = dO Vᵀ;   dS = scale_i · P ∘ (dP − D),  D = rowsum(dO∘O)
//     dK += dSᵀ Q;   dQ_tile += dS K
// D is computed once per row in a first parallel pass (which also zeroes dq).
//
// Determinism and dQ. Every key tile adds into every query tile's dQ, so the
// sums must be ordered or results would depend on thread timing (the reason
// FlashAttention-2's backward is not deterministic, its issue #414). Options:
//   (a) per-thread copies of dQ, reduced at the end: memory threads·N·d, and
//       the rounding depends on which tiles each thread took: not identical
//       across thread counts;
//   (b) a fixed number of dQ partials reduced in a fixed order: deterministic,
//       but memory C·N·d (C = 4 is 64 MB at N = 65536, d = 64);
//   (c) a separate dQ pass over query tiles: deterministic and no memory, but
//       it recomputes S and dP: 7 products instead of 5 (40 % more work);
//   (d) ordered accumulation: each query tile's dQ receives the key tiles'
//       contributions in the fixed order t = 0, 1, 2, ... A thread computes
//       its dS·K contribution into a private 64 × d buffer (no waiting), then
//       waits until the query tile's counter says tile t−1 has added its
//       share, adds, and bumps the counter.
// We use (d): no extra memory beyond one tile per thread, no recomputation,
// and the floating-point sum for every element of dQ is the same sequence of
// additions whatever the number of threads, so results are bitwise identical
// for 1, 2, 3 ... threads and from run to run. There are no floating-point
// atomics: the counters are integers with acquire/release ordering. Key tiles
// are handed out in increasing order from an atomic counter, so the thread that
// an add waits for is always running (or done): no deadlock. Query tiles are
// visited from last to first: with causal masking tile t starts at a later
// query tile than tile t−1 and rarely has to wait for it. Waits are short in
// practice: neighbouring key tiles move in lockstep, one tile pair apart.
// Key tiles that a query tile cannot see (causality, padding) are a suffix of
// the key tiles, and both sides skip them without touching the counter.
//
// Precision: float32 in, float32 accumulation throughout (like the naive
// matmul + softmax + matmul it replaces), exp by ExpNonPositive (exp-inl.h:
// the softmax's arguments are ≤ 0, which allows a cheaper exp than Highway's
// contrib/math; its measured maximum error is stated there), scale applied in float.
// ============================================================================

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "engine/flash_kernels.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/flash_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "engine/exp-inl.h"
#include "engine/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Columns of a key tile with nc keys that the products and the softmax touch:
// nc rounded up to whole vectors, not kBc, so that short sequences (the
// training study's N = 16…64) do not pay for a full tile of padding.
int64_t TileWidth(int64_t nc) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  return std::min(kBc, (nc + L - 1) / L * L);
}

hwy::AlignedFreeUniquePtr<float[]> Scratch(int64_t n) {
  auto p = hwy::AllocateAligned<float>(static_cast<size_t>(std::max<int64_t>(n, 1)));
  HWY_ASSERT(p);
  return p;
}

// dst[r · dst_stride + c] = src row r, element c, for r < rows, c < cols;
// zero for c in [cols, padded_cols). Rows come from a strided view.
void PackRows(ConstView<float> x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
              int64_t padded_cols, float* dst) {
  const int64_t st = x.stride(kDim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x.row(b, h, r0 + r);
    float* d = dst + r * padded_cols;
    if (st == 1) {
      std::memcpy(d, src, static_cast<size_t>(cols) * sizeof(float));
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = src[c * st];
    }
    for (int64_t c = cols; c < padded_cols; ++c) d[c] = 0.0f;
  }
}

// Rows [r0, r0 + rows) of x as a B operand of the products (vector loads): x's
// own memory when its rows are unit-stride and a whole number of vectors long,
// else a padded copy in `scratch`. Sets `row_stride`.
const float* RowsOperand(ConstView<float> x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                         int64_t padded_cols, float* scratch, size_t& row_stride) {
  if (x.stride(kDim) == 1 && cols == padded_cols) {
    row_stride = static_cast<size_t>(x.stride(kSeq));
    return x.row(b, h, r0);
  }
  PackRows(x, b, h, r0, rows, cols, padded_cols, scratch);
  row_stride = static_cast<size_t>(padded_cols);
  return scratch;
}

// dst[c · w + j] = x[b, h, j0 + j, c] for j < n, zero for j in [n, w), where
// w = TileWidth(n): the transposed key tile [cols × w]. Every tile but the last
// has w = kBc; a short last tile is stored narrow, so that a short sequence
// with a large head dim (the training study: N = 16, d = 1024) packs and
// touches d·16 floats per head, not d·kBc.
void PackTransposed(ConstView<float> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols, float* dst) {
  const int64_t w = TileWidth(n);
  // Writes run along dst rows (contiguous), reads gather down the key rows: a
  // scattered write per element was ~6 % of the forward's time.
  const int64_t st = x.stride(kDim), rs = x.stride(kSeq);
  const float* src = n > 0 ? x.row(b, h, j0) : nullptr;
  for (int64_t c = 0; c < cols; ++c) {
    float* d = dst + c * w;
    for (int64_t j = 0; j < n; ++j) d[j] = src[j * rs + c * st];
    for (int64_t j = n; j < w; ++j) d[j] = 0.0f;
  }
}

// Turns a raw row of q·k products into scaled, masked scores minus `offset`
// (0 in the forward, L_i in the backward): entries j ≥ limit (causality, padding, the tile's tail)
// and keys the boolean mask hides become −inf; the additive mask is added.
// s has `width` entries (the tile's key count rounded up to whole vectors,
// TileWidth), the row's stride stays kBc.
float RowMax(const float* s, int64_t width);

// Returns the row's max after masking (−inf if nothing is visible).
float MaskRow(const Plan& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t limit, int64_t width, float scale,
              float offset, float* s) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vscale = hn::Set(df, scale), vlimit = hn::Set(df, static_cast<float>(limit)), vninf = hn::Set(df, kNegInf);
  const AttentionOptions<float>& o = *p.options;
  const float* am = detail::mask_row(o.additive_mask, b, h, i);
  // With an additive mask the offset is subtracted after adding it, in the
  // forward's order of roundings (the forward's max is of scale·S + M).
  const VF voff = hn::Set(df, am == nullptr ? offset : 0.0f);
  VF vmax = vninf;
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
    // Not one fused multiply-subtract: the backward must round scale·S exactly
    // as the forward did, so that S − L is exactly 0 at a one-hot row's max
    // (P = 1, as in the forward), not a rounding residue.
    VF x = hn::Sub(hn::Mul(hn::LoadU(df, s + j), vscale), voff);
    if (static_cast<int64_t>(j + L) > limit) x = hn::IfThenElse(hn::Lt(hn::Iota(df, static_cast<float>(j)), vlimit), x, vninf);
    vmax = hn::Max(vmax, x);
    hn::StoreU(x, df, s + j);
  }
  if (const uint8_t* bm = detail::mask_row(o.bool_mask, b, h, i)) {
    const int64_t st = o.bool_mask.stride(kDim);
    for (int64_t j = 0; j < limit; ++j)
      if (bm[(j0 + j) * st] == 0) s[j] = kNegInf;
  }
  if (am != nullptr) {
    const int64_t st = o.additive_mask.stride(kDim);
    for (int64_t j = 0; j < limit; ++j) s[j] = (s[j] + am[(j0 + j) * st]) - offset;
  }
  if (am != nullptr || o.bool_mask.present()) return RowMax(s, width);
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
}

float RowMax(const float* s, int64_t width) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF m = hn::Set(df, kNegInf);
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) m = hn::Max(m, hn::LoadU(df, s + j));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------

// Running per-row diagnostics (see the comment at the top), in double.
struct RowDiag {
  double lo = 0, u2 = 0, u3 = 0, h = 0;  // over the non-max elements (h: over all)
};

// Per-thread buffers of the forward.
struct ForwardScratch {
  hwy::AlignedFreeUniquePtr<float[]> s, o;  // S/P tile [Br × Bc], O accumulator [Br × dv_pad]
  float m[kBr], l[kBr], scale[kBr];
  int64_t end[kBr];
  RowDiag diag[kBr];
  ForwardScratch(const Plan& p)
      : s(Scratch(kBr * kBc)), o(Scratch(kBr * p.dv_pad)) {}
};

// Online-softmax update of one row of the tile: turns scores s into
// probabilities relative to the new running max, rescales the row's O.
void SoftmaxUpdateRow(float* s, int64_t width, float tile_max, float& m, float& l, float* o_row, int64_t dv_pad,
                      RowDiag* diag) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const float m_new = std::max(m, tile_max);
  if (m_new == kNegInf) {  // nothing visible yet: P = 0
    std::memset(s, 0, sizeof(float) * static_cast<size_t>(width));
    return;
  }
  const float alpha = (m == kNegInf) ? 0.0f : (m == m_new) ? 1.0f : hn::GetLane(ExpNonPositive(df, hn::Set(df, m - m_new)));
  const VF vm = hn::Set(df, m_new);
  VF sum = hn::Zero(df);
  if (diag == nullptr) {
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      const VF pj = ExpNonPositive(df, hn::Sub(hn::LoadU(df, s + j), vm));
      sum = hn::Add(sum, pj);
      hn::StoreU(pj, df, s + j);
    }
  } else {
    // Sums over the tile's elements below the max (u < 1 strictly) and the
    // count of elements equal to the max (u = 1); see the comment at the top.
    VF s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df), hs = hn::Zero(df), neq = hn::Zero(df);
    const VF one = hn::Set(df, 1.0f);
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      const VF x = hn::Sub(hn::LoadU(df, s + j), vm);
      const VF pj = ExpNonPositive(df, x);
      sum = hn::Add(sum, pj);
      hn::StoreU(pj, df, s + j);
      const auto below = hn::Lt(x, hn::Zero(df));
      const VF pb = hn::IfThenElseZero(below, pj);
      s1 = hn::Add(s1, pb);
      const VF p2 = hn::Mul(pb, pb);
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
    const VF va = hn::Set(df, alpha);
    for (size_t c = 0; c < static_cast<size_t>(dv_pad); c += L)
      hn::StoreU(hn::Mul(hn::LoadU(df, o_row + c), va), df, o_row + c);
  }
  m = m_new;
}

// Resets the running state of query rows [i0, i0 + rows) before their first key
// tile: m = −inf, l = 0, O = 0, no diagnostics yet; each row's scale and key_end.
void BeginQueryTile(const Plan& p, int64_t b, int64_t h, int64_t i0, int64_t rows, ForwardScratch& w) {
  std::memset(w.o.get(), 0, sizeof(float) * static_cast<size_t>(rows * p.dv_pad));
  for (int64_t r = 0; r < rows; ++r) {
    w.m[r] = kNegInf;
    w.l[r] = 0.0f;
    w.scale[r] = p.scale(b, h, i0 + r);
    w.end[r] = p.key_end(b, i0 + r);
    w.diag[r] = RowDiag{};
  }
}

// The online-softmax step between the two products: the tile's raw scores in
// w.s become probabilities, and each row's m, l, O (and diagnostics) are updated.
void SoftmaxTile(const Plan& p, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t nc,
                 ForwardScratch& w, bool diag) {
  const int64_t width = TileWidth(nc);
  float* s = w.s.get();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t limit = std::clamp<int64_t>(w.end[r] - j0, 0, nc);
    const float tile_max = MaskRow(p, b, h, i0 + r, j0, limit, width, w.scale[r], 0.0f, s + r * kBc);
    SoftmaxUpdateRow(s + r * kBc, width, tile_max, w.m[r], w.l[r], w.o.get() + r * p.dv_pad, p.dv_pad,
                     diag ? &w.diag[r] : nullptr);
  }
}

void ForwardQueryTile(const Plan& p, int64_t b, int64_t h, int64_t qt, const float* kt_head, const float* v_head,
                      ForwardScratch& w, TensorView<float> out, TensorView<float> lse, const RowDiagnostics* diag) {
  const auto& dm = p.dims;
  const int64_t i0 = qt * kBr, rows = std::min(kBr, dm.Nq - i0);
  // Q is the A operand of S = Q Kᵀ (read by scalar broadcasts): any strides do.
  const float* q_tile = p.q.row(b, h, i0);
  const size_t q_rs = static_cast<size_t>(p.q.stride(kSeq)), q_ks = static_cast<size_t>(p.q.stride(kDim));
  BeginQueryTile(p, b, h, i0, rows, w);
  for (int64_t t = 0; t < p.n_ktiles; ++t) {
    const int64_t j0 = t * kBc, nc = std::min(kBc, dm.Nk - j0);
    if (p.tile_hidden(b, i0 + rows, j0)) break;  // and every later tile
    if (p.tile_masked_out(b, h, i0, i0 + rows, j0, j0 + nc)) continue;
    float* s = w.s.get();
    const int64_t width = TileWidth(nc);
    Gemm(rows, width, dm.d, q_tile, q_rs, q_ks, kt_head + t * dm.d * kBc, width, s, kBc, false);
    SoftmaxTile(p, b, h, i0, rows, j0, nc, w, diag != nullptr);
    Gemm(rows, p.dv_pad, nc, s, kBc, 1, v_head + j0 * p.dv_pad, p.dv_pad, w.o.get(), p.dv_pad, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* orow = out.row(b, h, i);
    const int64_t st = out.stride(kDim);
    const float* acc = w.o.get() + r * p.dv_pad;
    // A score that overflowed float (|scale·q·k| > 3.4e38, or inf − inf inside the
    // dot product) leaves m = +inf or NaN, or l = NaN. Such a row has no answer in
    // float32: it gets L = NaN, which flash_forward's caller turns into an Error
    // (exceptions cannot leave the parallel region).
    const bool overflow = std::isnan(w.m[r]) || w.m[r] == std::numeric_limits<float>::infinity() ||
                          std::isnan(w.l[r]);
    const bool empty = overflow || w.m[r] == kNegInf || !(w.l[r] > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / w.l[r];
    for (int64_t c = 0; c < dm.dv; ++c) orow[c * st] = empty ? 0.0f : acc[c] * inv;
    lse(b, h, i, 0) = overflow ? std::numeric_limits<float>::quiet_NaN()
                      : empty  ? kNegInf
                               : w.m[r] + std::log(w.l[r]);
    if (diag == nullptr) continue;
    float pmax = 0, ent = 0, fro = 0;
    if (!empty) {
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

void ForwardImpl(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics* diag) {
  const auto& dm = p.dims;
  // Kᵀ tiles [n_ktiles][d][Bc], the last one [d][TileWidth] (PackTransposed)
  const int64_t kt_floats = dm.d * ((p.n_ktiles - 1) * kBc + TileWidth(dm.Nk - (p.n_ktiles - 1) * kBc));
  const int64_t v_floats = dm.Nk * p.dv_pad;  // V rows [Nk][dv_pad]
  const int64_t per_head = std::max<int64_t>(kt_floats + v_floats, 1);
  const int64_t n_kv = dm.B * dm.Hkv;
  constexpr int64_t kPackBudget = (int64_t{64} << 20) / static_cast<int64_t>(sizeof(float));
  const int64_t heads_per_batch = std::clamp<int64_t>(kPackBudget / per_head, 1, n_kv);
  auto packed = Scratch(heads_per_batch * per_head);
  const int64_t group = dm.group();

  for (int64_t kv0 = 0; kv0 < n_kv; kv0 += heads_per_batch) {
    const int64_t nkv = std::min(heads_per_batch, n_kv - kv0);
    float* const base = packed.get();
    const int64_t n_pack = nkv * p.n_ktiles;
#pragma omp parallel for num_threads(p.threads) schedule(static)
    for (int64_t it = 0; it < n_pack; ++it) {
      const int64_t kvl = it / p.n_ktiles, t = it % p.n_ktiles;
      const int64_t b = (kv0 + kvl) / dm.Hkv, hk = (kv0 + kvl) % dm.Hkv;
      const int64_t j0 = t * kBc, nc = std::min(kBc, dm.Nk - j0);
      float* head = base + kvl * per_head;
      PackTransposed(p.k, b, hk, j0, nc, dm.d, head + t * dm.d * kBc);
      float* vrows = head + kt_floats + j0 * p.dv_pad;
      PackRows(p.v, b, hk, j0, nc, dm.dv, p.dv_pad, vrows);  // O += P V reads rows < nc only
    }
    const int64_t n_items = nkv * group * p.n_qtiles;
#pragma omp parallel num_threads(p.threads)
    {
      ForwardScratch w(p);
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < n_items; ++it) {
        const int64_t kvl = it / (group * p.n_qtiles), rest = it % (group * p.n_qtiles);
        const int64_t g = rest / p.n_qtiles, qt = rest % p.n_qtiles;
        const int64_t b = (kv0 + kvl) / dm.Hkv, hk = (kv0 + kvl) % dm.Hkv, h = hk * group + g;
        const float* head = base + kvl * per_head;
        ForwardQueryTile(p, b, h, qt, head, head + kt_floats, w, out, lse, diag);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------
namespace {

struct BackwardScratch {
  // key tile, packed once per work item
  hwy::AlignedFreeUniquePtr<float[]> kt;   // Kᵀ [d × Bc]
  hwy::AlignedFreeUniquePtr<float[]> kr;   // K rows [Bc × d_pad]
  hwy::AlignedFreeUniquePtr<float[]> vt;   // Vᵀ [dv × Bc]
  hwy::AlignedFreeUniquePtr<float[]> dk;   // dK accumulator [Bc × d_pad]
  hwy::AlignedFreeUniquePtr<float[]> dv;   // dV accumulator [Bc × dv_pad]
  // query tile, packed per tile pair
  hwy::AlignedFreeUniquePtr<float[]> qr;   // Q rows [Br × d_pad]
  hwy::AlignedFreeUniquePtr<float[]> dor;  // dO rows [Br × dv_pad]
  hwy::AlignedFreeUniquePtr<float[]> pt;   // P [Br × Bc]
  hwy::AlignedFreeUniquePtr<float[]> ds;   // dP, then dS [Br × Bc]
  hwy::AlignedFreeUniquePtr<float[]> dq;   // this pair's dQ contribution [Br × d_pad]
  explicit BackwardScratch(const Plan& p)
      : kt(Scratch(p.dims.d * kBc)), kr(Scratch(kBc * p.d_pad)), vt(Scratch(p.dims.dv * kBc)),
        dk(Scratch(kBc * p.d_pad)), dv(Scratch(kBc * p.dv_pad)), qr(Scratch(kBr * p.d_pad)),
        dor(Scratch(kBr * p.dv_pad)), pt(Scratch(kBr * kBc)), ds(Scratch(kBr * kBc)), dq(Scratch(kBr * p.d_pad)) {}
};

struct BackwardArgs {
  const Plan* p;
  ConstView<float> lse, grad_out;
  TensorView<float> dq, dk, dv;
  const float* D;      // [B, Hq, Nq] rowsum(dO ∘ O)
  const float* scale;  // [B, Hq, Nq] scale_i
  std::atomic<int64_t>* counters;  // [B, Hq, n_qtiles] key tiles already added into the query tile's dQ
};

void WaitFor(const std::atomic<int64_t>& c, int64_t value) {
  int spins = 0;
  while (c.load(std::memory_order_acquire) != value) {
    if (++spins < 1024) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

// dQ, dK, dV contributions of one (query tile, key tile) pair; dQ's goes to w.dq.
void BackwardPair(const BackwardArgs& a, int64_t b, int64_t h, int64_t qt, int64_t j0, int64_t nc,
                  BackwardScratch& w) {
  const Plan& p = *a.p;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df);
  const int64_t i0 = qt * kBr, rows = std::min(kBr, dm.Nq - i0);
  const int64_t row0 = (b * dm.Hq + h) * dm.Nq + i0;  // index into D and scale
  size_t q_rs = 0, do_rs = 0;
  const float* Qr = RowsOperand(p.q, b, h, i0, rows, dm.d, p.d_pad, w.qr.get(), q_rs);
  const float* dOr = RowsOperand(a.grad_out, b, h, i0, rows, dm.dv, p.dv_pad, w.dor.get(), do_rs);
  float* P = w.pt.get();
  float* dS = w.ds.get();
  const int64_t width = TileWidth(nc);
  // S = Q Kᵀ, then P = exp(scale_i·S − L_i) with hidden keys at 0.
  Gemm(rows, width, dm.d, Qr, q_rs, 1, w.kt.get(), width, P, kBc, false);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* pr = P + r * kBc;
    const float Li = a.lse(b, h, i, 0);
    if (Li == kNegInf) {  // fully masked row: no gradient
      std::memset(pr, 0, sizeof(float) * kBc);
      continue;
    }
    const int64_t limit = std::clamp<int64_t>(p.key_end(b, i) - j0, 0, nc);
    MaskRow(p, b, h, i, j0, limit, width, a.scale[row0 + r], Li, pr);  // scale_i·S − L_i
    // L ≥ S holds exactly, so clamping the exponent at 0 changes nothing in exact
    // arithmetic, but stops a rounded L (stored in float) from making P > 1 or inf
    // when scores are huge.
    for (size_t j = 0; j < static_cast<size_t>(width); j += L)
      hn::StoreU(ExpNonPositive(df, hn::Min(hn::LoadU(df, pr + j), hn::Zero(df))), df, pr + j);
  }
  // dV += Pᵀ dO
  Gemm(nc, p.dv_pad, rows, P, 1, kBc, dOr, do_rs, w.dv.get(), p.dv_pad, true);
  // dP = dO Vᵀ;  dS = scale_i · P ∘ (dP − D_i)
  Gemm(rows, width, dm.dv, dOr, do_rs, 1, w.vt.get(), width, dS, kBc, false);
  for (int64_t r = 0; r < rows; ++r) {
    const VF vD = hn::Set(df, a.D[row0 + r]), vs = hn::Set(df, a.scale[row0 + r]);
    float* pr = P + r * kBc;
    float* dr = dS + r * kBc;
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      const VF x = hn::Mul(hn::LoadU(df, pr + j), hn::Sub(hn::LoadU(df, dr + j), vD));
      hn::StoreU(hn::Mul(x, vs), df, dr + j);
    }
  }
  // dK += dSᵀ Q;  dQ_pair = dS K
  Gemm(nc, p.d_pad, rows, dS, 1, kBc, Qr, q_rs, w.dk.get(), p.d_pad, true);
  Gemm(rows, p.d_pad, nc, dS, kBc, 1, w.kr.get(), p.d_pad, w.dq.get(), p.d_pad, false);
}

void BackwardKeyTile(const BackwardArgs& a, int64_t b, int64_t hk, int64_t t, BackwardScratch& w) {
  const Plan& p = *a.p;
  const auto& dm = p.dims;
  const int64_t j0 = t * kBc, nc = std::min(kBc, dm.Nk - j0);
  PackTransposed(p.k, b, hk, j0, nc, dm.d, w.kt.get());
  PackRows(p.k, b, hk, j0, nc, dm.d, p.d_pad, w.kr.get());
  PackTransposed(p.v, b, hk, j0, nc, dm.dv, w.vt.get());
  std::memset(w.dk.get(), 0, sizeof(float) * static_cast<size_t>(nc * p.d_pad));
  std::memset(w.dv.get(), 0, sizeof(float) * static_cast<size_t>(nc * p.dv_pad));
  const int64_t group = dm.group();
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    for (int64_t qt = p.n_qtiles - 1; qt >= 0; --qt) {
      const int64_t i0 = qt * kBr, rows = std::min(kBr, dm.Nq - i0);
      if (p.tile_hidden(b, i0 + rows, j0)) continue;  // a suffix of key tiles: no counter either
      const bool masked = p.tile_masked_out(b, h, i0, i0 + rows, j0, j0 + nc);
      if (!masked) BackwardPair(a, b, h, qt, j0, nc, w);
      std::atomic<int64_t>& c = a.counters[(b * dm.Hq + h) * p.n_qtiles + qt];
      WaitFor(c, t);
      if (!masked) {
        const int64_t st = a.dq.stride(kDim);
        for (int64_t r = 0; r < rows; ++r) {
          float* dst = a.dq.row(b, h, i0 + r);
          const float* src = w.dq.get() + r * p.d_pad;
          for (int64_t col = 0; col < dm.d; ++col) dst[col * st] += src[col];
        }
      }
      c.store(t + 1, std::memory_order_release);
    }
  }
  for (int64_t j = 0; j < nc; ++j) {
    float* dkr = a.dk.row(b, hk, j0 + j);
    float* dvr = a.dv.row(b, hk, j0 + j);
    const int64_t sk = a.dk.stride(kDim), sv = a.dv.stride(kDim);
    for (int64_t c = 0; c < dm.d; ++c) dkr[c * sk] = w.dk[j * p.d_pad + c];
    for (int64_t c = 0; c < dm.dv; ++c) dvr[c * sv] = w.dv[j * p.dv_pad + c];
  }
}

}  // namespace

void BackwardImpl(const Plan& p, ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                  TensorView<float> dq, TensorView<float> dk, TensorView<float> dv) {
  const auto& dm = p.dims;
  const int64_t n_rows = dm.B * dm.Hq * dm.Nq;
  std::vector<float> D(static_cast<size_t>(n_rows)), scale(static_cast<size_t>(n_rows));
  // Pass 1, parallel over rows: D_i = dO_i·O_i, scale_i, and dq = 0.
#pragma omp parallel for num_threads(p.threads) schedule(static)
  for (int64_t row = 0; row < n_rows; ++row) {
    const int64_t b = row / (dm.Hq * dm.Nq), h = (row / dm.Nq) % dm.Hq, i = row % dm.Nq;
    const float* o = out.row(b, h, i);
    const float* g = grad_out.row(b, h, i);
    // The same sequence of fused multiply-adds, in the same order over c, as
    // the microkernel that computes dP_ij = dO_i·v_j: where the row's O_i is
    // v_j (one-hot attention) dP_ij − D_i is then exactly 0, as it is in a
    // naive implementation that takes D_i = Σ_j P_ij dP_ij. A more accurate D
    // (double) is worse: D's error then no longer cancels dP's, and it shifts
    // every dS of the row alike.
    // hn::MulAdd, not std::fma: the portable targets may not fuse it.
    const DF df;
    VF acc = hn::Zero(df);
    for (int64_t c = 0; c < dm.dv; ++c)
      acc = hn::MulAdd(hn::Set(df, g[c * grad_out.stride(kDim)]), hn::Set(df, o[c * out.stride(kDim)]), acc);
    D[static_cast<size_t>(row)] = hn::GetLane(acc);
    scale[static_cast<size_t>(row)] = p.scale(b, h, i);
    float* dqr = dq.row(b, h, i);
    for (int64_t c = 0; c < dm.d; ++c) dqr[c * dq.stride(kDim)] = 0.0f;
  }
  const int64_t n_counters = dm.B * dm.Hq * p.n_qtiles;
  std::unique_ptr<std::atomic<int64_t>[]> counters(new std::atomic<int64_t>[static_cast<size_t>(n_counters)]);
  for (int64_t c = 0; c < n_counters; ++c) counters[c].store(0, std::memory_order_relaxed);
  const BackwardArgs args{&p, lse, grad_out, dq, dk, dv, D.data(), scale.data(), counters.get()};
  // Pass 2: key tiles handed out in increasing order (see "Determinism and dQ").
  const int64_t n_items = dm.B * dm.Hkv * p.n_ktiles;
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(p.threads)
  {
    BackwardScratch w(p);
    for (;;) {
      const int64_t it = next.fetch_add(1, std::memory_order_relaxed);
      if (it >= n_items) break;
      const int64_t bh = it / p.n_ktiles, t = it % p.n_ktiles;
      BackwardKeyTile(args, bh / dm.Hkv, bh % dm.Hkv, t, w);
    }
  }
  // Key rows past every tile (none) and heads: dk/dv rows are all written by
  // their key tile. Nothing else to do.
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

// Kernel pieces, exposed for the microbenchmarks (bench/micro/).
void GemmPieceImpl(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B, size_t b_rs,
                   float* C, size_t c_rs, bool accumulate) {
  Gemm(M, N, K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
}

// One forward softmax step on a tile of `rows` × nc scores (a row stride of kBc),
// unmasked, with dv = 64: what runs between the two products.
void SoftmaxPieceImpl(float* s, int64_t rows, int64_t nc, int64_t steps) {
  HWY_ASSERT(rows >= 1 && rows <= kBr && nc >= 1 && nc <= kBc);
  const detail::AttentionDims dims{1, 1, 1, rows, nc, 64, 64};
  const AttentionOptions<float> options;
  const Plan p(dims, {}, {}, {}, options, 1);
  ForwardScratch w(p);
  BeginQueryTile(p, 0, 0, 0, rows, w);
  auto raw = Scratch(rows * kBc);
  std::memcpy(raw.get(), s, sizeof(float) * static_cast<size_t>(rows * kBc));
  for (int64_t step = 0; step < steps; ++step) {
    std::memcpy(w.s.get(), raw.get(), sizeof(float) * static_cast<size_t>(rows * kBc));  // as the product writes it
    SoftmaxTile(p, 0, 0, 0, rows, 0, nc, w, false);
  }
  std::memcpy(s, w.s.get(), sizeof(float) * static_cast<size_t>(rows * kBc));
}

void ExpPieceImpl(float* x, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (size_t j = 0; j + L <= n; j += L) hn::StoreU(ExpNonPositive(df, hn::LoadU(df, x + j)), df, x + j);
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(ForwardImpl);
HWY_EXPORT(BackwardImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(GemmPieceImpl);
HWY_EXPORT(ExpPieceImpl);
HWY_EXPORT(SoftmaxPieceImpl);

void gemm_piece(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B, size_t b_rs,
                float* C, size_t c_rs, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmPieceImpl)(M, N, K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
}

void exp_piece(float* x, size_t n) { HWY_DYNAMIC_DISPATCH(ExpPieceImpl)(x, n); }

void softmax_piece(float* s, int64_t rows, int64_t nc, int64_t steps) {
  HWY_DYNAMIC_DISPATCH(SoftmaxPieceImpl)(s, rows, nc, steps);
}

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics* diag) {
  HWY_DYNAMIC_DISPATCH(ForwardImpl)(p, out, lse, diag);
}

void flash_backward(const Plan& p, ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv) {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(p, out, lse, grad_out, dq, dk, dv);
}

const char* flash_target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace attnlab::engine
#endif  // HWY_ONCE
