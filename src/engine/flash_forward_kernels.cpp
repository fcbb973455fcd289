// The tiled forward (FlashAttention-2) and its parallel loops, compiled once per SIMD
// target (hwy/foreach_target.h) and chosen at run time (HWY_DYNAMIC_DISPATCH); the
// tiled backward is flash_backward_kernels.cpp, the forward of one query tile
// forward_tile-inl.h. A forward with few query rows against many keys (decoding
// against a KV cache) takes the decode path instead: decode_path.hpp says when,
// decode_strategy.hpp how.
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
// product's inner loop (the measurements: docs/engine.md, "Constants of the
// tiled path"; Bc = 512 or Br = 32 or 128 were no better). A tile with fewer keys (the last
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
// Which pairs are computed. Each row sees a key range [key_begin, key_end) (causality,
// padding, the sliding window, packed sequences: core/visibility.hpp), and both ends
// never decrease down the rows of a batch entry. So the key tiles a query tile sees are
// a run [first, last], and within a pair the rows that see any of its keys, and the keys
// they see, form a rectangle (TileRows::rect in plan.hpp). Only pairs with a non-empty
// rectangle are computed, and only over the rectangle (its rows, and its keys from a
// whole vector on): the band of a window, the diagonal blocks of packed sequences, the
// lower triangle of causal attention. A pair the boolean mask hides entirely, or that
// mask_mod's BlockMask marks empty, is skipped too; the engine counts computed pairs for
// the tests (engine::tile_counts()).
//
// Forward, for each (batch, query head, query tile) — the parallel loop — and
// then for each key tile t of its run:
//     S   = Q_tile · Kᵀ_t                      [Br × Bc]   microkernel
//     S   = score(scale_i · S)                 MaskRow: softcap, ALiBi, score_mod,
//                                              additive mask, −inf where hidden
//     m'  = max(m, rowmax S);  α = exp(m − m');  P = exp(S − m')
//     l   = α·l + rowsum P;    O = α·O + (P ∘ Z/(1 − p)) · V_t   microkernel
// (Z: dropout's keep bits, Philox keyed by (seed, b, h, i, j), made in registers
// by philox-inl.h; without dropout Z/(1 − p) = 1) and at the end the sink, if any,
// joins m and l as one more score with no value row, O /= l, L = m + log l (online
// softmax: m and l are the running max and sum, so one pass over the keys
// suffices). A row that never sees a finite score (nor a sink) keeps m = −inf and
// gets O = 0, L = −inf.
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
// The backward (flash_backward_kernels.cpp) recomputes P tile by tile from L.
//
// Precision: float32 in (bfloat16 and float16 inputs are converted to float32 where
// they are loaded: the packing functions of tile_ops-inl.h, through plan.hpp's Operand;
// bfloat16 inputs on a CPU with AVX512_BF16 and an AVX-512 target instead take both
// products on VDPBF16PS, bf16_products.hpp, with P rounded to bfloat16 for P·V),
// float32 accumulation throughout (like the naive matmul + softmax + matmul it replaces;
// 16-bit results are rounded once, by engine.cpp, from float32 buffers), exp by ExpNonPositive (exp-inl.h:
// the softmax's arguments are ≤ 0, which allows a cheaper exp than Highway's
// contrib/math; its measured maximum error is stated there), scale applied in float.
// ============================================================================

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "engine/flash_kernels.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/flash_forward_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Included once per target, after foreach_target.h.
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
// tile_ops-inl.h defines, in an anonymous namespace, pieces only the backward calls
// (RowsOperand).
#pragma GCC diagnostic ignored "-Wunused-function"
// The per-target pieces.
#include "engine/exp-inl.h"
#include "engine/gemm-inl.h"
#include "engine/philox-inl.h"
#include "engine/tile_ops-inl.h"
// One query tile of the forward, on tile_ops-inl.h's pieces.
#include "engine/forward_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {

// The tile operations and the forward of one query tile are in tile_ops-inl.h and
// forward_tile-inl.h; here, the parallel loops.

void ForwardImpl(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag) {
  const auto& dm = p.dims;
  // Kᵀ tiles [n_ktiles][d][Bc], the last one [d][TileWidth] (PackTransposed)
  const int64_t kt_floats = dm.d * ((p.n_ktiles - 1) * kBc + TileWidth(dm.Nk - (p.n_ktiles - 1) * kBc));
  constexpr int64_t kPackBudget = (int64_t{64} << 20) / static_cast<int64_t>(sizeof(float));
  // V rows [Nk][dv_pad], packed once per head, unless one head alone would pass the budget:
  // then each query tile copies its key tile's V rows into its scratch (a plain copy of
  // Bc·dv per Br·Bc·(d + dv) FMAs, under 1 %). Rows padded to 16 floats make V 16× larger
  // at dv = 1: a 64 MB V would have cost 1 GB packed.
  // bfloat16 products: V as pairs of rows (bf16_products.hpp), rows of VPairStride words
  const int64_t v_whole = Bf16Products(p) ? ceil_div(dm.Nk, 2) * VPairStride(p) : dm.Nk * p.dv_pad;
  const bool v_per_tile = kt_floats + v_whole > kPackBudget;
  const int64_t v_floats = v_per_tile ? 0 : v_whole;
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
      if (Bf16Products(p)) {  // pairs of bfloat16 (bf16_products.hpp), in the same places, in less room
        bf16::pack_key_pairs(p.k.as<bfloat16>(), b, hk, j0, nc, TileWidth(nc), KtPairStride(p, nc), dm.d,
                             reinterpret_cast<uint32_t*>(head + t * dm.d * kBc));
        if (!v_per_tile)
          bf16::pack_value_pairs(p.v.as<bfloat16>(), b, hk, j0, nc, dm.dv, p.dv_pad, VPairStride(p),
                                 reinterpret_cast<uint32_t*>(head + kt_floats) + j0 / 2 * VPairStride(p));
        continue;
      }
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

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(ForwardImpl);
HWY_EXPORT(TargetNameImpl);

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag) {
  HWY_DYNAMIC_DISPATCH(ForwardImpl)(p, out, lse, diag);
}

const char* flash_target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace attnlab::engine
#endif  // HWY_ONCE
