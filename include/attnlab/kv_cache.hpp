#pragma once
// A paged key/value cache for decoding, and attention over it.
//
// Storage: one pool of blocks per cache, each block `block_tokens` positions of every layer's
// K and V (all K/V heads). A sequence owns a block table (block ids in position order), so
// sequences of any lengths share the pool without copying, and fork() shares a prefix's blocks
// (reference counts; a shared block is copied on its first write: copy-on-write).
// Rows are quantized when appended (CacheType below); attention dequantizes them.
//
// Element types (keys and values each have their own):
//   float32, bfloat16, float16  the value rounded to nearest even; a value the type cannot
//                               hold (beyond float16's 65504, bfloat16's 3.39e38) is an Error;
//   int8   per token and head, a float32 scale per group of 32 channels (q8_0's grouping):
//          d = max|x|/127, q = round(x/d) (ties to even) in [-127, 127];
//   int4   per token and head, a float32 scale per group of 32 channels (q4_0's scheme):
//          m = the value of largest magnitude, d = −m/8, q = round(x/d) clamped to [-8, 7];
//   fp8_e4m3  e4m3fn (max 448, no inf) of x/scale_h, with one scale per K/V head fixed when
//          the cache is created (KVCacheConfig): no stored block ever needs rescaling, and a
//          row's bits do not depend on what was appended before it. |x/scale_h| > 448 is an
//          Error that names the scale to raise.
// A group whose values are all zero stores d = 0 and dequantizes to zeros. NaN or ±inf in an
// appended row is an Error naming the layer, sequence, token and head; nothing is written.
// Quantization is a pure function of the row (IEEE division and round-to-nearest-even), so
// the same rows give the same bits on every machine and for any thread count.
//
// Outliers. Trained models' keys carry a few channels of large offset; a group's scale then
// serves them, and the ordinary channels lose their resolution. Two options of the config
// keep low-bit keys usable there (docs/python.md measures them), each invisible to the
// caller: gather() returns the rows in the caller's basis and attention's results are the
// caller's, exact up to float rounding:
//   key_rotation, value_rotation = hadamard: each row is rotated by a fixed randomized
//          Hadamard transform R (core/kv_rotation.hpp) before it is quantized, spreading an
//          outlier channel over all channels; attention rotates the queries (q·k = Rq·Rk) and
//          rotates each output row back (values). Per appended row and per query, not per key
//          read: log₂ d butterflies a value.
//   center_keys: the keys of each sequence, layer and head are stored minus their mean over
//          the first rows appended to that layer of the sequence (a fork keeps its source's),
//          removing the channels' offsets before quantizing. A score loses q·μ, the same for
//          every key of a row, which softmax ignores; attention adds it back to lse and takes
//          it from a sink's logit (a sink has no key to lose it). Softcap is not
//          shift-invariant: its calls take the gathered path, which restores the keys first.
// Not synchronised: append, fork and free must not run beside any other call on the same
// cache; the const calls (gather, attention, memory) may run together.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab {

enum class CacheType { float32, bfloat16, float16, int8, int4, fp8_e4m3 };

ATTNLAB_API const char* to_string(CacheType type);
// "float32" | "bfloat16" | "float16" | "int8" | "int4" | "fp8_e4m3"; throws Error otherwise.
ATTNLAB_API CacheType parse_cache_type(const std::string& text);

// How rows are transformed before they are quantized (see "Outliers" above).
enum class CacheRotation { none, hadamard };

ATTNLAB_API const char* to_string(CacheRotation rotation);
// "none" | "hadamard"; throws Error otherwise.
ATTNLAB_API CacheRotation parse_cache_rotation(const std::string& text);

struct KVCacheConfig {
  int64_t layers = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 0;    // of the keys (and the queries)
  int64_t value_dim = 0;   // 0 = head_dim
  int64_t max_tokens = 0;  // pool capacity in positions (rounded up to whole blocks)
  // 128 positions: each head's run inside a block (d = 128: 64 KiB float32, 18 KiB int8) is long
  // enough for the CPU's prefetchers to stream (32-position blocks decode 8/8 heads 1.2-1.5x
  // slower than one contiguous block; 128: 1.1-1.25x, docs/tuning.md), while a sequence's partial
  // last block wastes at most 127 rows and a fork copies at most one block.
  int64_t block_tokens = 128;
  CacheType key_type = CacheType::float32;
  CacheType value_type = CacheType::float32;
  // fp8_e4m3 only: the scale of each K/V head ([kv_heads], or one value for all; empty = 1).
  std::vector<float> key_scales{};
  std::vector<float> value_scales{};
  CacheRotation key_rotation = CacheRotation::none;
  CacheRotation value_rotation = CacheRotation::none;
  bool center_keys = false;
};

// What the pool holds, in bytes and blocks (a block: block_tokens positions of all layers).
struct KVCacheMemory {
  int64_t pool_bytes = 0;   // allocated at creation, never grows
  int64_t block_bytes = 0;  // one block, K and V of all layers
  int64_t total_blocks = 0;
  int64_t used_blocks = 0;    // referenced by at least one sequence
  int64_t shared_blocks = 0;  // referenced by more than one (forks)
  int64_t sequences = 0;
  int64_t bytes_per_token = 0;  // K and V of all layers and heads, scales included
};

namespace detail {
struct KVCacheAccess;  // the engine's fused kernels read the blocks in place (src/core/kv_cache_access.hpp)
}

class ATTNLAB_API KVCache {
 public:
  explicit KVCache(const KVCacheConfig& config);  // throws Error on a bad config, OutOfMemory
  ~KVCache();
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;

  const KVCacheConfig& config() const;

  int64_t add_sequence();  // a new empty sequence; ids are never reused
  // A new sequence holding the first `tokens` positions of `seq` (every layer must have
  // them); their blocks are shared until either sequence writes into one.
  int64_t fork(int64_t seq, int64_t tokens);
  void free(int64_t seq);  // its blocks return to the pool when no other sequence holds them
  std::vector<int64_t> sequences() const;
  // `operation` names the caller's operation in errors (a gather sizing its output first).
  int64_t length(int64_t seq, int64_t layer = 0, const char* operation = "length") const;

  // Appends n positions of one layer: k [1, kv_heads, n, head_dim], v [1, kv_heads, n, value_dim]
  // (any strides). All checks (shapes, values, free blocks) come before any write.
  void append(int64_t layer, int64_t seq, ConstView<float> k, ConstView<float> v);
  // The same for several sequences at once, n positions each: k [seqs.size(), kv_heads, n,
  // head_dim], v [seqs.size(), kv_heads, n, value_dim]. All of them or none: every check
  // (shapes, values, the blocks of all of them, a sequence listed twice) comes first.
  void append(int64_t layer, std::span<const int64_t> seqs, ConstView<float> k, ConstView<float> v);

  // The first `length(seq, layer)` positions dequantized, contiguous: k [1, kv_heads, len,
  // head_dim], v [1, kv_heads, len, value_dim] (any strides).
  void gather(int64_t layer, int64_t seq, TensorView<float> k, TensorView<float> v) const;

  KVCacheMemory memory() const;

 private:
  friend struct detail::KVCacheAccess;
  struct State;
  std::unique_ptr<State> state_;
};

// Attention of new query rows against the cache, for several sequences in one call.
//   q   [n_seq, Hq, Nq, head_dim]: Nq rows per sequence; or, with query_lengths,
//       [1, Hq, Σ query_lengths, head_dim]: sequence s's rows one after the other (chunked
//       prefill with a different chunk per sequence).
//   outputs: out [same rows, value_dim], lse [same rows, 1]; diagnostics and the dropout
//   mask are an Error here.
// The rows are the last positions of their sequence (append their K/V first): with
// Causal::bottom_right row i of a chunk of n sees the cache up to position len − n + i.
// Options: scale, causal (none or bottom_right), window, softcap, alibi_slopes ([Hq]),
// sinks, check_finite (of q). Masks, key_lengths, packed sequences, dropout, mask_mod and
// score_mod are an Error here. Hq must be a multiple of kv_heads (grouped-query attention).
// Float32 attention over each sequence's dequantized K/V, the same for any thread count, the
// blocks read in place: bitwise the engine's result on gather()'s tensors, except where the
// cache's own decoding step takes the call (up to 8 rows per K/V head that the engine's fused
// step cannot read in place, such as K and V of two types, softcap, ALiBi, or blocks of other
// than a multiple of 8 positions): within the engine's accuracy rule of the reference
// (docs/engine.md, the cache axis).
ATTNLAB_API void kv_cache_attention(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs,
                                    ConstView<float> q, const AttentionOptions<float>& options,
                                    const ForwardOutputs<float>& outputs, std::span<const int64_t> query_lengths = {},
                                    const ComputeConfig& config = {});

namespace reference {
// The oracle: the same in double precision over the dequantized values (exact in double).
ATTNLAB_API void kv_cache_attention(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs,
                                    ConstView<double> q, const AttentionOptions<double>& options,
                                    const ForwardOutputs<double>& outputs, std::span<const int64_t> query_lengths = {});
}  // namespace reference

}  // namespace attnlab
