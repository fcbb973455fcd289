#pragma once
// The fused decode over a paged KV cache: few query rows per K/V head, the blocks read in
// place through the block table and dequantized in registers (kv_cache_decode_kernels.cpp),
// one work item per (sequence, K/V head, chunk of blocks) and a merge in chunk order
// (kv_cache_attention.cpp). choose_cache_step (decode_strategy.hpp) says when it runs.
#include <cstdint>

#include "core/kv_cache_access.hpp"
#include "engine/decode_strategy.hpp"
#include "engine/row_end.hpp"

namespace attnlab::engine {

inline constexpr int64_t kCacheChunkBlocks = 64;  // blocks per work item: the fixed split of a sequence

// The query rows of one K/V head of one sequence and what each row sees.
struct CacheDecodeRows {
  int rows = 0;
  const float* q = nullptr;  // [rows][head_dim], contiguous
  float scale[kCacheFusedMaxRows] = {};
  int64_t key_begin[kCacheFusedMaxRows] = {}, key_end[kCacheFusedMaxRows] = {};  // positions [begin, end)
  int64_t diag[kCacheFusedMaxRows] = {};    // the row's position (ALiBi's distance is |diag − j|)
  float slope[kCacheFusedMaxRows] = {};     // ALiBi, 0 = none
};

// One work item: the rows against positions [key_begin, key_end) of one K/V head.
struct CacheDecodeWork {
  const detail::CacheLayerView* cache = nullptr;
  const int32_t* blocks = nullptr;  // the sequence's block table
  int64_t head = 0;
  int64_t key_begin = 0, key_end = 0;
  float softcap = 0.0f;  // 0 = none
  const CacheDecodeRows* queries = nullptr;  // the head's query rows
  // Out: per row the running max m and sum l of exp(s − m), and acc = Σ exp(s − m)·v
  // ([rows][value_dim]); m = −inf, l = 0 when the row sees none of these positions.
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
};

// Runs one work item on the best SIMD target of this CPU (Highway's dynamic dispatch).
void cache_decode_chunk(const CacheDecodeWork& w);

// One row's partials (the items' m, l, acc for it: chunk c's at m[c·stride], l[c·stride],
// acc + c·acc_stride) merged in chunk order into `row` [value_dim], then the sink (−inf:
// none): the contiguous decode's merge (decode_merge-inl.h's MergePartials). Returns m, l.
MergedRow cache_merge_row(int64_t n_chunks, const float* m, const float* l, int64_t stride, const float* acc,
                               int64_t acc_stride, int64_t value_dim, float sink, float* row);

}  // namespace attnlab::engine
