#pragma once
// Which forward kernel an engine call runs: the one decision, made from the shapes
// alone (engine.cpp asks it for every forward call; the public API has no say).
//
//   tiled  (flash_forward_kernels.cpp): FlashAttention-2 over (batch, query head, query tile),
//          K and V of each head packed once and shared by its query tiles. Built for
//          Nq ≈ Nk, where each packed key is used by many query rows.
//   decode (decode_kernels.cpp, decode_strategy.hpp): few query rows per key/value head, as
//          when decoding against a KV cache (Nq = 1) or prefilling it in chunks
//          (Nq = 16…64 new rows at its end). The rows of all the query heads that share
//          a key/value head are processed together, so K and V are read once per
//          key/value head, from the caller's memory, and the keys are cut into chunks
//          that different threads take (split-KV), merged in a fixed order.
//
// The decode path is chosen when a head's queries fit one query tile (Nq ≤ kBr) and
// the keys are at least twice as many (Nk ≥ 2·Nq): a decoding step against any cache
// longer than one key, a chunk of new queries against a cache at least as long again.
// There the tiled path's packed K and V are shared by few query rows (the packing is a
// second pass over them) and, at B = Hq = 1, one thread works, while the decode path
// reads K and V once in place, splits the keys between the threads and (with grouped
// heads) reads each key/value head once for all its query heads. Except for a lone
// work item with more than one row block (B·Hkv = 1, one key chunk, group·Nq > kBr):
// the decode path would keep all its rows on one thread, the tiled path spreads its
// query heads over all of them (docs/tuning.md has the measurements behind the rule).
// Not with diagnostics: RowDiagnostics are not merged across key chunks (the tiled path
// computes them); not with dropout, which is for training (the tiled path draws its
// mask). Every other option (masks, padding, windows, softcap, ALiBi, sinks, packed
// sequences, score_mod, mask_mod) is the same per-row score treatment in both paths.
// The choice depends on the shapes alone, never on the thread count: the results are
// bitwise the same for any number of threads.
#include "core/visibility.hpp"
#include "engine/plan.hpp"

namespace attnlab::engine {

enum class ForwardPath { tiled, decode };

// Keys per split-KV chunk: one work item, whose partial (m, l, O) is merged with the
// others' in chunk order. A function of the shape alone, never of the thread count, so
// that the result is bitwise the same for any number of threads: the largest of 4096,
// 2048 and 1024 keys that still leaves kDecodeMinItems items in the call (load balance
// on many threads), else kDecodeChunkMin (two key tiles, whose partials, rows·dv per
// chunk, stay small against the chunk's K and V). Larger chunks mean fewer cold starts
// of a thread's stream and its requests (items are handed out dynamically, so a thread's
// next chunk is not the one after its last) and fewer partials to merge (docs/tuning.md).
inline constexpr int64_t kDecodeChunkMin = 2 * kBc, kDecodeChunkMax = 16 * kBc, kDecodeMinItems = 64;

inline int64_t decode_chunk_keys(int64_t B, int64_t Hkv, int64_t Nk) {
  for (int64_t chunk = kDecodeChunkMax; chunk > kDecodeChunkMin; chunk /= 2)
    if (B * Hkv * ((Nk + chunk - 1) / chunk) >= kDecodeMinItems) return chunk;
  return kDecodeChunkMin;
}

// Threads for a decode call that reads kv_bytes of K and V: the calling thread alone at or
// below kSmallDecodeBytes (a grain size, as PyTorch's at::parallel_for has). There a second
// thread saves at most ~20 µs on an idle machine, but its fork and join wait for a core when
// another pool keeps the cores busy: beside torch's pool the 90th percentile went from 81 µs
// (one thread) to 403 µs (two) at 2 MiB (python/bench/decode_latency.py, docs/tuning.md).
// Results do not depend on it: the split is a function of the shape alone. A KVCache call
// applies it per sequence and runs the small sequences of a large call side by side
// (kv_cache_attention.cpp).
// The bytes of K and V a decode call reads: `key_rows` rows (B·Hkv·Nk, or a cache
// sequence's positions × K/V heads) of a key and a value row each (a quantized cache's
// rows with their scales).
inline int64_t decode_kv_bytes(int64_t key_rows, int64_t key_row_bytes, int64_t value_row_bytes) {
  return key_rows * (key_row_bytes + value_row_bytes);
}

inline constexpr int64_t kSmallDecodeBytes = int64_t{2} << 20;
inline int decode_threads(int team, int64_t kv_bytes) { return kv_bytes <= kSmallDecodeBytes ? 1 : team; }

// B, Hq, Hkv: batch, query and key/value heads; Nq, Nk: the query rows and keys per head.
inline ForwardPath choose_forward_path(int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, bool diagnostics,
                                       bool dropout) {
  if (diagnostics || dropout || Nq > kBr || Nk < 2 * Nq) return ForwardPath::tiled;
  const bool lone_item = B * Hkv == 1 && Nk <= decode_chunk_keys(B, Hkv, Nk);
  return lone_item && (Hq / Hkv) * Nq > kBr ? ForwardPath::tiled : ForwardPath::decode;
}

}  // namespace attnlab::engine
