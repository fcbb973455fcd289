// The decode path's tile step, its parts: the scores of a row block against a key tile
// (dot products along d, or Sᵀ = K·Qᵀ and a transpose) and O += P·V. The strategy
// (decode_strategy.hpp) says which. Included once per SIMD target.
//
// Scores without a packed Kᵀ. The tiled path packs Kᵀ (a transposing copy per key, repaid
// by the 64 rows of every query tile); here a key is used by M rows, often 1, so K's rows
// are read where they are:
//   up to 14 rows (or fewer than a vector's lanes): each score a dot product of two rows,
//     vectors along c, reduced across the lanes at the end (ScoresByDot): every lane
//     works. Its sum is ordered differently from the backward's recomputed S, so P at a
//     one-hot row is 1 ± ulp(S): the accuracy rule's (1 + max|L|) term covers it.
//   more rows: Sᵀ = K·Qᵀ through the microkernel (its A operand read with any strides, so
//     K in place; Qᵀ packed once per item), each score the same chain of FMAs as the tiled
//     path's, then transposed into rows.
// Either way S ends as rows for the shared score treatment (SoftmaxRow).
#if defined(ATTNLAB_ENGINE_DECODE_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_SCORES_INL_H_
#undef ATTNLAB_ENGINE_DECODE_SCORES_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_SCORES_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "engine/decode_target-inl.h"
#include "engine/decode_work-inl.h"
#include "engine/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// S [W × nc] (row stride kBc) from Sᵀ [nc × w_pad]: each row of S is a column of Sᵀ.
// Register transposes where the target has them (rows past W, zero in Sᵀ, land in the
// scratch's unused rows), else gathers of a vector of keys at a time.
void TransposeScores(int64_t W, int64_t nc, int64_t w_pad, const float* st, float* s) {
  int64_t j_done = 0;
  if constexpr (kTransposeSide > 0) {
    j_done = nc / kTransposeSide * kTransposeSide;
    for (int64_t j = 0; j < j_done; j += kTransposeSide)
      for (int64_t r = 0; r < w_pad; r += kTransposeSide)
        TransposeSquare(st + j * w_pad + r, static_cast<size_t>(w_pad), s + r * kBc + j, kBc);
  } else {
    const DF df;
    const int64_t L = static_cast<int64_t>(hn::Lanes(df));
    const hn::RebindToSigned<DF> di;
    const auto column = hn::Mul(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(w_pad)));
    j_done = nc / L * L;
    for (int64_t r = 0; r < W; ++r)
      for (int64_t j = 0; j < j_done; j += L)
        hn::StoreU(hn::GatherIndex(df, st + j * w_pad + r, column), df, s + r * kBc + j);
  }
  for (int64_t r = 0; r < W; ++r)
    for (int64_t j = j_done; j < nc; ++j) s[r * kBc + j] = st[j * w_pad + r];
}

// S[r · s_rs + j] = Σ_c q[r · d_pad + c] · k[j · k_rs + c] for r < R, j < KB, U
// accumulators per score over alternate vectors of c, each reduced across its lanes at
// the end; R·KB·U independent chains keep the FMA units busy. `cols` is d, or d_pad when
// q and k carry zero padding; a whole number of U vectors. K's elements are KE, converted
// in registers as they are loaded: a 16-bit cache is read at half the bytes.
template <int R, int KB, int U, class KE>
HWY_INLINE void DotBlock(size_t cols, const float* HWY_RESTRICT q, size_t q_rs, const KE* HWY_RESTRICT k,
                         size_t k_rs, float* HWY_RESTRICT s, size_t s_rs) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF acc[R][KB][U];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < KB; ++j)
      for (int u = 0; u < U; ++u) acc[r][j][u] = hn::Zero(df);
  for (size_t c = 0; c < cols; c += U * L) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      VF kv[KB];
#pragma GCC unroll 8
      for (int j = 0; j < KB; ++j) kv[j] = LoadAsFloat(k + j * k_rs + c + u * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        VF qv = hn::LoadU(df, q + r * q_rs + c + u * L);
        KeepInRegister(qv);
#pragma GCC unroll 8
        for (int j = 0; j < KB; ++j) acc[r][j][u] = hn::MulAdd(qv, kv[j], acc[r][j][u]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < KB; ++j) {
      VF sum = acc[r][j][0];
      for (int u = 1; u < U; ++u) sum = hn::Add(sum, acc[r][j][u]);
      s[r * s_rs + j] = hn::GetLane(hn::SumOfLanes(df, sum));
    }
}

// The V rows a block of dot products asks for, for the product after the scores: rows of
// `row_bytes` bytes, `stride` bytes apart (none when data is null).
struct PrefetchV {
  const char* data = nullptr;
  size_t stride = 0, row_bytes = 0;
};

// The K rows this many keys ahead are asked for as each group of keys starts.
inline constexpr size_t kPrefetchAhead = 16;

// The dot products of R rows, KB keys at a time, asking for K's rows ahead and the same
// keys' V rows. A single float32 row on a target whose requests go to L1 asks for each
// row's first line only (the hardware prefetchers bring the rest; each request queues
// behind the misses in flight); into L2 every line is asked for.
template <int R, int KB, int U, class KE>
HWY_INLINE void DotRows(size_t nc, size_t cols, const float* q, size_t q_rs, const KE* k, size_t k_rs, float* s,
                        size_t s_rs, PrefetchV v) {
  constexpr bool first_line = R == 1 && std::is_same_v<KE, float> && !DecodeTarget::avx512;
  size_t j = 0;
  for (; j + KB <= nc; j += KB) {
    if (j + kPrefetchAhead + KB <= nc) PrefetchRows(k, k_rs, j + kPrefetchAhead, KB, cols * sizeof(KE), first_line);
    if (v.data != nullptr) PrefetchRows(v.data, v.stride, j, KB, v.row_bytes, first_line);
    DotBlock<R, KB, U>(cols, q, q_rs, k + j * k_rs, k_rs, s + j, s_rs);
  }
  for (; j < nc; ++j) DotBlock<R, 1, U>(cols, q, q_rs, k + j * k_rs, k_rs, s + j, s_rs);
}

// The scores of rows [0, W) against nc keys: 5 to 7 rows in one pass with one key; else
// rows 8 at a time with one key, then 4 with 2 keys, then a pair with 4 keys; a last
// single row 4 keys at a time, two accumulators each (8 key pointers would not fit the
// general registers). A pass over more rows reads (and converts) each K vector once for
// more FMAs. Every score of the multi-row passes is one chain of FMAs over c.
template <class KE>
void ScoresByDot(size_t W, size_t nc, size_t cols, const float* q, size_t q_rs, const KE* k, size_t k_rs, float* s,
                 size_t s_rs, PrefetchV v) {
  const size_t L = hn::Lanes(DF());
  switch (W) {  // 5 to 7 rows in one pass
    case 5: return DotRows<5, 1, 1>(nc, cols, q, q_rs, k, k_rs, s, s_rs, v);
    case 6: return DotRows<6, 1, 1>(nc, cols, q, q_rs, k, k_rs, s, s_rs, v);
    case 7: return DotRows<7, 1, 1>(nc, cols, q, q_rs, k, k_rs, s, s_rs, v);
    default: break;
  }
  size_t r = 0;
  // The first group of rows asks for V; later ones find K in cache.
  for (; r + 8 <= W; r += 8, v = PrefetchV{})
    DotRows<8, 1, 1>(nc, cols, q + r * q_rs, q_rs, k, k_rs, s + r * s_rs, s_rs, v);
  for (; r + 4 <= W; r += 4, v = PrefetchV{})
    DotRows<4, 2, 1>(nc, cols, q + r * q_rs, q_rs, k, k_rs, s + r * s_rs, s_rs, v);
  for (; r + 2 <= W; r += 2, v = PrefetchV{})
    DotRows<2, 4, 1>(nc, cols, q + r * q_rs, q_rs, k, k_rs, s + r * s_rs, s_rs, v);
  if (r == W) return;
  if (cols % (2 * L) == 0) return DotRows<1, 4, 2>(nc, cols, q + r * q_rs, q_rs, k, k_rs, s + r * s_rs, s_rs, v);
  DotRows<1, 4, 1>(nc, cols, q + r * q_rs, q_rs, k, k_rs, s + r * s_rs, s_rs, v);
}

// Sᵀ [nc × w_pad] = K·Qᵀ: the microkernel, with 8 keys per block when the block's rows
// fill one vector (4 would leave chains waiting on the FMA latency), one block of keys at
// a time for all of Qᵀ's columns, so that each block asks for the K rows kKeysAheadOfSt
// keys ahead, every line, as it starts (K's rows of [0, k_prefetchable); 0: none). Each
// score is the same chain of FMAs in any block order.
inline constexpr size_t kKeysAheadOfSt = 8;

void KeysTimesQueries(size_t nc, size_t w_pad, size_t d, const float* k, size_t k_rs, size_t k_ks, const float* qt,
                      float* st, size_t k_prefetchable) {
  const size_t L = hn::Lanes(DF());
  const size_t keys = w_pad == L ? 8 : static_cast<size_t>(kBlockRows);
  for (size_t j = 0; j < nc; j += keys) {
    const size_t n = std::min(keys, nc - j);
    if (k_ks == 1 && j + kKeysAheadOfSt + n <= k_prefetchable)
      PrefetchRows(k, k_rs, j + kKeysAheadOfSt, n, d * sizeof(float), false);
    if (w_pad != L) {
      Gemm(n, w_pad, d, k + j * k_rs, k_rs, k_ks, qt, w_pad, st + j * w_pad, w_pad, false);
    } else if (n == 8) {
      GemmBlock<8, 1>(d, k + j * k_rs, k_rs, k_ks, qt, w_pad, st + j * w_pad, w_pad, false);
    } else {
      for (size_t i = j; i < j + n; ++i)
        GemmBlock<1, 1>(d, k + i * k_rs, k_rs, k_ks, qt, w_pad, st + i * w_pad, w_pad, false);
    }
  }
}

// O [W × dv_pad] += P [W × n] · V for the columns NV vectors at a time: one or two rows
// would leave the microkernel's blocks mostly empty, so wider blocks keep 8 chains going.
template <int R, int NV, class VE>
HWY_INLINE void ProbsTimesValuesByColumns(size_t nv, size_t n, const float* p, const VE* v, size_t v_rs, float* o,
                                          size_t o_rs) {
  const size_t L = hn::Lanes(DF());
  size_t c = 0;
  for (; c + NV <= nv; c += NV) GemmBlock<R, NV>(n, p, kBc, 1, v + c * L, v_rs, o + c * L, o_rs, true);
  for (; c < nv; ++c) GemmBlock<R, 1>(n, p, kBc, 1, v + c * L, v_rs, o + c * L, o_rs, true);
}

// Blocks of keys of O += P·V, and how far ahead kStream asks (VFetch, decode_strategy.hpp).
// 64 keys (a whole tile would be fetched in as many strided passes as column blocks; 64
// rows stay in L1 for all of them).
inline constexpr size_t kCachedKeys = 64, kStreamKeys = 8, kStreamAhead = 16, kNextBlockKeys = 16;

// O [W × dv_pad] += P [W × nc] · V [nc × dv_pad], V's rows brought in as `fetch` says.
// Whatever the blocking, each O column is the same chain of multiply-adds in key order.
template <class VE>
void ProbsTimesValues(size_t W, size_t dv_pad, size_t nc, const float* p, const VE* v, size_t v_rs, float* o,
                      VFetch fetch = VFetch::kCached) {
  const size_t L = hn::Lanes(DF()), nv = dv_pad / L;
  const size_t keys_per_block = fetch == VFetch::kStream      ? kStreamKeys
                                : fetch == VFetch::kNextBlock ? kNextBlockKeys
                                                              : kCachedKeys;
  for (size_t j = 0; j < nc; j += keys_per_block) {
    const size_t n = std::min(keys_per_block, nc - j);
    // V rows read in place are dv_pad elements long (dv is a multiple of kPad).
    if (fetch == VFetch::kStream && j + kStreamAhead < nc)
      PrefetchRows(v, v_rs, j + kStreamAhead, std::min(n, nc - j - kStreamAhead), dv_pad * sizeof(VE), false);
    if (W == 1) {
      ProbsTimesValuesByColumns<1, 8>(nv, n, p + j, v + j * v_rs, v_rs, o, dv_pad);
    } else if (W == 2) {
      ProbsTimesValuesByColumns<2, 4>(nv, n, p + j, v + j * v_rs, v_rs, o, dv_pad);
    } else if (fetch != VFetch::kNextBlock) {
      Gemm(W, dv_pad, n, p + j, kBc, 1, v + j * v_rs, v_rs, o, dv_pad, true);
    } else {
      // Gemm's own order (column chunks outer), a chunk per call, the next block's rows
      // asked for a share at a time before each.
      const size_t chunk = kBlockVecs * L, chunks = (dv_pad + chunk - 1) / chunk;
      const size_t next = j + n, next_n = std::min(keys_per_block, nc - next);
      const size_t share = (next_n + chunks - 1) / chunks;
      for (size_t c = 0, r = 0; c < dv_pad; c += chunk, r += share) {
        if (r < next_n) PrefetchRows(v, v_rs, next + r, std::min(share, next_n - r), dv_pad * sizeof(VE), false);
        Gemm(W, std::min(chunk, dv_pad - c), n, p + j, kBc, 1, v + j * v_rs + c, v_rs, o + c, dv_pad, true);
      }
    }
  }
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_SCORES_INL_H_
