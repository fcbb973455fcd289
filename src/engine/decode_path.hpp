#pragma once
// Which forward kernel an engine call runs: the one decision, made from the shapes
// alone (engine.cpp asks it for every forward call; the public API has no say).
//
//   tiled  (flash_kernels.cpp): FlashAttention-2 over (batch, query head, query tile),
//          K and V of each head packed once and shared by its query tiles. Built for
//          Nq ≈ Nk, where each packed key is used by many query rows.
//   decode (decode_kernels.cpp, decode-inl.h): few query rows per key/value head, as
//          when decoding against a KV cache (Nq = 1) or prefilling it in chunks
//          (Nq = 16…64 new rows at its end). The rows of all the query heads that share
//          a key/value head are processed together, so K and V are read once per
//          key/value head, from the caller's memory, and the keys are cut into chunks
//          that different threads take (split-KV), merged in a fixed order.
//
// The decode path is chosen when a head's queries fit one query tile (Nq ≤ kBr) and the
// keys make more than one split-KV chunk (Nk > kDecodeChunk). Then the tiled path has no
// query tiles to share its packed K and V between (the packing is a second pass over
// them), and its only parallelism is B·Hq (one thread busy at B = Hq = 1), while the
// decode path reads K and V once in place and splits the keys between the threads.
// With fewer keys there is nothing to split and both do the same products; the tiled
// path, parallel over query heads rather than key/value heads, keeps them. Not with
// diagnostics: RowDiagnostics are not merged across key chunks (the tiled path
// computes them); not with dropout, which is for training (the tiled path draws its
// mask). Every other option (masks, padding, windows, softcap, ALiBi, sinks, packed
// sequences, score_mod, mask_mod) is the same per-row score treatment in both paths.
#include "core/visibility.hpp"
#include "engine/plan.hpp"

namespace attnlab::engine {

enum class ForwardPath { tiled, decode };

// Keys per split-KV chunk: one work item, whose partial (m, l, O) is merged with the
// others' in chunk order. A constant, never a function of the thread count, so that the
// result is bitwise the same for any number of threads. Two key tiles: small enough
// that a 32768-key cache makes 64 items per head (for load balance), large enough that
// the partials (rows·dv per chunk) stay small against the chunk's K and V (chunk·(d+dv)).
inline constexpr int64_t kDecodeChunk = 2 * kBc;

// Nq, Nk: the query rows and keys per head.
inline ForwardPath choose_forward_path(int64_t Nq, int64_t Nk, bool diagnostics, bool dropout) {
  if (diagnostics || dropout) return ForwardPath::tiled;
  return Nq <= kBr && Nk > kDecodeChunk ? ForwardPath::decode : ForwardPath::tiled;
}

// Test hook: the path the calling thread's last attention_forward (float) took.
// Not a timing; lets tests prove that the decode shapes they check ran the decode path.
ForwardPath last_forward_path();

}  // namespace attnlab::engine
