// The decode path's work item: one (batch, key/value head, key chunk), its row blocks
// against its key tiles, each block taking the fused step or the tile step as the call's
// DecodeStrategy says. Writes the item's partial (m, l, O); decode_merge-inl.h merges
// them. Included once per SIMD target.
//
// The tile step (scores of a tile, the shared per-row score treatment SoftmaxRow, O +=
// P·V) takes every shape; the fused step (decode_fused-inl.h) the few-row common case.
// With so little work per byte, K and V must be asked for ahead of use: the dot products
// ask for K's rows 16 keys ahead and the tile's V rows (or V is streamed by the product),
// the K·Qᵀ product asks for K's rows 8 keys ahead and the next block's V rows.
#if defined(ATTNLAB_ENGINE_DECODE_CHUNK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_CHUNK_INL_H_
#undef ATTNLAB_ENGINE_DECODE_CHUNK_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_CHUNK_INL_H_
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "engine/decode_fused-inl.h"
#include "engine/decode_scores-inl.h"
#include "engine/decode_target-inl.h"
#include "engine/decode_work-inl.h"
#include "engine/forward_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// One row block on one key tile by the tile step: S = scores, the online-softmax step, O += P·V.
// V's rows: in place (v_rows.data), or packed into sc.v (float, [nc × dv_pad]).
template <class E>
void DecodeTileStep(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t r0, int64_t block_rows,
                    int64_t j0, int64_t nc, int64_t ahead, InPlaceRows<E> k_rows, InPlaceRows<E> v_rows,
                    DecodeScratch& sc) {
  const Plan& p = *w.p;
  const DecodeStrategy& st = w.strategy;
  const auto& dm = p.dims;
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  const ConstView<E> kv = p.k.as<E>();
  float* s = sc.s.get();  // S [block_rows × width], row stride kBc
  // V's first row block: the strategy's fetch; later ones find V in cache.
  const VFetch fetch = v_rows.data == nullptr || r0 != 0 ? VFetch::kCached : st.v_fetch;
  if (st.scores == DecodeScores::dots) {
    // K's rows in place when they are whole vectors (converted in registers). V's rows are
    // asked for here for the product below, unless the product streams them itself.
    const PrefetchV pv = fetch == VFetch::kStream
                             ? PrefetchV{}
                             : PrefetchV{reinterpret_cast<const char*>(v_rows.data), v_rows.stride * sizeof(E),
                                         static_cast<size_t>(dm.dv) * sizeof(E)};
    const float* q = sc.q.get() + r0 * p.d_pad;
    if (k_rows.data != nullptr) {
      ScoresByDot(static_cast<size_t>(block_rows), static_cast<size_t>(nc), static_cast<size_t>(dm.d), q,
                  static_cast<size_t>(p.d_pad), k_rows.data, k_rows.stride, s, kBc, pv);
    } else {
      PackRows(kv, b, hk, j0, nc, dm.d, p.d_pad, sc.k.get());
      ScoresByDot(static_cast<size_t>(block_rows), static_cast<size_t>(nc), static_cast<size_t>(p.d_pad), q,
                  static_cast<size_t>(p.d_pad), sc.k.get(), static_cast<size_t>(p.d_pad), s, kBc, pv);
    }
  } else {
    // Sᵀ [nc × block_rows_pad] = K·Qᵀ, K's rows read in place (float32 with any strides; a 16-bit
    // K is converted into scratch first: this path is compute bound), then transposed.
    const int64_t block_rows_pad = round_up(block_rows, L);
    const float* k = sc.k.get();
    size_t k_rs = static_cast<size_t>(p.d_pad), k_ks = 1;
    size_t k_prefetchable = 0;  // K's rows the product asks for ahead (KeysTimesQueries)
    if constexpr (std::is_same_v<E, float>) {
      if (k_rows.data != nullptr) k = k_rows.data, k_rs = k_rows.stride;  // in place (a block table's rows)
      else k = kv.row(b, hk, j0), k_rs = static_cast<size_t>(kv.stride(Axis::seq)), k_ks = static_cast<size_t>(kv.stride(Axis::dim));
      // The first row block asks for them (from memory, in place); the others find them in L2.
      if (r0 == 0) k_prefetchable = static_cast<size_t>(ahead);
    } else if (k_rows.data != nullptr) {  // a block table's rows, in place or copied
      const int64_t rs = static_cast<int64_t>(k_rows.stride);
      PackRows(ConstView<E>(k_rows.data, Shape{1, 1, nc, dm.d}, Shape{nc * rs, nc * rs, rs, 1}), 0, 0, 0, nc, dm.d,
               p.d_pad, sc.k.get());
    } else {
      PackRows(kv, b, hk, j0, nc, dm.d, p.d_pad, sc.k.get());
    }
    KeysTimesQueries(static_cast<size_t>(nc), static_cast<size_t>(block_rows_pad), static_cast<size_t>(dm.d), k, k_rs,
                     k_ks, sc.q.get() + (r0 / kBr) * dm.d * kBr, sc.st.get(), k_prefetchable);
    TransposeScores(block_rows, nc, block_rows_pad, sc.st.get(), s);
  }
  // Every score of a row involves every K value of the tile, and a NaN or ±inf in K makes
  // the score NaN or ±inf whatever q holds (0·inf is NaN): one row's raw scores check them.
  if (w.kv_suspect != nullptr && !AllFinite(s, nc)) w.kv_suspect->store(true, std::memory_order_relaxed);
  // The per-row softmax step (the tile's padding columns [nc, width) are zero before MaskRow hides them).
  const int64_t row0 = item * w.rows;  // this item's first partial row
  const int64_t width = TileWidth(nc);
  for (int64_t r = 0; r < block_rows; ++r) {
    float* srow = s + r * kBc;
    for (int64_t j = nc; j < width; ++j) srow[j] = 0.0f;
    const int64_t row = r0 + r, h = w.head_of(hk, row), i = w.query_of(row);
    const int64_t at = row0 + row;
    SoftmaxRow(p, b, h, i, j0, nc, w.end[b * dm.Nq + i], w.scale[(b * dm.Hq + h) * dm.Nq + i], srow, w.m[at], w.l[at],
               w.nan_score[at], w.o + at * p.dv_pad, nullptr);
  }
  // O [block_rows × dv_pad] += P [block_rows × nc] · V [nc × dv_pad]
  float* o = w.o + (row0 + r0) * p.dv_pad;
  if (v_rows.data != nullptr) {
    ProbsTimesValues(static_cast<size_t>(block_rows), static_cast<size_t>(p.dv_pad), static_cast<size_t>(nc), s,
                     v_rows.data, v_rows.stride, o, fetch);
  } else {
    ProbsTimesValues(static_cast<size_t>(block_rows), static_cast<size_t>(p.dv_pad), static_cast<size_t>(nc), s,
                     sc.v.get(), static_cast<size_t>(p.dv_pad), o);
  }
}

// One row block on one key tile: the fused step where the strategy and the tile allow it,
// else the tile step (rows of codes never reach it: DecodeChunk decodes them to float first);
// sc.q holds the item's packed queries. Returns true if the block took the fused step.
template <class E>
bool DecodeBlock(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t r0, int64_t block_rows, int64_t j0,
                 int64_t nc, int64_t ahead, InPlaceRows<E> k_rows, InPlaceRows<E> v_rows, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const DecodeStrategy& st = w.strategy;
  if constexpr (fused_takes_element(std::is_same_v<E, float> || kIsCode<E>, DecodeTarget::avx512)) {
    if (st.fused && FusedTakesTile(w, b, j0, nc)) {
      if (k_rows.data != nullptr) {
        FusedDecodeRows(w, item, b, hk, j0, nc, ahead, k_rows, v_rows, sc);
        return true;
      }
      // A block table's tile across blocks: the fused step block by block, each block's
      // whole groups of 8 keys in place and a group across a block's end (blocks off the
      // 8-key grid) copied as stored: the same operations in the same order as over one
      // run. Its requests ahead reach the next blocks through the table (RowAhead).
      const KVBlocks& t = *p.kv_blocks;
      const int64_t T = t.block_keys;
      for (int64_t j = j0; j < j0 + nc;) {
        const int64_t n = (std::min(j0 + nc, (j / T + 1) * T) - j) / kFusedBlockKeys * kFusedBlockKeys;
        if (n == 0) {
          const InPlaceRows<E> k_group = CopyBlockRows(t, true, hk, j, kFusedBlockKeys,
                                                       t.k_row_bytes / static_cast<int64_t>(sizeof(E)),
                                                       reinterpret_cast<E*>(sc.k_group.get()));
          const InPlaceRows<E> v_group = CopyBlockRows(t, false, hk, j, kFusedBlockKeys,
                                                       t.v_row_bytes / static_cast<int64_t>(sizeof(E)),
                                                       reinterpret_cast<E*>(sc.v_group.get()));
          FusedDecodeRows(w, item, b, hk, j, kFusedBlockKeys, j0 + ahead - j, k_group, v_group, sc);
          j += kFusedBlockKeys;
          continue;
        }
        // The next block's first 8 K and V rows, asked for as this one starts: the CPU's
        // prefetchers do not cross into it (blocks of 16 positions 5 % faster, of 128 2 %).
        if (j + n < j0 + ahead) {
          const int64_t rows = std::min<int64_t>(kFusedBlockKeys, j0 + ahead - (j + n));
          const InPlaceRows<E> k_next = RowsInPlace<E>(p, true, true, b, hk, j + n, 1);
          const InPlaceRows<E> v_next = RowsInPlace<E>(p, true, false, b, hk, j + n, 1);
          PrefetchRows(k_next.data, k_next.stride, 0, rows, static_cast<size_t>(p.kv_blocks->k_row_bytes), false);
          PrefetchRows(v_next.data, v_next.stride, 0, rows, static_cast<size_t>(p.kv_blocks->v_row_bytes), false);
        }
        FusedDecodeRows(w, item, b, hk, j, n, j0 + ahead - j, RowsInPlace<E>(p, true, true, b, hk, j, n),
                        RowsInPlace<E>(p, true, false, b, hk, j, n), sc);
        j += n;
      }
      return true;
    }
  }
  if constexpr (kIsCode<E>) {
    HWY_ABORT("decode: a tile of codes for the tile step (DecodeChunk decodes it to float first)");
  } else {
    DecodeTileStep(w, item, b, hk, r0, block_rows, j0, nc, ahead, k_rows, v_rows, sc);
    return false;
  }
}

// Item `item` of the batch: key/value head kv = b·Hkv + hk, chunk c. Writes its partial;
// returns the (row block, key tile) pairs it computed and those of them fused.
// E: the element type of k and v (float, bfloat16, float16), or of a block table's rows: its codes
// (CodeByte), or DecodedTiles.
template <class E>
std::pair<int64_t, int64_t> DecodeChunk(const DecodeWork& w, int64_t item, int64_t kv, int64_t c, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const int64_t b = kv / dm.Hkv, hk = kv % dm.Hkv;
  const int64_t row0 = item * w.rows;
  std::fill(w.m + row0, w.m + row0 + w.rows, kNegInf);
  std::fill(w.l + row0, w.l + row0 + w.rows, 0.0f);
  std::fill(w.nan_score + row0, w.nan_score + row0 + w.rows, false);
  std::memset(w.o + row0 * p.dv_pad, 0, sizeof(float) * static_cast<size_t>(w.rows * p.dv_pad));
  // Keys past the last query's key_end are hidden from every row (key_end grows with i).
  const int64_t keys_end = std::min({dm.Nk, (c + 1) * w.chunk, w.end[b * dm.Nq + dm.Nq - 1]});
  if (c * w.chunk < keys_end) PackQueries(w, b, hk, sc);
  // The value check (options.check_finite) rides on the work: a NaN or ±inf in a tile's K
  // shows in the raw scores, one in its V in the O of the rows that used the tile (0·inf
  // is NaN too), checked below. Tiles that no row sees are not otherwise read: they are
  // scanned here. So K and V are read once, not once to check and once to use.
  const bool verify = w.kv_suspect != nullptr;
  const int64_t chunk_end = std::min(dm.Nk, (c + 1) * w.chunk);
  int64_t computed = 0, fused = 0;
  for (int64_t j0 = c * w.chunk; j0 < (verify ? chunk_end : keys_end); j0 += kBc) {
    const int64_t nc = std::min(kBc, dm.Nk - j0);  // a whole tile (masking hides what lies past keys_end)
    bool used = false;  // V's rows packed (when not read in place) only if some block needs them
    for (int64_t r0 = 0; r0 < w.rows && j0 < keys_end; r0 += kBr) {
      const int64_t block_rows = std::min(kBr, w.rows - r0);
      if (DecodeBlockHidden(w, b, hk, r0, block_rows, j0, nc)) continue;
      constexpr bool kDecoded = std::is_same_v<E, DecodedTiles>;
      if constexpr (kIsCode<E> || kDecoded) {
        if (kDecoded || !(w.strategy.fused && FusedTakesTile(w, b, j0, nc))) {
          // The tile's rows decoded to float once, for every row block (codes: a tile for the
          // tile step; a table whose tiles are decoded: every tile, for either step): the
          // values the cache's gather gives, so the float32 steps' bits.
          if (!used) {
            DecodeBlockRows(p, true, hk, j0, nc, sc.k.get(), static_cast<size_t>(p.d_pad));
            DecodeBlockRows(p, false, hk, j0, nc, sc.v.get(), static_cast<size_t>(p.dv_pad));
          }
          used = true;
          fused += DecodeBlock<float>(w, item, b, hk, r0, block_rows, j0, nc, keys_end - j0,
                                      {sc.k.get(), static_cast<size_t>(p.d_pad)},
                                      {sc.v.get(), static_cast<size_t>(p.dv_pad)}, sc);
          ++computed;
          continue;
        }
      }
      if constexpr (!kDecoded) {
        InPlaceRows<E> k_rows = RowsInPlace<E>(p, w.strategy.k_in_place, true, b, hk, j0, nc);
        InPlaceRows<E> v_rows = RowsInPlace<E>(p, w.strategy.v_in_place, false, b, hk, j0, nc);
        if (p.kv_blocks != nullptr && k_rows.data == nullptr && !(w.strategy.fused && FusedTakesTile(w, b, j0, nc))) {
          // A tile across blocks for the tile step: its rows copied once, for every row block.
          if (!used) {
            CopyBlockRows(*p.kv_blocks, true, hk, j0, nc, dm.d, reinterpret_cast<E*>(sc.k_copy.get()));
            CopyBlockRows(*p.kv_blocks, false, hk, j0, nc, dm.dv, reinterpret_cast<E*>(sc.v_copy.get()));
          }
          k_rows = {reinterpret_cast<const E*>(sc.k_copy.get()), static_cast<size_t>(dm.d)};
          v_rows = {reinterpret_cast<const E*>(sc.v_copy.get()), static_cast<size_t>(dm.dv)};
        }
        if (!used && v_rows.data == nullptr && p.kv_blocks == nullptr) PackRows(p.v, b, hk, j0, nc, dm.dv, p.dv_pad, sc.v.get());
        used = true;
        fused += DecodeBlock<E>(w, item, b, hk, r0, block_rows, j0, nc, keys_end - j0, k_rows, v_rows, sc);
        ++computed;
      }
    }
    if (verify && !used && !(RowsFinite(p.k, b, hk, j0, nc, dm.d) && RowsFinite(p.v, b, hk, j0, nc, dm.dv)))
      w.kv_suspect->store(true, std::memory_order_relaxed);
  }
  if (verify && !AllFinite(w.o + row0 * p.dv_pad, w.rows * p.dv_pad)) w.kv_suspect->store(true, std::memory_order_relaxed);
  return {computed, fused};
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_CHUNK_INL_H_
