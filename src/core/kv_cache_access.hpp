#pragma once
// Read access to a KVCache's blocks for the fused attention kernels: where one layer's rows
// of a block are and each sequence's block table. The kernels read the cache's own bytes
// through these, and kv_cache.cpp writes and gathers rows through CacheLayerView too: the
// pool's layout, [block][layer][K: heads × T rows | V: heads × T rows], is encoded here only.
#include <cstddef>
#include <cstdint>
#include <span>

#include "attnlab/kv_cache.hpp"
#include "core/kv_rotation.hpp"

namespace attnlab::detail {

struct CacheLayerView {
  const std::byte* pool = nullptr;
  int64_t block_stride = 0;   // bytes from one block to the next
  int64_t layer_offset = 0;   // bytes from a block's start to this layer's K rows
  int64_t value_offset = 0;   // bytes from this layer's K rows to its V rows
  int64_t key_row = 0, value_row = 0;  // bytes of one head's row
  int64_t block_tokens = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
  CacheType key_type = CacheType::float32, value_type = CacheType::float32;
  const float* key_scales = nullptr;    // per K/V head (fp8_e4m3; 1 otherwise)
  const float* value_scales = nullptr;

  // Head h's T rows of keys (values) in block b: consecutive rows of key_row (value_row) bytes.
  const std::byte* keys(int32_t b, int64_t h) const {
    return pool + b * block_stride + layer_offset + h * block_tokens * key_row;
  }
  const std::byte* values(int32_t b, int64_t h) const {
    return pool + b * block_stride + layer_offset + value_offset + h * block_tokens * value_row;
  }
  // Row t of those.
  const std::byte* key(int32_t b, int64_t h, int64_t t) const { return keys(b, h) + t * key_row; }
  const std::byte* value(int32_t b, int64_t h, int64_t t) const { return values(b, h) + t * value_row; }
};

// How a sequence's stored rows differ from the caller's (kv_cache.hpp, "Outliers"): keys and
// values rotated (nullptr: not), keys minus μ [kv_heads × head_dim] in the rotated basis.
struct CacheTransforms {
  const Rotation* key_rotation = nullptr;
  const Rotation* value_rotation = nullptr;
  const float* key_center = nullptr;
  bool any() const { return key_rotation != nullptr || value_rotation != nullptr || key_center != nullptr; }
};

struct KVCacheAccess {
  static CacheLayerView layer(const KVCache& cache, int64_t layer);
  static std::span<const int32_t> blocks(const KVCache& cache, int64_t seq);  // in position order
  static CacheTransforms transforms(const KVCache& cache, int64_t seq, int64_t layer);
};

}  // namespace attnlab::detail
