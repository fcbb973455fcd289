// The tiled backward (FlashAttention-2's, with dQ summed in a fixed order) and its
// parallel loops, compiled once per SIMD target (hwy/foreach_target.h) and chosen at run
// time (HWY_DYNAMIC_DISPATCH). flash_forward_kernels.cpp explains the tiling, the
// packing and which tile pairs are computed; both use tile_ops-inl.h's pieces.
//
// ============================================================================
// Backward, parallel over key tiles (each thread owns dK_t and dV_t of its
// tile, summed over all the query heads that share the key/value head):
//     P   = exp(score(scale_i · Q Kᵀ) − L)     (recomputed; L from the forward)
//     dV += (P∘Z/(1 − p))ᵀ dO;   dP = Z ∘ (dO (Vᵀ/(1 − p)));   D = rowsum(dO∘O)
//     dS  = scale_i · P ∘ (dP − D) ∘ score'   (score': through softcap's tanh and score_mod)
//     dK += dSᵀ Q;   dQ_tile += dS K
// bfloat16 inputs on a CPU with AVX512_BF16 take all five products on VDPBF16PS
// (bf16_products.hpp), P and dS rounded to bfloat16 for theirs, dK and dV summed
// transposed (dKᵀ += Qᵀ·dS, dVᵀ += dOᵀ·P) so that only the query-side tiles are transposed.
// D is computed once per row in a first parallel pass (which also zeroes dq and
// takes each row's share of dsinks, −exp(sink_h − L_i)·D_i, summed per head in a
// fixed order afterwards). The dropout mask is regenerated from Philox, not stored.
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
// Key tiles outside a query tile's run of visible tiles [first, last] never touch
// its counter, which starts at `first`; inside the run, a pair with nothing to
// compute still waits for its turn and passes it on.
//
// ============================================================================

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/flash_kernels.hpp"
#include "engine/testing/engine_probe.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/flash_backward_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Included once per target, after foreach_target.h.
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
// The per-target pieces.
#include "engine/exp-inl.h"
#include "engine/gemm-inl.h"
#include "engine/philox-inl.h"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {

namespace {

// Row stride, in words, of P and dS as pairs of rows (bf16::pair_row_stride: a tile's rows
// of 1 KiB would share a quarter of L1's sets).
const int64_t kPairRows = bf16::pair_row_stride(kBc, true);

struct BackwardScratch {
  // key tile, packed once per work item
  ScratchBuffer<float> kt;  // Kᵀ [d × Bc]
  ScratchBuffer<float> kr;  // K rows [Bc × d_pad]
  ScratchBuffer<float> vt;  // Vᵀ [dv × Bc]
  ScratchBuffer<float> dk;  // dK accumulator [Bc × d_pad]
  ScratchBuffer<float> dv;  // dV accumulator [Bc × dv_pad]
  // query tile, packed per tile pair
  ScratchBuffer<float> qr;   // Q rows [Br × d_pad]
  ScratchBuffer<float> dor;  // dO rows [Br × dv_pad]
  ScratchBuffer<float> pt;   // P [Br × Bc]
  ScratchBuffer<float> ds;   // dP, then dS [Br × Bc]
  ScratchBuffer<float> dq;   // this pair's dQ contribution [Br × d_pad]
  // the variants' (empty without them)
  ScratchBuffer<float> dmod;      // ∂score/∂(scale·q·k) [Br × Bc] (softcap, score_mod)
  ScratchBuffer<float> pd;        // dropout: P·Z/(1 − p) [Br × Bc]
  ScratchBuffer<uint32_t> words;  // dropout: one row's random words [Bc + kDropoutSlack]
  // bfloat16 products (Bf16Products; kt and vt then hold pairs, bf16_products.hpp)
  ScratchBuffer<float> q16;   // Q rows as bfloat16 [Br × d_pad]
  ScratchBuffer<float> do16;  // dO rows as bfloat16 [Br × dv_pad]
  ScratchBuffer<float> qt16;  // Qᵀ as bfloat16 [d × Br]
  ScratchBuffer<float> dot16;  // dOᵀ as bfloat16 [dv × Br]
  ScratchBuffer<float> ds16;  // dS rows as bfloat16 [Br × Bc]
  ScratchBuffer<float> pairs;  // P, then dS, as pairs of rows [Br/2 × kPairRows] words
  explicit BackwardScratch(const Plan& p)
      : kt(Scratch(p.dims.d * kBc)),
        kr(Scratch(kBc * p.d_pad)),
        vt(Scratch(p.dims.dv * kBc)),
        dk(Scratch(kBc * p.d_pad)),
        dv(Scratch(kBc * p.dv_pad)),
        qr(Scratch(kBr * p.d_pad)),
        dor(Scratch(kBr * p.dv_pad)),
        pt(Scratch(kBr * kBc)),
        ds(Scratch(kBr * kBc)),
        dq(Scratch(kBr * p.d_pad)),
        dmod(Scratch(p.softcap != 0 || p.score_mod != nullptr ? kBr * kBc : 0)),
        pd(Scratch(p.dropout ? kBr * kBc : 0)),
        words(ScratchWords(p.dropout ? kBc + kDropoutSlack : 0)),
        q16(Scratch(Bf16Products(p) ? kBr * p.d_pad / 2 : 0)),
        do16(Scratch(Bf16Products(p) ? kBr * p.dv_pad / 2 : 0)),
        qt16(Scratch(Bf16Products(p) ? p.dims.d * kBr / 2 : 0)),
        dot16(Scratch(Bf16Products(p) ? p.dims.dv * kBr / 2 : 0)),
        ds16(Scratch(Bf16Products(p) ? kBr * kBc / 2 : 0)),
        pairs(Scratch(Bf16Products(p) ? kBr / 2 * kPairRows : 0)) {}
};

struct BackwardArgs {
  const Plan* p;
  ConstView<float> lse;
  Operand grad_out;  // the element type of q, k, v
  TensorView<float> dq, dk, dv;
  const float* D;                  // [B, Hq, Nq] rowsum(dO ∘ O)
  const float* scale;              // [B, Hq, Nq] scale_i
  const int64_t* row_begin;        // [B, Nq] each row's key range [begin, end) (visibility.hpp)
  const int64_t* row_end;          // [B, Nq]
  const int64_t* tile_first;       // [B, n_qtiles] the first and last key tile a query tile sees
  const int64_t* tile_last;        // (first > last: none)
  std::atomic<int64_t>* counters;  // [B, Hq, n_qtiles] the next key tile to add into the query tile's dQ
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

// The rows of query tile qt of batch b with their key ranges.
void TileRowsOf(const BackwardArgs& a, int64_t b, int64_t qt, TileRows& rows) {
  const auto& dm = a.p->dims;
  const int64_t i0 = qt * kBr;
  rows.rows = std::min(kBr, dm.Nq - i0);
  for (int64_t r = 0; r < rows.rows; ++r) {
    rows.begin[r] = a.row_begin[b * dm.Nq + i0 + r];
    rows.end[r] = a.row_end[b * dm.Nq + i0 + r];
  }
}

// dQ, dK, dV contributions of one (query tile, key tile) pair, over its active rectangle
// (rows r0..r1 of the query tile, keys c0..c1 of the key tile j0..j0 + nc); dQ's goes to
// w.dq (its row 0 is the tile's row r0), dK's and dV's into the key tile's accumulators.
void BackwardPair(const BackwardArgs& a, int64_t b, int64_t h, int64_t qt, int64_t j0, int64_t nc, const TileRows& tr,
                  const TileRect& rect, bool mask_mod, BackwardScratch& w) {
  const Plan& p = *a.p;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df);
  const int64_t i0 = qt * kBr + rect.r0, rows = rect.r1 - rect.r0;
  const int64_t row0 = (b * dm.Hq + h) * dm.Nq + i0;  // index into D and scale
  // Keys [c0, c1) from a whole vector: the packed key tile is read from column `col`.
  const int64_t col = (rect.c0 - j0) / static_cast<int64_t>(L) * static_cast<int64_t>(L);
  const int64_t jj0 = j0 + col, ncc = rect.c1 - jj0;
  const int64_t width = (ncc + static_cast<int64_t>(L) - 1) / static_cast<int64_t>(L) * static_cast<int64_t>(L);
  const size_t ktw = static_cast<size_t>(TileWidth(nc));  // row stride of the packed Kᵀ and Vᵀ
  // bfloat16 products: the rows of Q and dO as bfloat16, zero past d and dv.
  const bool bf16 = Bf16Products(p);
  size_t q_rs = 0, do_rs = 0;
  const float* Qr = bf16 ? nullptr : RowsOperand(p.q, b, h, i0, rows, dm.d, p.d_pad, w.qr.get(), q_rs);
  const float* dOr = bf16 ? nullptr : RowsOperand(a.grad_out, b, h, i0, rows, dm.dv, p.dv_pad, w.dor.get(), do_rs);
  float* P = w.pt.get();
  float* dS = w.ds.get();
  float* dmod = w.dmod.get();
  const bool has_dmod = p.softcap != 0 || p.score_mod != nullptr;
  auto* const q16 = reinterpret_cast<bfloat16*>(w.q16.get());
  auto* const do16 = reinterpret_cast<bfloat16*>(w.do16.get());
  if (bf16) {
    bf16::pack_rows(p.q.as<bfloat16>(), b, h, i0, rows, dm.d, p.d_pad, q16);
    bf16::pack_rows(a.grad_out.as<bfloat16>(), b, h, i0, rows, dm.dv, p.dv_pad, do16);
  }
  // S = Q Kᵀ, then P = exp(score − L_i) with hidden keys at 0.
  if (bf16)
    bf16::gemm(rows, width, round_up(dm.d, 2), q16, p.d_pad, reinterpret_cast<const uint32_t*>(w.kt.get()) + col,
               KtPairStride(p, nc), P, kBc, false);
  else
    Gemm(static_cast<size_t>(rows), static_cast<size_t>(width), static_cast<size_t>(dm.d), Qr, q_rs, 1,
         w.kt.get() + col, ktw, P, kBc, false);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* pr = P + r * kBc;
    const float Li = a.lse(b, h, i, 0);
    if (Li == kNegInf) {  // fully masked row: no gradient
      std::memset(pr, 0, sizeof(float) * kBc);
      if (has_dmod) std::memset(dmod + r * kBc, 0, sizeof(float) * kBc);
      continue;
    }
    const detail::RowFrame f = p.row_frame(b, i);
    RowTreatment rt;
    rt.b = b, rt.h = h, rt.i = i;
    rt.lo = std::clamp<int64_t>(tr.begin[rect.r0 + r] - jj0, 0, ncc);
    rt.hi = std::clamp<int64_t>(tr.end[rect.r0 + r] - jj0, rt.lo, ncc);
    rt.diag = f.diag;
    rt.slope = p.alibi_slope(f.seq, h);
    rt.scale = a.scale[row0 + r];
    rt.offset = Li;
    rt.mask_mod = mask_mod;
    rt.check_overflow = true;
    if (std::isnan(MaskRow(p, rt, jj0, width, pr, has_dmod ? dmod + r * kBc : nullptr)))  // score − L_i
      p.overflowed_rows.record((b * dm.Hq + h) * dm.Nq + i);
    // L ≥ S holds exactly, so clamping the exponent at 0 changes nothing in exact
    // arithmetic, but stops a rounded L (stored in float) from making P > 1 or inf
    // when scores are huge.
    for (size_t j = 0; j < static_cast<size_t>(width); j += L)
      hn::StoreU(ExpNonPositive(df, hn::Min(hn::LoadU(df, pr + j), hn::Zero(df))), df, pr + j);
  }
  // Dropout: O used P·Z/(1 − p); so does dV (the mask regenerated, not stored).
  const float* Pd = P;
  if (p.dropout) {
    for (int64_t r = 0; r < rows; ++r) {
      DropoutWords(p.dropout_seed, b, h, i0 + r, jj0, width, w.words.get());
      DropoutRow(w.words.get(), p.dropout_threshold, p.dropout_scale, width, P + r * kBc, w.pd.get() + r * kBc);
    }
    Pd = w.pd.get();
  }
  // dV += Pᵀ dO; on bfloat16 products as dVᵀ += dOᵀ·P (only the small dO tile transposed),
  // P rounded to bfloat16 for it as FlashAttention does.
  auto* const pairs = reinterpret_cast<uint32_t*>(w.pairs.get());
  const int64_t rows_pad = round_up(rows, 2);
  if (bf16) {
    auto* const dot16 = reinterpret_cast<bfloat16*>(w.dot16.get());
    bf16::transpose(do16, p.dv_pad, rows, dm.dv, rows_pad, dot16, kBr);
    bf16::round_row_pairs(Pd, kBc, rows, width, pairs, kPairRows);
    bf16::gemm(dm.dv, width, rows, dot16, kBr, pairs, kPairRows, w.dv.get() + col, kBc, true);
  } else {
    Gemm(static_cast<size_t>(ncc), static_cast<size_t>(p.dv_pad), static_cast<size_t>(rows), Pd, 1, kBc, dOr, do_rs,
         w.dv.get() + col * p.dv_pad, static_cast<size_t>(p.dv_pad), true);
  }
  // dP = dO Vᵀ;  dS = scale_i · P ∘ (dP − D_i) (· ∂score/∂(scale·q·k))
  if (bf16)
    bf16::gemm(rows, width, round_up(dm.dv, 2), do16, p.dv_pad, reinterpret_cast<const uint32_t*>(w.vt.get()) + col,
               TransposedPairStride(nc, dm.dv), dS, kBc, false);
  else
    Gemm(static_cast<size_t>(rows), static_cast<size_t>(width), static_cast<size_t>(dm.dv), dOr, do_rs, 1,
         w.vt.get() + col, ktw, dS, kBc, false);
  const VF vzero = hn::Zero(df);
  // Dropout's 1/(1 − p): in Vᵀ for float32 products, on dP for bfloat16 ones (V stays exact).
  const VF vkeep = hn::Set(df, bf16 ? p.dropout_scale : 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const VF vD = hn::Set(df, a.D[row0 + r]), vs = hn::Set(df, a.scale[row0 + r]);
    float* pr = P + r * kBc;
    float* dr = dS + r * kBc;
    const float* pdr = Pd + r * kBc;
    const float* mr = has_dmod ? dmod + r * kBc : nullptr;
    if (!p.dropout && mr == nullptr) {  // the plain case, on its own loop
      for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
        const VF x = hn::Mul(hn::LoadU(df, pr + j), hn::Sub(hn::LoadU(df, dr + j), vD));
        hn::StoreU(hn::Mul(x, vs), df, dr + j);
      }
      continue;
    }
    for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
      VF dp = hn::LoadU(df, dr + j);
      // With dropout dP_ij = Z_ij·(dO_i·v_j/(1 − p)) (V was scaled when packed); Z_ij = 0 shows
      // as P·Z = 0 (where P = 0 the product below is 0 anyway).
      if (p.dropout) dp = hn::IfThenElseZero(hn::Ne(hn::LoadU(df, pdr + j), vzero), hn::Mul(dp, vkeep));
      VF x = hn::Mul(hn::Mul(hn::LoadU(df, pr + j), hn::Sub(dp, vD)), vs);
      if (mr != nullptr) x = hn::Mul(x, hn::LoadU(df, mr + j));
      hn::StoreU(x, df, dr + j);
    }
  }
  // dK += dSᵀ Q;  dQ_pair = dS K. On bfloat16 products dS is rounded to bfloat16 for both
  // (as FlashAttention does), and dK is summed as dKᵀ += Qᵀ·dS.
  if (bf16) {
    auto* const qt16 = reinterpret_cast<bfloat16*>(w.qt16.get());
    auto* const ds16 = reinterpret_cast<bfloat16*>(w.ds16.get());
    bf16::round_row_pairs(dS, kBc, rows, width, pairs, kPairRows);
    bf16::transpose(q16, p.d_pad, rows, dm.d, rows_pad, qt16, kBr);
    bf16::gemm(dm.d, width, rows, qt16, kBr, pairs, kPairRows, w.dk.get() + col, kBc, true);
    bf16::round_rows(dS, kBc, rows, width, ds16, kBc);
    bf16::gemm(rows, p.d_pad, ncc, ds16, kBc,
               reinterpret_cast<const uint32_t*>(w.kr.get()) + col / 2 * RowPairStride(p.d_pad),
               RowPairStride(p.d_pad), w.dq.get(), p.d_pad, false);
    return;
  }
  Gemm(static_cast<size_t>(ncc), static_cast<size_t>(p.d_pad), static_cast<size_t>(rows), dS, 1, kBc, Qr, q_rs,
       w.dk.get() + col * p.d_pad, static_cast<size_t>(p.d_pad), true);
  Gemm(static_cast<size_t>(rows), static_cast<size_t>(p.d_pad), static_cast<size_t>(ncc), dS, kBc, 1,
       w.kr.get() + col * p.d_pad, static_cast<size_t>(p.d_pad), w.dq.get(), static_cast<size_t>(p.d_pad), false);
}

void BackwardKeyTile(const BackwardArgs& a, int64_t b, int64_t hk, int64_t t, BackwardScratch& w) {
  const Plan& p = *a.p;
  const auto& dm = p.dims;
  const int64_t j0 = t * kBc, nc = std::min(kBc, dm.Nk - j0);
  const bool bf16 = Bf16Products(p);
  if (bf16) {  // Kᵀ and Vᵀ as pairs (bf16_products.hpp), in the room of their float32 tiles; K as pairs of rows for dQ += dS·K
    bf16::pack_key_pairs(p.k.as<bfloat16>(), b, hk, j0, nc, TileWidth(nc), KtPairStride(p, nc), dm.d,
                         reinterpret_cast<uint32_t*>(w.kt.get()));
    bf16::pack_key_pairs(p.v.as<bfloat16>(), b, hk, j0, nc, TileWidth(nc), TransposedPairStride(nc, dm.dv), dm.dv,
                         reinterpret_cast<uint32_t*>(w.vt.get()));
    bf16::pack_value_pairs(p.k.as<bfloat16>(), b, hk, j0, nc, dm.d, p.d_pad, RowPairStride(p.d_pad),
                           reinterpret_cast<uint32_t*>(w.kr.get()));
  } else {
    PackTransposed(p.k, b, hk, j0, nc, dm.d, w.kt.get());
    PackTransposed(p.v, b, hk, j0, nc, dm.dv, w.vt.get());
    PackRows(p.k, b, hk, j0, nc, dm.d, p.d_pad, w.kr.get());
  }
  // Dropout: dP_ij = Z_ij·(dO_i·v_j/(1 − p)), with V scaled before the product so that it
  // rounds as the forward's O (which took P/(1 − p) times v) and D = dO·O do.
  if (p.dropout && !bf16) {
    const DF df;
    const VF vk = hn::Set(df, p.dropout_scale);
    const int64_t n = dm.dv * TileWidth(nc);
    for (int64_t x = 0; x < n; x += static_cast<int64_t>(hn::Lanes(df)))
      hn::StoreU(hn::Mul(hn::LoadU(df, w.vt.get() + x), vk), df, w.vt.get() + x);
  }
  // bfloat16 products sum dKᵀ [d × Bc] and dVᵀ [dv × Bc] in the same room.
  std::memset(w.dk.get(), 0, sizeof(float) * static_cast<size_t>(bf16 ? dm.d * kBc : nc * p.d_pad));
  std::memset(w.dv.get(), 0, sizeof(float) * static_cast<size_t>(bf16 ? dm.dv * kBc : nc * p.dv_pad));
  const int64_t group = dm.group();
  int64_t computed = 0;
  TileRows tr;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    for (int64_t qt = p.n_qtiles - 1; qt >= 0; --qt) {
      // Key tiles outside the query tile's run of visible ones never touch its counter
      // (which starts at the run's first tile).
      if (t < a.tile_first[b * p.n_qtiles + qt] || t > a.tile_last[b * p.n_qtiles + qt]) continue;
      TileRowsOf(a, b, qt, tr);
      const TileRect rect = tr.rect(j0, j0 + nc);
      const int64_t i0 = qt * kBr;
      const BlockMask::Block block = p.mask_block(b, h, qt, t);
      const bool active = !rect.empty() && block != BlockMask::Block::empty &&
                          !p.tile_masked_out(b, h, i0 + rect.r0, i0 + rect.r1, rect.c0, rect.c1);
      if (active) {
        BackwardPair(a, b, h, qt, j0, nc, tr, rect, block == BlockMask::Block::partial, w);
        ++computed;
      }
      std::atomic<int64_t>& c = a.counters[(b * dm.Hq + h) * p.n_qtiles + qt];
      WaitFor(c, t);
      if (active) {
        const int64_t st = a.dq.stride(Axis::dim);
        for (int64_t r = rect.r0; r < rect.r1; ++r) {
          float* dst = a.dq.row(b, h, i0 + r);
          const float* src = w.dq.get() + (r - rect.r0) * p.d_pad;
          for (int64_t col = 0; col < dm.d; ++col) dst[col * st] += src[col];
        }
      }
      c.store(t + 1, std::memory_order_release);
    }
  }
  count_tiles(&TileCounts::backward, computed);
  if (bf16) count_tiles(&TileCounts::backward_bf16_products, computed);
  for (int64_t j = 0; j < nc; ++j) {
    float* dkr = a.dk.row(b, hk, j0 + j);
    float* dvr = a.dv.row(b, hk, j0 + j);
    const int64_t sk = a.dk.stride(Axis::dim), sv = a.dv.stride(Axis::dim);
    const int64_t k_rs = bf16 ? 1 : p.d_pad, k_cs = bf16 ? kBc : 1, v_rs = bf16 ? 1 : p.dv_pad, v_cs = bf16 ? kBc : 1;
    for (int64_t c = 0; c < dm.d; ++c) dkr[c * sk] = w.dk[j * k_rs + c * k_cs];
    for (int64_t c = 0; c < dm.dv; ++c) dvr[c * sv] = w.dv[j * v_rs + c * v_cs];
  }
}

}  // namespace

// D_i = dO_i·O_i. The same sequence of fused multiply-adds, in the same order over c, as
// the microkernel that computes dP_ij = dO_i·v_j: where the row's O_i is v_j (one-hot
// attention) dP_ij − D_i is then exactly 0, as it is in a naive implementation that
// takes D_i = Σ_j P_ij dP_ij. A more accurate D (double) is worse: D's error then no
// longer cancels dP's, and it shifts every dS of the row alike.
// hn::MulAdd, not std::fma: the portable targets may not fuse it.
template <class E>
float OutputDotGrad(ConstView<E> out, ConstView<E> grad_out, int64_t b, int64_t h, int64_t i, int64_t dv) {
  const E* o = out.row(b, h, i);
  const E* g = grad_out.row(b, h, i);
  const DF df;
  VF acc = hn::Zero(df);
  for (int64_t c = 0; c < dv; ++c)
    acc = hn::MulAdd(hn::Set(df, ToFloat(g[c * grad_out.stride(Axis::dim)])),
                     hn::Set(df, ToFloat(o[c * out.stride(Axis::dim)])), acc);
  return hn::GetLane(acc);
}
float OutputDotGrad(const Operand& out, const Operand& grad_out, int64_t b, int64_t h, int64_t i, int64_t dv) {
  switch (out.type()) {
    case ElementType::bf16:
      return OutputDotGrad(out.as<bfloat16>(), grad_out.as<bfloat16>(), b, h, i, dv);
    case ElementType::f16:
      return OutputDotGrad(out.as<float16>(), grad_out.as<float16>(), b, h, i, dv);
    case ElementType::f32:
      break;
  }
  return OutputDotGrad(out.f32(), grad_out.f32(), b, h, i, dv);
}

// out and grad_out are of the element type of q, k, v (the Plan's); dq, dk, dv are float.
void BackwardImpl(const Plan& p, Operand out, ConstView<float> lse, Operand grad_out, TensorView<float> dq,
                  TensorView<float> dk, TensorView<float> dv, float* dsinks) {
  const auto& dm = p.dims;
  const int64_t n_rows = dm.B * dm.Hq * dm.Nq;
  std::vector<float> D(static_cast<size_t>(n_rows)), scale(static_cast<size_t>(n_rows));
  std::vector<double> sink_terms(p.sinks ? static_cast<size_t>(n_rows) : 0);  // −P_sink·D per row
  // Pass 1, parallel over rows: D_i = dO_i·O_i, scale_i, the sink's term, and dq = 0.
#pragma omp parallel for num_threads(p.threads) schedule(static)
  for (int64_t row = 0; row < n_rows; ++row) {
    const int64_t b = row / (dm.Hq * dm.Nq), h = (row / dm.Nq) % dm.Hq, i = row % dm.Nq;
    D[static_cast<size_t>(row)] = OutputDotGrad(out, grad_out, b, h, i, dm.dv);
    scale[static_cast<size_t>(row)] = p.scale(b, h, i);
    // The sink is one more logit with no value row: dS_sink = P_sink·(0 − D_i).
    if (p.sinks) {
      const double L = lse(b, h, i, 0);
      sink_terms[static_cast<size_t>(row)] =
          L == -INFINITY ? 0.0
                         : -std::exp(std::min(static_cast<double>(p.sink(h)) - L, 0.0)) * D[static_cast<size_t>(row)];
    }
    float* dqr = dq.row(b, h, i);
    for (int64_t c = 0; c < dm.d; ++c) dqr[c * dq.stride(Axis::dim)] = 0.0f;
  }
  if (dsinks != nullptr)  // in a fixed order: the same sums for any thread count
    for (int64_t h = 0; h < dm.Hq; ++h) {
      double sum = 0;
      for (int64_t b = 0; b < dm.B; ++b)
        for (int64_t i = 0; i < dm.Nq; ++i) sum += sink_terms[static_cast<size_t>((b * dm.Hq + h) * dm.Nq + i)];
      dsinks[h] = static_cast<float>(sum);
    }
  // Each row's key range, and each query tile's run of visible key tiles.
  std::vector<int64_t> row_begin(static_cast<size_t>(dm.B * dm.Nq)), row_end(row_begin.size());
  std::vector<int64_t> tile_first(static_cast<size_t>(dm.B * p.n_qtiles)), tile_last(tile_first.size());
#pragma omp parallel for num_threads(p.threads) schedule(static)
  for (int64_t bq = 0; bq < dm.B * p.n_qtiles; ++bq) {
    const int64_t b = bq / p.n_qtiles, i0 = bq % p.n_qtiles * kBr;
    TileRows tr;
    p.tile_rows(b, i0, std::min(kBr, dm.Nq - i0), tr);
    for (int64_t r = 0; r < tr.rows; ++r) {
      row_begin[static_cast<size_t>(b * dm.Nq + i0 + r)] = tr.begin[r];
      row_end[static_cast<size_t>(b * dm.Nq + i0 + r)] = tr.end[r];
    }
    std::tie(tile_first[static_cast<size_t>(bq)], tile_last[static_cast<size_t>(bq)]) = tr.key_tiles();
  }
  const int64_t n_counters = dm.B * dm.Hq * p.n_qtiles;
  std::unique_ptr<std::atomic<int64_t>[]> counters(new std::atomic<int64_t>[static_cast<size_t>(n_counters)]);
  for (int64_t c = 0; c < n_counters; ++c) {
    const int64_t b = c / (dm.Hq * p.n_qtiles), qt = c % p.n_qtiles;
    counters[c].store(tile_first[static_cast<size_t>(b * p.n_qtiles + qt)], std::memory_order_relaxed);
  }
  const BackwardArgs args{&p,
                          lse,
                          grad_out,
                          dq,
                          dk,
                          dv,
                          D.data(),
                          scale.data(),
                          row_begin.data(),
                          row_end.data(),
                          tile_first.data(),
                          tile_last.data(),
                          counters.get()};
  if (p.stop()) return;  // asked on the calling thread (see ForwardImpl)
  // Pass 2: key tiles handed out in increasing order (see "Determinism and dQ").
  const int64_t n_items = dm.B * dm.Hkv * p.n_ktiles;
  std::atomic<int64_t> next{0};
  ScratchFailure failure;
#pragma omp parallel num_threads(p.threads)
  {
    // A thread without scratch takes no key tile: the others take them all in
    // order, so no dq wait is on a tile nobody runs (see "Determinism and dQ").
    std::optional<BackwardScratch> w = failure.make<BackwardScratch>(p);
    while (w && !p.stop()) {
      const int64_t it = next.fetch_add(1, std::memory_order_relaxed);
      if (it >= n_items) break;
      const int64_t bh = it / p.n_ktiles, t = it % p.n_ktiles;
      BackwardKeyTile(args, bh / dm.Hkv, bh % dm.Hkv, t, *w);
    }
  }
  failure.rethrow();
  // Key rows past every tile (none) and heads: dk/dv rows are all written by
  // their key tile. Nothing else to do.
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(BackwardImpl);

void flash_backward(const Plan& p, const Operand& out, ConstView<float> lse, const Operand& grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, float* dsinks) {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(p, out, lse, grad_out, dq, dk, dv, dsinks);
}

}  // namespace attnlab::engine
#endif  // HWY_ONCE
