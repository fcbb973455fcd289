// The fused attention kernels, forward and backward, compiled once per SIMD
// target (hwy/foreach_target.h) and chosen at run time (HWY_DYNAMIC_DISPATCH).
// A forward with few query rows against many keys (decoding against a KV cache)
// takes the decode path instead: decode_path.hpp says when, decode-inl.h how.
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
#include "engine/tile_ops-inl.h"
#include "engine/forward_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {

// The tile operations and the forward of one query tile are in tile_ops-inl.h and
// forward_tile-inl.h; here, the parallel loops and the backward.

void ForwardImpl(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag) {
  const auto& dm = p.dims;
  // Kᵀ tiles [n_ktiles][d][Bc], the last one [d][TileWidth] (PackTransposed)
  const int64_t kt_floats = dm.d * ((p.n_ktiles - 1) * kBc + TileWidth(dm.Nk - (p.n_ktiles - 1) * kBc));
  constexpr int64_t kPackBudget = (int64_t{64} << 20) / static_cast<int64_t>(sizeof(float));
  // V rows [Nk][dv_pad], packed once per head, unless one head alone would pass the budget:
  // then each query tile copies its key tile's V rows into its scratch (a plain copy of
  // Bc·dv per Br·Bc·(d + dv) FMAs, under 1 %). Rows padded to 16 floats make V 16× larger
  // at dv = 1: a 64 MB V would have cost 1 GB packed.
  const bool v_per_tile = kt_floats + dm.Nk * p.dv_pad > kPackBudget;
  const int64_t v_floats = v_per_tile ? 0 : dm.Nk * p.dv_pad;
  const int64_t per_head = std::max<int64_t>(kt_floats + v_floats, 1);
  const int64_t n_kv = dm.B * dm.Hkv;
  const int64_t heads_per_batch = std::clamp<int64_t>(kPackBudget / per_head, 1, n_kv);
  auto packed = Scratch(heads_per_batch * per_head);
  const int64_t group = dm.group();

  // p.stop() here runs on the calling thread, outside the parallel regions: an interrupt
  // is asked at least once per batch even if other threads take every tile.
  for (int64_t kv0 = 0; kv0 < n_kv && !p.stop(); kv0 += heads_per_batch) {
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
      if (v_per_tile) continue;
      float* vrows = head + kt_floats + j0 * p.dv_pad;
      PackRows(p.v, b, hk, j0, nc, dm.dv, p.dv_pad, vrows);  // O += P V reads rows < nc only
    }
    const int64_t n_items = nkv * group * p.n_qtiles;
    ScratchFailure failure;
#pragma omp parallel num_threads(p.threads)
    {
      std::optional<ForwardScratch> w = failure.make<ForwardScratch>(p);
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < n_items; ++it) {
        if (!w || p.stop()) continue;  // no scratch, or asked to stop: the call fails after the region
        const int64_t kvl = it / (group * p.n_qtiles), rest = it % (group * p.n_qtiles);
        const int64_t g = rest / p.n_qtiles, qt = rest % p.n_qtiles;
        const int64_t b = (kv0 + kvl) / dm.Hkv, hk = (kv0 + kvl) % dm.Hkv, h = hk * group + g;
        const float* head = base + kvl * per_head;
        ForwardQueryTile(p, b, h, qt, head, v_per_tile ? nullptr : head + kt_floats, *w, out, lse, diag);
      }
    }
    failure.rethrow();
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

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(ForwardImpl);
HWY_EXPORT(BackwardImpl);
HWY_EXPORT(TargetNameImpl);

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag) {
  HWY_DYNAMIC_DISPATCH(ForwardImpl)(p, out, lse, diag);
}

void flash_backward(const Plan& p, ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv) {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(p, out, lse, grad_out, dq, dk, dv);
}

const char* flash_target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace attnlab::engine
#endif  // HWY_ONCE
