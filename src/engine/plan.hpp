#pragma once
// What one engine call needs, independent of the SIMD target: the validated
// dimensions, the caller's views, the tile sizes, the variants' parameters in float,
// and per-row helpers (the row's key range, scale, ALiBi slope, sink) and per-tile
// ones (the active rectangle of a tile pair). Built by engine.cpp, consumed by the per-target kernels in
// flash_*_kernels.cpp. Nothing here allocates per element.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <limits>
#include <utility>

#include <omp.h>

#include "attnlab/engine.hpp"
#include "attnlab/float16.hpp"
#include "core/attention_checks.hpp"
#include "core/interrupt_poll.hpp"
#include "core/philox.hpp"
#include "core/visibility.hpp"

namespace attnlab::engine {

// Tile sizes. Br query rows × Bc keys per tile; Bc is a multiple of every
// target's vector length (16, 8, 4 floats), kPad rounds packed row lengths to
// a whole number of vectors on every target. See the comment in flash_forward_kernels.cpp
// (why Bc = 256).
inline constexpr int64_t kBr = 64;
inline constexpr int64_t kBc = 256;
inline constexpr int64_t kPad = 16;
// Dropout's random words are made 4·Lanes at a time: a row's buffer of them holds
// kBc + kDropoutSlack words (philox-inl.h).
inline constexpr int64_t kDropoutSlack = 256;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// The first query row, in [b, h, i] order, whose scores overflowed float32 during a
// kernel (|scale·q·k| > 3.4e38, or ∞ − ∞ inside a dot product). Kernels record rows
// from any thread; the entry point reads the smallest after the parallel region and
// turns it into an Error (exceptions cannot leave an OpenMP region). The smallest
// index, not the first to arrive, so the message is the same for any thread count.
class RowErrorLog {
 public:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  void record(int64_t flat_row) {
    int64_t seen = first_.load(std::memory_order_relaxed);
    while (flat_row < seen && !first_.compare_exchange_weak(seen, flat_row, std::memory_order_relaxed)) {
    }
  }
  int64_t first() const { return first_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> first_{kNone};
};

// Whether the call should stop: the caller's interrupt, asked on the calling thread (OpenMP's
// thread 0, through InterruptPoll's 10 ms rate), the answer shared with every thread. Work
// already under way finishes; no new tile starts. (The backward's ordered dQ waits stay
// safe: a tile only waits for tiles handed out before it, and those were all started.)
class StopRequest {
 public:
  explicit StopRequest(const std::function<bool()>* interrupt) : poll_(interrupt) {}
  bool operator()() const {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (omp_get_thread_num() != 0 || !poll_.ask()) return false;
    stopped_.store(true, std::memory_order_relaxed);
    return true;
  }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }

 private:
  mutable detail::InterruptPoll poll_;  // thread 0 only
  mutable std::atomic<bool> stopped_{false};
};

// A tile pair's active rectangle: the rows [r0, r1) of the query tile (relative to its
// first row) that see any key of the key tile, and the keys [c0, c1) (absolute) that any
// of them sees. Empty when no row sees any key of the tile: the pair is skipped.
struct TileRect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  bool empty() const { return r0 >= r1 || c0 >= c1; }
};

// The key ranges of a query tile's rows (visibility.hpp: begin and end never decrease
// with the row, so the rows that see a key tile, and the keys they see, are runs).
struct TileRows {
  int64_t rows = 0;
  int64_t begin[kBr], end[kBr];

  // The active rectangle of key tile [j0, j1).
  TileRect rect(int64_t j0, int64_t j1) const {
    TileRect t;
    while (t.r0 < rows && (end[t.r0] <= j0 || begin[t.r0] >= end[t.r0])) ++t.r0;
    t.r1 = t.r0;
    while (t.r1 < rows && begin[t.r1] < j1) ++t.r1;
    while (t.r1 > t.r0 && (end[t.r1 - 1] <= j0 || begin[t.r1 - 1] >= end[t.r1 - 1])) --t.r1;
    if (t.r0 < t.r1) t.c0 = std::max(j0, begin[t.r0]), t.c1 = std::min(j1, end[t.r1 - 1]);
    return t;
  }
  // The key tiles [first, last] that any row sees (first > last: none).
  std::pair<int64_t, int64_t> key_tiles() const {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t r = 0; r < rows; ++r)
      if (begin[r] < end[r]) lo = std::min(lo, begin[r]), hi = std::max(hi, end[r]);
    if (lo >= hi) return {0, -1};
    return {lo / kBc, (hi - 1) / kBc};
  }
};

// An input the kernels read (q, k, v; the backward's out and dO): a view of float32,
// bfloat16 or float16 elements. The kernels convert 16-bit values to float32 as they
// load them (PackRows, PackTransposed, RowsOperand in tile_ops-inl.h; the decode path's
// dot products and P·V in registers), never in a pass of their own, and compute in
// float32 from there: the results are those of the float32 engine on the inputs
// converted up front, bit for bit (except bfloat16's products where the CPU has
// VDPBF16PS: Plan::bf16_products, decode_strategy.hpp's bf16_dots). f32() gives the
// float view for the code that reads float32 in place; the 16-bit types go through the
// packing functions.
enum class ElementType { f32, bf16, f16 };
inline int64_t element_bytes(ElementType t) { return t == ElementType::f32 ? 4 : 2; }

class Operand {
 public:
  Operand() = default;
  Operand(ConstView<float> x) : Operand(ElementType::f32, x.data(), x.shape(), x.strides()) {}  // NOLINT
  Operand(ConstView<bfloat16> x) : Operand(ElementType::bf16, x.data(), x.shape(), x.strides()) {}  // NOLINT
  Operand(ConstView<float16> x) : Operand(ElementType::f16, x.data(), x.shape(), x.strides()) {}  // NOLINT

  ElementType type() const { return type_; }
  bool is_f32() const { return type_ == ElementType::f32; }
  int64_t stride(Axis axis) const { return strides_[static_cast<int>(axis)]; }
  const Shape& shape() const { return shape_; }
  // The view as its element type E (which must be type()'s).
  template <class E>
  ConstView<E> as() const {
    return {static_cast<const E*>(data_), shape_, strides_};
  }
  ConstView<float> f32() const { return as<float>(); }

 private:
  Operand(ElementType t, const void* data, const Shape& shape, const Shape& strides)
      : type_(t), data_(data), shape_(shape), strides_(strides) {}
  ElementType type_ = ElementType::f32;
  const void* data_ = nullptr;
  Shape shape_{0, 0, 0, 0}, strides_{0, 0, 0, 0};
};

// Whether this CPU has AVX512_BF16's dot products (VDPBF16PS), which the fused decoding
// step takes for a bfloat16 cache's scores (decode_strategy.hpp) and the tiled forward for
// bfloat16 inputs' products (bf16_products.hpp).
bool cpu_has_bf16_dot_products();

// Keys per block of the decode path's fused step (decode_fused_parts-inl.h): a block table's
// blocks hold a whole number of them for the fused step to read them in place.
inline constexpr int64_t kFusedBlockKeys = 8;

// What a block table's rows hold (KVBlocks::k_type, v_type), as a KVCache's types: float32,
// bfloat16 or float16 values, or a quantized cache's codes (core/kv_quantize.hpp's layouts):
// int8 and int4 codes then a float32 scale per group of 32 channels; fp8 e4m3 codes times the
// K/V head's scale.
enum class RowType : uint8_t { f32, bf16, f16, int8, int4, fp8_e4m3 };
constexpr bool is_code(RowType t) { return t >= RowType::int8; }
// The element type the kernels read rows of type t as: a 16-bit type's own, float32 for float32
// rows and for codes (decoded to float32 as they are loaded).
constexpr ElementType element_of(RowType t) {
  return t == RowType::bf16 ? ElementType::bf16 : t == RowType::f16 ? ElementType::f16 : ElementType::f32;
}
// The decode kernels' element type for rows of codes: a byte of the row (int4: two codes, the
// even channel in the low nibble). Its values exist only as the row codec decodes them
// (row_codec-inl.h), exactly as the cache's gather does.
template <RowType C>
struct CodeByte {
  static constexpr RowType kType = C;
  uint8_t bits;
};
// The decode kernels' element type for a block table whose tiles are decoded to float32 rows
// before use: K and V of two types, or blocks off the fused step's grid of 8 keys.
struct DecodedTiles {};
// The largest fp8 head scale the codec takes: it multiplies by 256 × the scale in one step,
// which must be finite (a larger scale's cache is gathered: kv_cache_attention.cpp).
inline constexpr float kFp8MaxHeadScale = std::numeric_limits<float>::max() / 256.0f;
template <class E>
inline constexpr bool kIsCode = false;
template <RowType C>
inline constexpr bool kIsCode<CodeByte<C>> = true;

// K and V of one sequence (B = 1) as a table of blocks, as a paged KV cache stores them: key j
// of K/V head h is row j % block_keys of block table[j / block_keys], whose rows of head h
// start at k + table[·]·block_bytes + h·k_head_bytes (v likewise), k_row_bytes apart, unit
// stride. The decode path reads such rows in place (decode_work-inl.h); a tensor is the
// table's special case of one block per (batch, head). With codes, or K and V of two types,
// the plan's K and V are float32 views that give the shapes only.
struct KVBlocks {
  const int32_t* table = nullptr;
  int64_t block_keys = 0;
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  int64_t block_bytes = 0, k_head_bytes = 0, v_head_bytes = 0, k_row_bytes = 0, v_row_bytes = 0;
  RowType k_type = RowType::f32, v_type = RowType::f32;
  const float* k_head_scales = nullptr;  // fp8 e4m3: per K/V head
  const float* v_head_scales = nullptr;

  // Whether the kernels decode each tile to float32 rows first (DecodedTiles): K and V of two
  // types (the fused step reads one).
  bool decodes_tiles() const { return k_type != v_type; }
  // The codes the kernels read in place, if any: K's and V's type when it is one of codes.
  RowType codes() const { return !decodes_tiles() && is_code(k_type) ? k_type : RowType::f32; }

  const std::byte* key(int64_t h, int64_t j) const { return row(k, k_head_bytes, k_row_bytes, h, j); }
  const std::byte* value(int64_t h, int64_t j) const { return row(v, v_head_bytes, v_row_bytes, h, j); }
  // Keys [j, j + n) lie in one block.
  bool one_block(int64_t j, int64_t n) const { return j / block_keys == (j + n - 1) / block_keys; }

 private:
  const std::byte* row(const std::byte* base, int64_t head_bytes, int64_t row_bytes, int64_t h, int64_t j) const {
    return base + table[j / block_keys] * block_bytes + h * head_bytes + (j % block_keys) * row_bytes;
  }
};

struct Plan {
  detail::AttentionDims dims;
  Operand q, k, v;  // float32, bfloat16 or float16, all three the same type
  const AttentionOptions<float>* options = nullptr;
  int threads = 1;
  int64_t d_pad = 0, dv_pad = 0;  // d, dv rounded up to kPad
  int64_t n_qtiles = 0, n_ktiles = 0;
  float fixed_scale = 0;          // the scale when it does not depend on the row
  bool row_scales = false;        // true for the log-n policies: scale_i per row
  // The score treatment of attention_variants.hpp, in float (MaskRow applies it).
  float softcap = 0;              // c, or 0 for none
  bool softcap_reciprocal = true;  // 1/c is a normal float: s·(1/c) rounds as well as s/c
  bool alibi = false;             // alibi_slopes given
  bool sinks = false;             // sinks given
  const MaskMod* mask_mod = nullptr;
  const ScoreMod* score_mod = nullptr;
  const BlockMask* block_mask = nullptr;  // mask_mod's tiles (the caller's, or built for the call)
  bool dropout = false;
  uint32_t dropout_threshold = 0;  // keep iff the Philox word >= this (core/philox.hpp)
  float dropout_scale = 1;         // 1/(1 − p)
  uint64_t dropout_seed = 0;
  mutable RowErrorLog overflowed_rows;  // written by the kernels (the Plan is const there)
  StopRequest stop{nullptr};            // the caller's interrupt (ComputeConfig::interrupt)
  TensorView<uint8_t> dropout_mask{};   // ForwardOutputs::dropout_mask: the forward writes the mask it applied
  // The tiled forward's and backward's products on VDPBF16PS (bf16_products.hpp): bfloat16
  // inputs, a CPU with AVX512_BF16, the switch on; the AVX-512 targets take them (tile_ops-inl.h).
  bool bf16_products = false;
  // K's and V's rows from a block table (B = 1) instead of k's and v's views, which then
  // give the element type and the shape only: the decode path alone reads them so.
  const KVBlocks* kv_blocks = nullptr;

  Plan(const detail::AttentionDims& dm, Operand q_, Operand k_, Operand v_,
       const AttentionOptions<float>& opt, int threads_, const std::function<bool()>* interrupt = nullptr)
      : dims(dm), q(q_), k(k_), v(v_), options(&opt), threads(threads_), stop(interrupt) {
    d_pad = round_up(dims.d, kPad);
    dv_pad = round_up(dims.dv, kPad);
    n_qtiles = ceil_div(dims.Nq, kBr);
    n_ktiles = ceil_div(dims.Nk, kBc);
    row_scales = opt.scale.depends_on_n();
    if (!row_scales) fixed_scale = static_cast<float>(opt.scale(dims.d, dims.Nk));
    softcap = opt.softcap ? static_cast<float>(*opt.softcap) : 0.0f;
    softcap_reciprocal = softcap == 0.0f || std::isnormal(1.0f / softcap);
    alibi = !opt.alibi_slopes.empty();
    sinks = !opt.sinks.empty();
    mask_mod = opt.mask_mod;
    score_mod = opt.score_mod;
    block_mask = opt.block_mask;
    dropout = opt.dropout.present();
    dropout_threshold = detail::dropout_threshold(opt.dropout.p);
    dropout_scale = static_cast<float>(1.0 / (1.0 - opt.dropout.p));
    dropout_seed = opt.dropout.seed;
  }

  // Keys [key_begin, key_end) of row i may be visible (causality, padding, window, packing).
  detail::KeyRange key_range(int64_t b, int64_t i) const { return detail::key_range(dims, *options, b, i); }
  int64_t key_end(int64_t b, int64_t i) const { return key_range(b, i).end; }
  int64_t key_begin(int64_t b, int64_t i) const { return key_range(b, i).begin; }
  detail::RowFrame row_frame(int64_t b, int64_t i) const { return detail::row_frame(dims, *options, b, i); }

  // The key ranges of query rows [i0, i0 + rows) of batch b.
  void tile_rows(int64_t b, int64_t i0, int64_t rows, TileRows& out) const {
    out.rows = rows;
    for (int64_t r = 0; r < rows; ++r) {
      const detail::KeyRange kr = key_range(b, i0 + r);
      out.begin[r] = kr.begin;
      out.end[r] = kr.end;
    }
  }

  // scale_i: for the log-n policies it depends on the row's visible-key count.
  float scale(int64_t b, int64_t h, int64_t i) const {
    if (!row_scales) return fixed_scale;
    return static_cast<float>(options->scale(dims.d, detail::visible_keys(dims, *options, b, h, i)));
  }

  // ALiBi's slope for query head h of sequence seq (0 without ALiBi).
  float alibi_slope(int64_t seq, int64_t h) const {
    return alibi ? detail::alibi_slope(dims, *options, seq, h) : 0.0f;
  }
  float sink(int64_t h) const { return options->sinks[static_cast<size_t>(h)]; }

  // True if no row of query tile [i0, i1) may see any key of key tile [j0, j1)
  // by causality or padding alone (key_end never decreases with i).
  bool tile_hidden(int64_t b, int64_t i1, int64_t j0) const { return key_end(b, i1 - 1) <= j0; }

  // What mask_mod's BlockMask says of query tile qt and key tile kt of (b, h).
  BlockMask::Block mask_block(int64_t b, int64_t h, int64_t qt, int64_t kt) const {
    return block_mask == nullptr ? BlockMask::Block::full : block_mask->at(b, h, qt, kt);
  }

  // True if the boolean mask hides every (row, key) of the tile: it is skipped. Rows
  // [i0, i1), keys [j0, j1) (clipped to each row's key range).
  bool tile_masked_out(int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const auto& bm = options->bool_mask;
    if (!bm.present()) return false;
    const int64_t st = bm.stride(Axis::dim);
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* row = detail::mask_row(bm, b, h, i);
      const detail::KeyRange kr = key_range(b, i);
      const int64_t end = std::min(j1, kr.end);
      for (int64_t j = std::max(j0, kr.begin); j < end; ++j)
        if (row[j * st] != 0) return false;
    }
    return true;
  }
};

}  // namespace attnlab::engine
