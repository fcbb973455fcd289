#pragma once
// One attention call over a KVCache as one ordinary call per sequence: the checks of the
// arguments and the per-sequence views, shared by the engine's and the reference's versions.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "attnlab/kv_cache.hpp"
#include "core/attention_checks.hpp"

namespace attnlab::detail {

// A sequence's rows of a [n_seq, ·, Nq, ·] (packed = false) or [1, ·, total, ·] tensor.
template <class T>
TensorView<T> sequence_rows(TensorView<T> x, bool packed, int64_t s, int64_t row0, int64_t rows) {
  if (!packed) return {x.data() + s * x.stride(Axis::batch), {1, x.heads(), x.seq(), x.dim()}, x.strides()};
  return {x.data() + row0 * x.stride(Axis::seq), {1, x.heads(), rows, x.dim()}, x.strides()};
}

// outputs holds out and lse only: diagnostics and the dropout mask are an Error here.
template <class T>
void check_kv_cache_outputs(const ForwardOutputs<T>& outputs) {
  if (outputs.diagnostics) throw Error("kv_cache_attention: diagnostics are not supported here");
  if (outputs.dropout_mask.present()) throw Error("kv_cache_attention: a dropout mask is not supported (nor dropout)");
}

// One sequence's share of a call: its index in seqs, its id and length, and its rows of q,
// out and lse ([1, Hq, rows, ·]).
template <class T>
struct CachedSequence {
  int64_t index = 0, seq = 0, len = 0;
  ConstView<T> q;
  TensorView<T> out, lse;
};

// Checks the call; returns, in order, the sequences with at least one query row.
template <class T>
std::vector<CachedSequence<T>> cached_sequences(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs,
                                                ConstView<T> q, const AttentionOptions<T>& o, TensorView<T> out,
                                                TensorView<T> lse, std::span<const int64_t> query_lengths) {
  const KVCacheConfig& c = cache.config();
  const char* unsupported =
      o.bool_mask.present()                                ? "bool_mask"
      : o.additive_mask.present()                          ? "additive_mask"
      : !o.key_lengths.empty()                             ? "key_lengths (the cache knows each sequence's length)"
      : !o.cu_seqlens_q.empty() || !o.cu_seqlens_k.empty() ? "cu_seqlens (use query_lengths)"
      : o.dropout.p != 0.0                                 ? "dropout"
      : o.mask_mod || o.score_mod || o.block_mask          ? "mask_mod/score_mod"
      : o.query_offset != 0 || o.key_offset != 0           ? "query_offset/key_offset (the cache places the rows)"
      : o.causal == Causal::top_left ? "causal top_left (the new rows end the sequence: bottom_right)"
                                     : nullptr;
  if (unsupported) throw Error(fmt::format("kv_cache_attention: {} is not supported over a KV cache", unsupported));
  if (layer < 0 || layer >= c.layers)
    throw Error(fmt::format("kv_cache_attention: layer {} is not in [0, {})", layer, c.layers));
  const auto n_seq = static_cast<int64_t>(seqs.size());
  const bool packed = !query_lengths.empty();
  if (packed && static_cast<int64_t>(query_lengths.size()) != n_seq)
    throw Error(fmt::format("kv_cache_attention: {} query_lengths for {} sequences", query_lengths.size(), n_seq));
  int64_t total = 0;
  for (int64_t n : query_lengths) {
    if (n < 0) throw Error(fmt::format("kv_cache_attention: query length {} is negative", n));
    total += n;
  }
  const int64_t hq = q.heads();
  if (hq < 1 || hq % c.kv_heads != 0)
    throw Error(fmt::format("kv_cache_attention: q has {} heads, not a positive multiple of the cache's {} K/V heads",
                            hq, c.kv_heads));
  const Shape qwant = packed ? Shape{1, hq, total, c.head_dim} : Shape{n_seq, hq, q.seq(), c.head_dim};
  const Shape owant{qwant[0], hq, qwant[2], c.value_dim}, lwant{qwant[0], hq, qwant[2], 1};
  if (q.shape() != qwant || out.shape() != owant || lse.shape() != lwant)
    throw Error(fmt::format("kv_cache_attention: q {}, out {}, lse {} should be {}, {}, {} ({})", to_string(q.shape()),
                            to_string(out.shape()), to_string(lse.shape()), to_string(qwant), to_string(owant),
                            to_string(lwant), packed ? "[1, Hq, Σ query_lengths, ·]" : "[n_seq, Hq, Nq, ·]"));
  // The options' own rules, before any path is chosen: the fused step refuses what the engine
  // refuses, in its words. Each sequence is one batch entry of its own: ALiBi takes [Hq] slopes.
  AttentionDims dims;
  dims.B = 1, dims.Hq = hq, dims.Hkv = c.kv_heads, dims.Nq = qwant[2], dims.Nk = 1, dims.d = c.head_dim,
  dims.dv = c.value_dim;
  for (int64_t seq : seqs) dims.Nk = std::max(dims.Nk, cache.length(seq, layer));  // the farthest key any row sees
  check_variants(o, dims);
  std::vector<CachedSequence<T>> calls;
  int64_t row0 = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t rows = packed ? query_lengths[static_cast<size_t>(s)] : q.seq();
    const int64_t seq = seqs[static_cast<size_t>(s)], len = cache.length(seq, layer);
    if (len == 0)
      throw Error(
          fmt::format("kv_cache_attention: sequence {} holds no position in layer {} (append "
                      "the new rows' K/V before attending)",
                      seq, layer));
    if (rows > 0)
      calls.push_back({s, seq, len, ConstView<T>(sequence_rows(q, packed, s, row0, rows)),
                       sequence_rows(out, packed, s, row0, rows), sequence_rows(lse, packed, s, row0, rows)});
    row0 += rows;
  }
  return calls;
}

// A sequence's dequantized K/V, contiguous float32: k [1, kv_heads, len, head_dim], v [1, kv_heads, len, value_dim].
inline std::pair<Tensor<float>, Tensor<float>> gathered_sequence(const KVCache& cache, int64_t layer, int64_t seq,
                                                                 int64_t len) {
  const KVCacheConfig& c = cache.config();
  Tensor<float> k({1, c.kv_heads, len, c.head_dim}), v({1, c.kv_heads, len, c.value_dim});
  cache.gather(layer, seq, k, v);
  return {std::move(k), std::move(v)};
}

}  // namespace attnlab::detail
