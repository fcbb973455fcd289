// The decode path's parallel loops (decode_path.hpp says when it runs; decode_chunk-inl.h
// the work item), compiled once per SIMD target and chosen at run time.
//
//   0. the call's DecodeStrategy, once (decode_strategy.hpp);
//   1. per row, once: key_begin, key_end and scale_i (the log-n policies count a row's visible
//      keys, O(Nk) with a boolean mask: not once per chunk);
//   2. per batch of key/value heads (their partials within a 64 MB budget), parallel
//      over items (key/value head, key chunk), dynamic schedule: each writes its
//      partial (m, l, O) for the M rows of its head, and the thread that finishes a
//      head's last chunk (an atomic count) merges that head's rows, each in chunk
//      order, and writes their O and L. One parallel region, not one for the chunks
//      and one for the merge: on a loaded machine every region ends waiting for its
//      slowest thread.
// Which thread ran an item or a merge never enters a result: bitwise identical for
// any thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/decode_kernels.hpp"
#include "engine/testing/engine_probe.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/decode_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
// The shared -inl.h pieces define functions in anonymous namespaces that this TU does
// not call (the tiled path's ForwardQueryTile, PackTransposed).
#pragma GCC diagnostic ignored "-Wunused-function"
#include "engine/decode_chunk-inl.h"
#include "engine/decode_merge-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {

// A test probe's counts (engine_probe.hpp), if one is installed: the strategy says how
// the fused tiles ran.
void CountTiles(const DecodeStrategy& st, int64_t computed, int64_t fused) {
  EngineProbe* probe = installed_engine_probe();
  if (probe == nullptr) return;
  TileCounts& counts = probe->counts;
  counts.forward.fetch_add(computed, std::memory_order_relaxed);
  if (fused == 0) return;
  counts.decode_fused.fetch_add(fused, std::memory_order_relaxed);
  if (st.reads == FusedReads::beside_loads) counts.decode_fused_beside_loads.fetch_add(fused, std::memory_order_relaxed);
  if (st.reads == FusedReads::row_order) counts.decode_fused_row_order.fetch_add(fused, std::memory_order_relaxed);
  if (st.bf16_dots) counts.decode_bf16_dots.fetch_add(fused, std::memory_order_relaxed);
}

// DecodeChunk for the call's K and V: their element type, or a block table's codes or
// decoded tiles.
std::pair<int64_t, int64_t> DecodeChunkOfType(const DecodeWork& w, int64_t item, int64_t kv, int64_t c,
                                              DecodeScratch& sc) {
  if (const KVBlocks* t = w.p->kv_blocks) {
    if (t->decodes_tiles()) return DecodeChunk<DecodedTiles>(w, item, kv, c, sc);
    switch (t->codes()) {
      case RowType::int8: return DecodeChunk<CodeByte<RowType::int8>>(w, item, kv, c, sc);
      case RowType::int4: return DecodeChunk<CodeByte<RowType::int4>>(w, item, kv, c, sc);
      case RowType::fp8_e4m3: return DecodeChunk<CodeByte<RowType::fp8_e4m3>>(w, item, kv, c, sc);
      default: break;
    }
  }
  switch (w.p->k.type()) {
    case ElementType::bf16: return DecodeChunk<bfloat16>(w, item, kv, c, sc);
    case ElementType::f16: return DecodeChunk<float16>(w, item, kv, c, sc);
    case ElementType::f32: break;
  }
  return DecodeChunk<float>(w, item, kv, c, sc);
}

bool DecodeForwardImpl(const Plan& p, TensorView<float> out, TensorView<float> lse) {
  const auto& dm = p.dims;
  // 1. Per-row values.
  std::vector<int64_t> begin(static_cast<size_t>(dm.B * dm.Nq)), end(begin.size());
  std::vector<float> scale(static_cast<size_t>(dm.B * dm.Hq * dm.Nq));
  for (int64_t b = 0; b < dm.B; ++b)
    for (int64_t i = 0; i < dm.Nq; ++i) {
      begin[static_cast<size_t>(b * dm.Nq + i)] = p.key_begin(b, i);
      end[static_cast<size_t>(b * dm.Nq + i)] = p.key_end(b, i);
    }
  const auto n_rows = static_cast<int64_t>(scale.size());
#pragma omp parallel for num_threads(p.threads) schedule(static) if (p.row_scales)
  for (int64_t row = 0; row < n_rows; ++row)
    scale[static_cast<size_t>(row)] = p.scale(row / (dm.Hq * dm.Nq), row / dm.Nq % dm.Hq, row % dm.Nq);

  DecodeWork w;
  w.p = &p;
  w.strategy = choose_decode_strategy(decode_shape(p), DecodeTarget::facts(), decode_switches());
  w.rows = dm.group() * dm.Nq;
  w.chunk = decode_chunk_keys(dm.B, dm.Hkv, dm.Nk);
  w.n_chunks = ceil_div(dm.Nk, w.chunk);
  w.begin = begin.data();
  w.end = end.data();
  w.scale = scale.data();
  std::atomic<bool> kv_suspect{false};
  // A block table's rows are a KV cache's, finite since their append: nothing to check.
  if (p.options->check_finite && p.kv_blocks == nullptr) w.kv_suspect = &kv_suspect;
  // 2. Partials for as many key/value heads as fit the budget (at least one).
  constexpr int64_t kPartialBudget = (int64_t{64} << 20) / static_cast<int64_t>(sizeof(float));
  const int64_t per_head = w.n_chunks * w.rows * (p.dv_pad + 3);
  const int64_t n_kv = dm.B * dm.Hkv;
  const int64_t heads_per_batch = std::clamp<int64_t>(kPartialBudget / per_head, 1, n_kv);
  const int64_t max_rows = heads_per_batch * w.n_chunks * w.rows;
  auto o = Scratch(max_rows * p.dv_pad), m = Scratch(max_rows), l = Scratch(max_rows);
  std::unique_ptr<bool[]> nan_score(new bool[static_cast<size_t>(max_rows)]);
  std::unique_ptr<std::atomic<int64_t>[]> chunks_left(new std::atomic<int64_t>[static_cast<size_t>(heads_per_batch)]);
  w.o = o.get();
  w.m = m.get();
  w.l = l.get();
  w.nan_score = nan_score.get();

  for (int64_t kv0 = 0; kv0 < n_kv && !p.stop(); kv0 += heads_per_batch) {
    const int64_t nkv = std::min(heads_per_batch, n_kv - kv0);
    const int64_t n_items = nkv * w.n_chunks;
    for (int64_t kvl = 0; kvl < nkv; ++kvl) chunks_left[kvl].store(w.n_chunks, std::memory_order_relaxed);
    ScratchFailure failure;
#pragma omp parallel num_threads(p.threads)
    {
      std::optional<DecodeScratch> sc = failure.make<DecodeScratch>(p);
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < n_items; ++it) {
        // No scratch, or asked to stop: the call fails after the region (a head with a
        // skipped chunk is never merged, and never needs to be).
        if (!sc || p.stop()) continue;
        const int64_t kvl = it / w.n_chunks;
        const std::pair<int64_t, int64_t> tiles = DecodeChunkOfType(w, it, kv0 + kvl, it % w.n_chunks, *sc);  // computed, fused
        CountTiles(w.strategy, tiles.first, tiles.second);
        // acq_rel: the last of a head's chunks sees the partials the others wrote.
        if (chunks_left[kvl].fetch_sub(1, std::memory_order_acq_rel) == 1)
          for (int64_t r = 0; r < w.rows; ++r) MergeRow(w, kvl, kv0 + kvl, r, out, lse);
      }
    }
    failure.rethrow();
  }
  return kv_suspect.load();
}

DecodeStrategy DecodeStrategyFor(const DecodeShape& c) {
  return choose_decode_strategy(c, DecodeTarget::facts(), decode_switches());
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(DecodeForwardImpl);
HWY_EXPORT(DecodeStrategyFor);

DecodeStrategy decode_strategy_for(const DecodeShape& c) { return HWY_DYNAMIC_DISPATCH(DecodeStrategyFor)(c); }

bool decode_forward(const Plan& p, TensorView<float> out, TensorView<float> lse) {
  return HWY_DYNAMIC_DISPATCH(DecodeForwardImpl)(p, out, lse);
}

}  // namespace attnlab::engine
#endif  // HWY_ONCE
