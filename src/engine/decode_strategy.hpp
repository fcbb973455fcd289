#pragma once
// How the decode path (decode_path.hpp says when it runs) computes one call: decided once
// per call, here, from the shapes, the element type, where K and V are likely to be, and
// the SIMD target's facts. The kernels (decode_*-inl.h) receive the answer and branch on
// nothing else; the test counters read it too.
//
// The decision table, for K and V read in place (unit-stride rows), no score treatment but
// softcap and ALiBi (score_mod, mask_mod, masks take the tile step), whole blocks of 8 keys
// that every row sees. "rows" = query rows per K/V head = (Hq / Hkv) · Nq.
// "LLC": the call's K and V fit the last-level cache; "memory": they do not.
//
//   AVX-512 (x86 AVX3 targets)
//   rows   d        cache       LLC                         memory
//   1-4    64, 128  any         fused, requests beside loads fused, row order (1 row f32:
//                                                           asks the next block's row)
//   1-4    80, 256  any         fused, beside loads         fused, spread requests
//   5      128      any         fused, beside loads         fused, row order
//   6-8    128      any         fused, beside loads         fused, row order, queries held,
//                                                           asks the next block's first lines
//   5      256      any         fused, beside loads         fused, spread requests
//   6-8    256      f32         fused, beside loads         fused, beside loads
//   6-8    256      bf16, f16   fused, beside loads         fused, spread requests
//   5-8    64       bf16 (*)    as 1-4 at d = 64            as 1-4 at d = 64
//   5-8    64-112   otherwise   fused, beside loads         fused, spread requests (f32 from
//                                                           6 rows: beside loads)
//   5-8    < 64     any         tile step, dot products     tile step, dot products
//   9-15   any      any         tile step, dot products, V streamed (8 keys a block)
//   16-64  any      any         tile step, Sᵀ = K·Qᵀ, next block's K and V asked for
//   (*) bfloat16 from 3 rows, d a multiple of 32 up to 256, on a CPU with AVX512_BF16:
//       the fused step's scores on VDPBF16PS.
//
//   AVX2, SSE4, scalar
//   1      any      any         tile step, dot products (f32: first line of each row asked)
//   2-4    any      f32         fused, spread requests 8 keys ahead
//   2-14   any      otherwise   tile step, dot products, V streamed
//   15-64  any      any         tile step, Sᵀ = K·Qᵀ (dot products below the lanes)
//
// For example B = 1, 32/8 heads, one query, Nk = 32768, d = 128, float32 on AVX-512: 4
// rows per K/V head, 256 MiB of K and V (beyond the cache), so the fused step in row order,
// FusedDecodeBlock<4, false, float, false, 8> on chunks of 4096 keys (decode_path.hpp);
// on AVX2 the fused step with spread requests (test_engine_decode_strategy checks both).
//
// Over a paged KVCache (kv_cache_attention), the cache axis, decided per sequence by
// choose_cache_step below (d, dv multiples of 16 for the engine):
//   call                                       step
//   the fused step above takes it in place:    the table above itself, K and V read in place
//   K and V of one type, blocks of any size    through the block table (Plan::kv_blocks):
//   (softcap, ALiBi its own too)               float32, float16, bfloat16 rows as they are, int8,
//                                              int4, fp8 rows decoded in registers (row_codec-inl.h)
//   otherwise, 1-8 rows, d, dv multiples of    the cache's step, fused over the blocks in place:
//   32 up to 256 (two types, calls the         dequantized in registers, the scores treated there
//   strategy does not fuse)                    (kv_cache_decode_kernels.cpp)
//   otherwise, a call the decode path takes    the table above over the block table, its tile
//   (chunked prefill)                          step; K and V of two types decoded to float32 a
//                                              tile at a time
//   otherwise                                  blocks gathered to float32, then the tiled path
//   (centred keys: softcap gathered; sinks with several rows a head not the engine's)
// e.g. B = 1, 32/8 heads, one query, Nk = 32768, d = 128: float32, the table above's fused step
// in row order over the blocks; int8: the same step, its rows decoded as they are loaded; int8
// keys with int4 values: the cache's step.
//
// Why, in a line each (docs/tuning.md holds the measurements):
// - few rows do 2 FLOPs per byte: the step must keep the memory busy, so the fused step
//   takes keys 8 at a time through scores, softmax and P·V with its requests spread;
// - requests into L2 (AVX-512) do not hold L1's few miss buffers, so one row and 16-bit
//   caches gain from the fused step there; on AVX2 they stayed with the tile step;
// - in cache the spread requests' bookkeeping costs more than it brings: beside the loads;
// - from memory, reading K and V row after row lets the CPU's prefetchers run ahead
//   (rows of 4 or 8 vectors; d = 256 rereads V too often and keeps the requests);
// - from 6 rows the queries are held in registers, and a block of 8 keys of f32 at
//   d = 128 is one 4 KiB page, which the prefetchers do not cross: ask its first lines;
// - 5 to 8 rows below d = 64 weigh the fused step's per-key costs against too few FMAs; from
//   64 to 112 the contiguous steps are even within the noise, and a paged cache gets the
//   contiguous bits and, at 40/8, 1.5-2.1x its own step's speed;
// - up to 14 rows (or fewer than a vector's lanes) dot products along d use every lane;
//   beyond, K·Qᵀ with a transpose.
#include <array>
#include <cstdint>

#include "engine/decode_path.hpp"
#include "engine/plan.hpp"

namespace attnlab::engine {

// The policy's constants (the table above; docs/tuning.md has the measurements).
inline constexpr int64_t kDecodeDotsMaxRows = 14;       // dot products up to here, then K·Qᵀ
inline constexpr int64_t kFusedManyRowsMinDim = 64;     // 5 to 8 rows fused from this d
inline constexpr int64_t kBf16DotsMaxDim = 256;         // the fused step holds R × d bfloat16 queries
inline constexpr int kQueriesHeldMinRows = 6;           // row order holds the queries from here
// From this many rows the fused softmax takes two rows a vector on AVX-512: one exponential
// and one sum tree for the pair; below, the pairs made the small steps' scores spill.
inline constexpr int kFusedSoftmaxPairsMinRows = 6;

// From memory too, a float32 cache not read in row order (d = 256) asks beside its loads from
// this many rows: the spread requests' bookkeeping costs more than it brings there.
inline constexpr int64_t kFusedBesideLoadsMinRows = 6;


// Over a block table whose K run per head and block is at most this long (blocks of up to 256
// positions of 16-bit rows at d = 128), a 16-bit cache's fused step asks beside its loads
// through the table instead of reading in row order. Zen 4, two builds interleaved, d = 128:
// 32/8 1.16-1.25x faster at 32 KiB runs, 1.70x at 4 KiB, 8/8 even; runs of 128 KiB and more
// lost 11-13 % at 8/8. float32 gained nothing beyond the noise (docs/tuning.md).
inline constexpr int64_t kAskedBlockRunMaxBytes = int64_t{64} << 10;

// The fused step's rows: AVX-512's 32 vector registers hold 8 rows' accumulators, 16 hold 4.
constexpr int64_t fused_max_rows(bool avx512) { return avx512 ? 8 : 4; }
// One row gains from the fused step only where its requests go into L2 (AVX-512): into L1
// they hold its few miss buffers, and the tile step's dot products were faster.
constexpr int64_t fused_min_rows(bool avx512) { return avx512 ? 1 : 2; }
// 16-bit K and V take the fused step on AVX-512 only (requests into L2, as above); float32
// on every target.
constexpr bool fused_takes_element(bool f32, bool avx512) { return f32 || avx512; }

// The fused P·V's register block, rows × this many vectors of columns: 4 for 1-2 rows, 2
// for more...
constexpr int fused_narrow_value_vectors(int64_t rows) { return rows <= 2 ? 4 : 2; }
// ... or 3 for 3 to kThreeValueVectorsMaxRows rows up to 16 vectors of columns: 7 and 8
// rows (21, 24 accumulators) and d = 256 lost with 3 (docs/tuning.md, register blocking).
inline constexpr int64_t kThreeValueVectorsMaxRows = 6;
constexpr int fused_value_vectors(int64_t rows, int64_t dv_vectors) {
  return rows > 2 && rows <= kThreeValueVectorsMaxRows && dv_vectors <= 16 ? 3 : fused_narrow_value_vectors(rows);
}

// Whether the fused step in row order asks for the next block's first lines as each block
// starts (one float32 row: its whole first row; from kQueriesHeldMinRows rows: its first
// line). A constant of the kernel's rows and type, so the kernels compile it in.
constexpr bool row_order_asks_next_block(int64_t rows, bool f32) {
  return (rows == 1 && f32) || rows >= kQueriesHeldMinRows;
}

// The fused step's reads from memory as measured on this machine per cell (type, rows, d;
// attnlab/decode_tuning.hpp), or the rule's way. Every way gives the same bits.
enum class TunedReads : uint8_t { rule, beside_loads, spread, row_order };
inline constexpr int kTunedCells = 3 * 8 * 3;  // ElementType × rows 1-8 × d of 64, 128, 256
using TunedReadsTable = std::array<TunedReads, kTunedCells>;
// The cell of a shape, or -1 when no cell holds it.
constexpr int tuned_cell(ElementType t, int64_t rows, int64_t d) {
  const int dc = d == 64 ? 0 : d == 128 ? 1 : d == 256 ? 2 : -1;
  if (dc < 0 || rows < 1 || rows > 8) return -1;
  return (static_cast<int>(t) * 8 + static_cast<int>(rows - 1)) * 3 + dc;
}

// The decode policy's inputs besides the shapes: the library's values (engine.cpp), or
// those of a test's probe (engine/testing/engine_probe.hpp).
struct DecodeSwitches {
  bool fused = true;       // off: the tile step everywhere (as 16-bit caches off AVX-512)
  bool bf16_dots = true;   // off: bfloat16 scores on converted values
  bool row_order = true;   // off: from memory, the spread requests
  // The fused step asks beside its loads when K and V hold at most this many bytes: the
  // last-level cache's size (0 when unknown: never), so that a cache a call finds where the
  // call before left it is read the way a cache is read fastest, one from memory the way
  // memory is.
  int64_t beside_loads_max_kv_bytes = 0;
  // ... and, for a float32 cache not read in row order (d = 256), from this many rows per
  // K/V head whatever the size.
  int64_t beside_loads_min_rows = kFusedBesideLoadsMinRows;
  // From memory, the measured way where a cell holds one (decode_tuning.hpp): all `rule`
  // unless a tuning is in use.
  TunedReadsTable tuned_reads{};
};
// The library's switches: all on, the last-level cache's size, the tuning in use (engine.cpp).
DecodeSwitches default_decode_switches();
// The tuning in use (decode_tuning.cpp): this thread's while measure_decode_tuning times a way,
// else the process's (use_decode_tuning, or at the first call the file ATTNLAB_DECODE_TUNING
// names: an Error if it cannot be used), else none (null).
const TunedReadsTable* tuned_reads_in_use();
// The switches a call takes: an installed test probe's, else the library's (engine.cpp).
DecodeSwitches decode_switches();

// What a SIMD target brings to the decision (decode_target-inl.h fills it per target).
struct DecodeTargetFacts {
  int64_t lanes = 1;          // float lanes of a vector
  bool avx512 = false;        // requests into L2; fuses one row and 16-bit caches
  bool bf16_dot_products = false;  // the CPU has AVX512_BF16's VDPBF16PS (AVX-512 only)
};

enum class DecodeScores { dots, keys_times_queries };  // the tile step's scores

// How the fused step brings K's and V's lines in.
enum class FusedReads { spread, beside_loads, row_order };

// How the tile step's O += P·V brings V's rows in (its first row block; later ones find
// them in cache).
enum class VFetch {
  kCached,     // keys 64 at a time, V left to the caches (V packed, one row, or dots' V asked with the scores)
  kStream,     // keys 8 at a time, each block asking for the V rows 16 keys ahead
  kNextBlock,  // keys 16 at a time, the next block's V rows asked for over the column chunks
};

struct DecodeStrategy {
  int64_t rows = 0;                 // query rows per K/V head
  DecodeScores scores = DecodeScores::dots;
  VFetch v_fetch = VFetch::kCached;  // V read in place; packed V is always kCached
  bool k_in_place = false, v_in_place = false;
  // The fused step, on the tiles that allow it (whole blocks every row sees).
  bool fused = false;
  FusedReads reads = FusedReads::spread;
  int row_vectors = 0;              // row order: vectors per K/V row (4 or 8)
  bool asks_next_block = false;     // row order: first lines of the next block as each starts
  bool bf16_dots = false;           // fused scores on VDPBF16PS
  int value_vectors = 2;            // fused P·V register block: rows × this many vectors
};

struct DecodeShape {
  int64_t B = 1, Hkv = 1, rows = 1, Nk = 0, d = 0, dv = 0, dv_pad = 0;
  ElementType type = ElementType::f32;
  RowType codes = RowType::f32;  // a block table of a quantized cache's codes read in place (type is then f32); f32: none
  bool bf16_queries = false;  // q is bfloat16 too (VDPBF16PS takes q's bits as they are)
  int64_t block_run_bytes = 0;  // through a block table (Plan::kv_blocks): a head's K run in a block; 0: none
  int64_t k_row_bytes = 0, v_row_bytes = 0;  // a block table's rows; 0: d, dv elements of the type
  bool k_unit_stride = true, v_unit_stride = true;  // stride along d is 1
  bool score_treatment = false;  // score_mod, mask_mod, an additive or boolean mask (not softcap or ALiBi)
  int64_t kv_bytes() const {
    return decode_kv_bytes(B * Hkv * Nk, k_row_bytes > 0 ? k_row_bytes : d * element_bytes(type),
                           v_row_bytes > 0 ? v_row_bytes : dv * element_bytes(type));
  }
};

inline DecodeShape decode_shape(const Plan& p) {
  const auto& dm = p.dims;
  const AttentionOptions<float>& o = *p.options;
  DecodeShape c;
  c.B = dm.B, c.Hkv = dm.Hkv, c.rows = dm.group() * dm.Nq, c.Nk = dm.Nk, c.d = dm.d, c.dv = dm.dv, c.dv_pad = p.dv_pad;
  c.type = p.k.type();
  c.bf16_queries = p.q.type() == ElementType::bf16;
  if (const KVBlocks* t = p.kv_blocks) {
    c.codes = t->codes(), c.block_run_bytes = t->block_keys * t->k_row_bytes;
    c.k_row_bytes = t->k_row_bytes, c.v_row_bytes = t->v_row_bytes;
  }
  c.k_unit_stride = p.k.stride(Axis::dim) == 1, c.v_unit_stride = p.v.stride(Axis::dim) == 1;
  c.score_treatment =
      p.score_mod != nullptr || p.mask_mod != nullptr || o.additive_mask.present() || o.bool_mask.present();
  return c;
}

// The one decision (see the table above).
inline DecodeStrategy choose_decode_strategy(const DecodeShape& c, const DecodeTargetFacts& t,
                                             const DecodeSwitches& s) {
  const bool codes = is_code(c.codes);
  const bool f32 = c.type == ElementType::f32 && !codes;
  DecodeStrategy st;
  st.rows = c.rows;
  st.scores = c.rows < t.lanes || c.rows <= kDecodeDotsMaxRows ? DecodeScores::dots : DecodeScores::keys_times_queries;
  st.k_in_place = c.k_unit_stride && c.d % t.lanes == 0;
  st.v_in_place = c.v_unit_stride && c.dv % kPad == 0;
  if (st.v_in_place)
    st.v_fetch = st.scores == DecodeScores::dots ? (c.rows >= 2 ? VFetch::kStream : VFetch::kCached) : VFetch::kNextBlock;

  st.bf16_dots = t.avx512 && c.type == ElementType::bf16 && c.bf16_queries && c.rows >= 3 && c.d % 32 == 0 &&
                 c.d <= kBf16DotsMaxDim && t.bf16_dot_products && s.bf16_dots;
  st.fused = s.fused && c.rows >= fused_min_rows(t.avx512) && c.rows <= fused_max_rows(t.avx512) &&
             fused_takes_element(f32 || codes, t.avx512) &&
             (c.rows <= 4 || c.d >= kFusedManyRowsMinDim || st.bf16_dots) && st.k_in_place && st.v_in_place &&
             !c.score_treatment;
  if (t.avx512) {
    const int64_t n = c.d / t.lanes;
    // Rows of 4 vectors (d = 64) in row order are compiled up to 4 rows, and with the bfloat16 dot products.
    const int row_vectors = s.row_order && c.dv == c.d && c.dv_pad == c.d && c.d % t.lanes == 0 &&
                                    (n == 8 || (n == 4 && (c.rows <= 4 || st.bf16_dots)))
                                ? static_cast<int>(n)
                                : 0;
    const bool beside = (f32 && c.rows >= s.beside_loads_min_rows && row_vectors == 0) ||
                        c.kv_bytes() <= s.beside_loads_max_kv_bytes;
    st.reads = beside ? FusedReads::beside_loads : row_vectors != 0 ? FusedReads::row_order : FusedReads::spread;
    // From memory, a measured cell's way instead (row order only where rows are 4 or 8 vectors).
    const int cell = tuned_cell(c.type, c.rows, c.d);
    const TunedReads tuned = cell >= 0 && c.dv == c.d && c.dv_pad == c.d && c.kv_bytes() > s.beside_loads_max_kv_bytes
                                 ? s.tuned_reads[static_cast<size_t>(cell)]
                                 : TunedReads::rule;
    if (tuned == TunedReads::beside_loads) st.reads = FusedReads::beside_loads;
    if (tuned == TunedReads::spread) st.reads = FusedReads::spread;
    if (tuned == TunedReads::row_order && row_vectors != 0) st.reads = FusedReads::row_order;
    // A 16-bit cache over a block table of short runs (a paged cache): row order leaves each
    // block's start to the CPU's prefetchers, which stop there; asking beside the loads goes
    // through the table.
    if (!f32 && c.block_run_bytes > 0 && c.block_run_bytes <= kAskedBlockRunMaxBytes &&
        st.reads == FusedReads::row_order)
      st.reads = FusedReads::beside_loads;
    // Codes ask beside their loads: rows of a few lines, each load's request a line (one
    // way compiled for them; all give the same bits).
    if (codes) st.reads = FusedReads::beside_loads;
    if (st.reads == FusedReads::row_order) {
      st.row_vectors = row_vectors;
      st.asks_next_block = row_order_asks_next_block(c.rows, f32);
    }
  }
  // int4 loads its values two vectors at a time (row_codec-inl.h): an even register block.
  st.value_vectors = c.codes == RowType::int4 ? fused_narrow_value_vectors(c.rows)
                                             : fused_value_vectors(c.rows, c.dv_pad / t.lanes);
  return st;
}

// The cache axis (the table above): how a paged cache's sequence is read.
//   engine:  the decode path itself, K and V read in place through the block table
//            (Plan::kv_blocks), whatever the cache's types;
//   cache:   the cache's own fused step (kv_cache_decode_kernels.cpp);
//   gather:  the blocks gathered to float32, then an ordinary engine call.
// A decode step reads each K/V byte once for all its rows, so reading the cache's own bytes
// beats gathering them (8-11x at 16 rows against 32k positions, docs/tuning.md). The engine
// takes a call its fused step takes in place (`fused_in_place`: K and V of one type, any block
// size, a call the decode strategy fuses, softcap and ALiBi included) at least as
// fast as the cache's step; elsewhere, up to kCacheFusedMaxRows rows, the cache's step, which
// treats the scores itself and reads two types, stays the faster (decoding each tile to float32
// first took 1.3-2x its time); beyond, the engine's tile step over the table. The engine needs
// rows of whole vectors (its row codec) and, for centred keys, a lost q·μ it can give back: a
// sink is per query head, so not with sinks and several query rows (`row_sinks`), and softcap is
// no shift (the cache's step gives each row its own; with softcap neither can).
enum class CacheStep { engine, cache, gather };
inline constexpr int64_t kCacheFusedMaxRows = 8;
// The cache's step: d and dv in whole groups of 32 channels (int8/int4's scales), up to 256
// (its register blocks of queries).
inline constexpr int64_t kCacheFusedMaxDim = 256;
constexpr CacheStep choose_cache_step(bool decode_path, bool fused_in_place, int64_t rows, int64_t d, int64_t dv,
                                      bool keys_centred, bool row_sinks, bool softcap) {
  if (keys_centred && softcap) return CacheStep::gather;
  const bool engine = decode_path && d % kPad == 0 && dv % kPad == 0 && !(keys_centred && row_sinks);
  const bool cache = rows >= 1 && rows <= kCacheFusedMaxRows && d % 32 == 0 && dv % 32 == 0 &&
                     d <= kCacheFusedMaxDim && dv <= kCacheFusedMaxDim;
  if (engine && fused_in_place) return CacheStep::engine;
  if (cache) return CacheStep::cache;
  return engine ? CacheStep::engine : CacheStep::gather;
}

// Whether the cache's step asks for the K (V) rows 64 positions ahead through the block table,
// for rows of `row_bytes`: rows under 4 cache lines (int8, int4, fp8 at d = 128: 80-144 bytes)
// are; longer ones (float32, float16, bfloat16) are left to the CPU's prefetchers, which stream
// a head's 32-64 KiB run of a block, and which the requests only crowd. Zen 5, two builds
// interleaved, 8/8 and 32/8: asking made the short rows 5-27 % faster and the long ones 6-21 %
// slower (docs/tuning.md). Results do not depend on it.
inline constexpr int64_t kCacheAskedRowMaxBytes = 255;
constexpr bool cache_rows_asked_ahead(int64_t row_bytes) { return row_bytes <= kCacheAskedRowMaxBytes; }

}  // namespace attnlab::engine
