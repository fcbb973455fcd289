// What the decode path's items share (DecodeWork, DecodeScratch), where their K and V
// rows come from, and the checks of their values. Included once per SIMD target.
//
// Rows. The M = group·Nq query rows that share key/value head hk are one problem: row r
// is query head hk·group + r / Nq, query r % Nq. They are taken kBr at a time (a row
// block); every row block of a key tile uses the tile while it is in L2, so K and V are
// read from memory once per key/value head whatever the group size.
//
// Split-KV. Each item (batch, key/value head, key chunk) runs the online softmax over its
// own chunk of keys (m, l and an unnormalised O per row: its partial); MergeRow combines
// a row's partials in chunk order. The chunks are fixed by the shapes
// (decode_chunk_keys), so every row's sums are the same sequence of float operations for
// any number of threads: bitwise identical results, as in the tiled path.
#if defined(ATTNLAB_ENGINE_DECODE_WORK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_WORK_INL_H_
#undef ATTNLAB_ENGINE_DECODE_WORK_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_WORK_INL_H_
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "hwy/highway.h"
#include "engine/decode_path.hpp"
#include "engine/decode_strategy.hpp"
#include "engine/decode_target-inl.h"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// What every item of one call reads (the Plan, the strategy, per-row values computed
// once) and the partials of the current batch of key/value heads, which items write and
// MergeRow reads.
struct DecodeWork {
  const Plan* p = nullptr;
  DecodeStrategy strategy;     // choose_decode_strategy, once per call
  int64_t rows = 0;            // M = group·Nq rows per key/value head
  int64_t chunk = 0;           // keys per chunk (decode_chunk_keys)
  int64_t n_chunks = 0;        // key chunks per (batch, key/value head)
  const int64_t* begin = nullptr;  // [B, Nq] key_begin of query i of batch b (windows, packed sequences)
  const int64_t* end = nullptr;    // [B, Nq] key_end of query i of batch b
  const float* scale = nullptr;    // [B, Hq, Nq] scale_i
  // Partials, per item (key/value head of the batch, chunk) = kvl·n_chunks + c:
  float* o = nullptr;          // [items, M, dv_pad] unnormalised O
  float* m = nullptr;          // [items, M] running max
  float* l = nullptr;          // [items, M] running sum
  bool* nan_score = nullptr;   // [items, M] a visible score was NaN (see SoftmaxRow)
  // With options.check_finite: set when K or V may hold a NaN or ±inf (see DecodeChunk).
  std::atomic<bool>* kv_suspect = nullptr;

  int64_t head_of(int64_t hk, int64_t r) const { return hk * p->dims.group() + r / p->dims.Nq; }
  int64_t query_of(int64_t r) const { return r % p->dims.Nq; }
};

// Per-thread buffers of the decode path.
struct DecodeScratch {
  // The item's queries, packed once: Q rows [M × d_pad] (dot products), else per row
  // block of kBr rows, Qᵀ [d × W_pad] at block · d · kBr.
  ScratchBuffer<float> q;
  ScratchBuffer<float> st;  // Sᵀ = K·Qᵀ of a key tile [Bc × W_pad]
  ScratchBuffer<float> s;   // S, then P, of the row block [Br × Bc]
  ScratchBuffer<float> k;   // the tile's K rows [Bc × d_pad], when the dot products cannot read them in place
  ScratchBuffer<float> v;   // the tile's V rows [Bc × dv_pad], when not read in place
  // A block table's tile that crosses blocks, K's and V's rows as stored (CopyBlockRows).
  ScratchBuffer<float> k_copy, v_copy;
  // A group of the fused step's 8 keys across a block's end (blocks off the 8-key grid), as stored.
  ScratchBuffer<float> k_group, v_group;
  explicit DecodeScratch(const Plan& p)
      : q(Scratch(p.d_pad * round_up(p.dims.group() * p.dims.Nq, kBr))), st(Scratch(kBc * kBr)), s(Scratch(kBr * kBc)),
        k(Scratch(kBc * p.d_pad)), v(Scratch(kBc * p.dv_pad)),
        k_copy(Scratch(p.kv_blocks != nullptr ? kBc * p.d_pad : 0)),
        v_copy(Scratch(p.kv_blocks != nullptr ? kBc * p.dv_pad : 0)),
        k_group(Scratch(p.kv_blocks != nullptr ? kFusedBlockKeys * (p.kv_blocks->k_row_bytes + 3) / 4 : 0)),
        v_group(Scratch(p.kv_blocks != nullptr ? kFusedBlockKeys * (p.kv_blocks->v_row_bytes + 3) / 4 : 0)) {}
};

// Packs the queries of key/value head (b, hk) into sc.q, laid out as DecodeScratch says.
void PackQueries(const DecodeWork& w, int64_t b, int64_t hk, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const int64_t d = p.dims.d, L = static_cast<int64_t>(hn::Lanes(DF()));
  if (w.strategy.scores == DecodeScores::dots) {
    for (int64_t r = 0; r < w.rows; ++r)
      PackRows(p.q, b, w.head_of(hk, r), w.query_of(r), 1, d, p.d_pad, sc.q.get() + r * p.d_pad);
    return;
  }
  WithElementType(p.q, [&](auto qv) {
    const int64_t q_ks = qv.stride(Axis::dim);
    for (int64_t r0 = 0; r0 < w.rows; r0 += kBr) {
      const int64_t block_rows = std::min(kBr, w.rows - r0), block_rows_pad = round_up(block_rows, L);
      float* qt = sc.q.get() + (r0 / kBr) * d * kBr;
      for (int64_t r = 0; r < block_rows; ++r) {
        const auto* q = qv.row(b, w.head_of(hk, r0 + r), w.query_of(r0 + r));
        for (int64_t c = 0; c < d; ++c) qt[c * block_rows_pad + r] = ToFloat(q[c * q_ks]);
      }
      for (int64_t c = 0; c < d; ++c)
        for (int64_t r = block_rows; r < block_rows_pad; ++r) qt[c * block_rows_pad + r] = 0.0f;
    }
  });
}

// Rows of K or V read in place by the decode kernels (the strategy's k_in_place,
// v_in_place: unit-stride rows, whole vectors), of their own element type; null otherwise:
// the rows are then packed into float scratch.
template <class E>
struct InPlaceRows {
  const E* data = nullptr;
  size_t stride = 0;  // elements between rows
};
// Rows [j0, j0 + n) of (b, h) of K (keys) or V as one run in place: from the call's tensor,
// or from the block table (Plan::kv_blocks) when they lie in one block; else {}.
template <class E>
InPlaceRows<E> RowsInPlace(const Plan& p, bool in_place, bool keys, int64_t b, int64_t h, int64_t j0, int64_t n) {
  if (!in_place) return {};
  if (const KVBlocks* t = p.kv_blocks) {
    if (n < 1 || !t->one_block(j0, n)) return {};
    const int64_t row_bytes = keys ? t->k_row_bytes : t->v_row_bytes;
    return {reinterpret_cast<const E*>(keys ? t->key(h, j0) : t->value(h, j0)),
            static_cast<size_t>(row_bytes) / sizeof(E)};
  }
  const ConstView<E> x = (keys ? p.k : p.v).as<E>();
  return {x.row(b, h, j0), static_cast<size_t>(x.stride(Axis::seq))};
}

// Row j of a run of n rows in place that starts at key key0, for a request that may look past
// the run: past a block table's run, the row is found through the table (a request only, so
// the address never faults; the right one brings the right line).
template <class E>
HWY_INLINE const E* RowAhead(const Plan& p, const InPlaceRows<E>& rows, bool keys, int64_t b, int64_t h, int64_t key0,
                             int64_t n, size_t j) {
  if (p.kv_blocks == nullptr || static_cast<int64_t>(j) < n) return rows.data + j * rows.stride;
  return RowsInPlace<E>(p, true, keys, b, h, key0 + static_cast<int64_t>(j), 1).data;
}

// Rows [j0, j0 + n) of the block table's K (keys) or V of head h copied, as stored, into
// dst (rows of `row` elements): a tile that crosses blocks, for the tile step, which then
// reads the copy as it reads rows in place (the same operations, so the same bits).
template <class E>
InPlaceRows<E> CopyBlockRows(const KVBlocks& t, bool keys, int64_t h, int64_t j0, int64_t n, int64_t row, E* dst) {
  const size_t bytes = static_cast<size_t>(keys ? t.k_row_bytes : t.v_row_bytes);
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(dst + j * row, keys ? t.key(h, j0 + j) : t.value(h, j0 + j), bytes);
  return {dst, static_cast<size_t>(row)};
}

// Asks for rows [j, j + n) of x (row stride x_rs elements, `bytes` each) to be brought
// into the caches: every 64-byte line of each row, or with `first_line` only its first.
template <class E>
HWY_INLINE void PrefetchRows(const E* x, size_t x_rs, size_t j, size_t n, size_t bytes, bool first_line) {
  for (size_t r = j; r < j + n; ++r) {
    const char* row = reinterpret_cast<const char*>(x + r * x_rs);
    if (first_line) {
      PrefetchLine(row);
      continue;
    }
    for (size_t b = 0; b < bytes; b += 64) PrefetchLine(row + b);
  }
}

// True if x[0, n) holds no NaN or ±inf: x·0 is 0 for a finite x and NaN otherwise, so one
// fused multiply-add per vector accumulates the answer.
bool AllFinite(const float* x, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc = hn::Zero(df);
  int64_t j = 0;
  for (; j + L <= n; j += L) acc = hn::MulAdd(hn::LoadU(df, x + j), hn::Zero(df), acc);
  bool finite = hn::AllFalse(df, hn::IsNaN(acc));
  for (; j < n; ++j) finite &= std::isfinite(x[j]);
  return finite;
}

// True if rows [j0, j0 + n) of x[b, h] (cols values each, any strides) are all finite.
bool RowsFinite(ConstView<float> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols) {
  const int64_t st = x.stride(Axis::dim);
  for (int64_t j = j0; j < j0 + n; ++j) {
    const float* row = x.row(b, h, j);
    if (st == 1) {
      if (!AllFinite(row, cols)) return false;
    } else {
      for (int64_t c = 0; c < cols; ++c)
        if (!std::isfinite(row[c * st])) return false;
    }
  }
  return true;
}
template <class E>
bool RowsFinite(ConstView<E> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols) {
  for (int64_t j = j0; j < j0 + n; ++j)
    for (int64_t c = 0; c < cols; ++c)
      if (!x(b, h, j, c).is_finite()) return false;
  return true;
}
bool RowsFinite(const Operand& x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols) {
  bool finite = true;
  WithElementType(x, [&](auto view) { finite = RowsFinite(view, b, h, j0, n, cols); });
  return finite;
}

// True if no row of block [r0, r0 + block_rows) may see any key of tile [j0, j0 + nc): by
// causality and padding (key_end), a window or a packed sequence (key_begin), or
// because the boolean mask hides them all. So a sliding window of a long cache reads
// only the keys in the window.
bool DecodeBlockHidden(const DecodeWork& w, int64_t b, int64_t hk, int64_t r0, int64_t block_rows, int64_t j0,
                       int64_t nc) {
  const Plan& p = *w.p;
  const int64_t Nq = p.dims.Nq;
  bool hidden = true;
  for (int64_t r = r0; r < r0 + block_rows && hidden; ++r) {
    const int64_t at = b * Nq + w.query_of(r);
    hidden = w.end[at] <= j0 || w.begin[at] >= j0 + nc;
  }
  if (hidden) return true;
  // The block's rows, cut where the query head changes: runs of consecutive queries.
  for (int64_t r = r0; r < r0 + block_rows;) {
    const int64_t i0 = w.query_of(r), run = std::min(r0 + block_rows - r, Nq - i0);
    if (!p.tile_masked_out(b, w.head_of(hk, r), i0, i0 + run, j0, j0 + nc)) return false;
    r += run;
  }
  return true;
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_WORK_INL_H_
