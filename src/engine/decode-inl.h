// Per-target pieces of the decode path (decode_path.hpp says when it runs): the work of
// one split-KV item, (batch, key/value head, key chunk), and the ordered merge of the
// items' partial results. decode_kernels.cpp holds the parallel loops. Included once
// per SIMD target (hence the toggle guard).
//
// Rows. The M = group·Nq query rows that share key/value head hk are one problem:
// row r is query head hk·group + r / Nq, query r % Nq. They are taken kBr at a time
// (a row block); every row block of a key tile uses the tile while it is in L2, so K
// and V are read from memory once per key/value head whatever the group size.
//
// Scores without a packed Kᵀ. The tiled path computes S = Q·Kᵀ with Kᵀ packed (a
// transposing copy per key, repaid by the 64 query rows of every query tile of the
// head). Here a key is used by M rows, often 1, so the copy would cost more than the
// product; K's rows are read where they are, in one of two ways:
//   M < Lanes or M ≤ 14 (a decoding step, with or without grouped heads, or a few
//     speculative tokens of a small group): each score is a dot product of two rows,
//     vectors along c, reduced across the lanes at the end (ScoresByDot). Every lane
//     works; a decoding step does 2 FLOPs per byte, so this is what keeps the core's work
//     per key below the memory's time per key. Its sum is ordered differently from the
//     backward's recomputed S (one chain of FMAs over c), so P = exp(scale·S − L) there
//     is 1 ± ulp(S) rather than exactly 1 at a one-hot row: the accuracy rule's
//     (1 + max|L|) term covers it (test_engine_decode uses at most a fifth of the
//     tolerance on these shapes; the tiled path's own test uses 90 %).
//   more rows (grouped heads × a chunk of queries): Sᵀ = K·Qᵀ through the microkernel,
//     whose A operand is read one scalar at a time with any strides, so K is read in
//     place; Qᵀ [d × W] is packed once per item. Each score is then the same chain of
//     FMAs as the tiled path's and the backward's, bitwise. Sᵀ is transposed into rows
//     (gathers; W·nc moves per W·nc·(d + dv) multiply-adds).
// Either way S ends as rows for the shared per-row score treatment (SoftmaxRow:
// MaskRow's masks and scale, the online softmax).
//
// Grouped heads decoding (2 to 4 rows, to 8 on AVX-512) on whole tiles without a score
// treatment takes the fused step instead (FusedDecodeBlock), and so does one row on
// AVX-512: the keys 8 at a time through scores, online softmax and O += P·V, with the K
// and V lines 8 keys ahead (16 on AVX-512) asked for a few at a time inside the product,
// so that the memory is kept busy while the core computes; or, on AVX-512 when K and V fit
// the last-level cache, beside each load (FusedRequestsBesideLoads); or, on AVX-512 from
// memory (any number of rows, at d = 64 and 128), K and V read row after row with next to
// nothing asked for, so that the CPU's prefetchers run ahead (FusedScoresInRowOrder,
// FusedRowOrderVectors, kFusedAsksNextBlock; from 6 rows the queries held in registers).
//
// Memory. With so little work per byte the caches must be filled ahead of use (on
// AVX-512 the requests fill L2, on AVX2 L1: kPrefetchIntoL2): while
// the scores of a tile are computed, the K rows 16 keys ahead and the tile's V rows are
// prefetched (PrefetchRows), so that K and V stream from memory side by side and the
// PV product finds V in cache. O += P·V takes the keys 64 at a time for all its column
// blocks, so that a V row is fetched once, not once per block of columns. On the Sᵀ path
// the product asks for K's rows 8 keys ahead as it goes (KeysTimesQueries), and O += P·V
// takes the keys 16 at a time, asking for the next 16 V rows (VFetch::kNextBlock).
//
// Values in place: O += P·V reads V's rows from the caller's memory when they are
// unit-stride and a whole number of vectors long (RowsOperand), else copies the tile's
// rows once into L2-resident scratch for all row blocks.
//
// Split-KV. Each item runs the online softmax over its own chunk of keys (m, l and an
// unnormalised O per row: its partial). MergeRow combines a row's partials in chunk
// order, m = max m_c, l = Σ e^{m_c − m} l_c, O = Σ e^{m_c − m} O_c, then O/l and
// L = m + log l as the tiled path finishes a row (FinishRow). The chunks are fixed by
// the shapes (decode_chunk_keys), so every row's sums are the same sequence of float
// operations for any number of threads: bitwise identical results, as in the tiled path.
#if defined(ATTNLAB_ENGINE_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_INL_H_
#undef ATTNLAB_ENGINE_DECODE_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_INL_H_
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "engine/decode_path.hpp"
#include "engine/exp-inl.h"
#include "engine/forward_tile-inl.h"
#include "engine/gemm-inl.h"
#include "engine/tile_ops-inl.h"

// The x86 AVX-512 targets (AVX3, AVX3_DL and any later ones): where the decode kernels
// use 512-bit intrinsics (LaneSums16, Transpose16x16) and ask for lines into L2
// (kPrefetchIntoL2). Redefined for each target this file is compiled for.
#undef ATTNLAB_DECODE_AVX512
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define ATTNLAB_DECODE_AVX512 1
#else
#define ATTNLAB_DECODE_AVX512 0
#endif

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// What every item of one call reads (the Plan, per-row values computed once) and the
// partials of the current batch of key/value heads, which items write and MergeRow reads.
struct DecodeWork {
  const Plan* p = nullptr;
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
  // The item's queries, packed once: Q rows [M × d_pad] (ScoresAsDots: the dot products),
  // else per row block of kBr rows, Qᵀ [d × W_pad] at block · d · kBr.
  ScratchBuffer<float> q;
  ScratchBuffer<float> st;  // Sᵀ = K·Qᵀ of a key tile [Bc × W_pad]
  ScratchBuffer<float> s;   // S, then P, of the row block [Br × Bc]
  ScratchBuffer<float> k;   // the tile's K rows [Bc × d_pad], when the dot products cannot read them in place
  ScratchBuffer<float> v;   // the tile's V rows [Bc × dv_pad], when not read in place
  explicit DecodeScratch(const Plan& p)
      : q(Scratch(p.d_pad * round_up(p.dims.group() * p.dims.Nq, kBr))), st(Scratch(kBc * kBr)), s(Scratch(kBr * kBc)),
        k(Scratch(kBc * p.d_pad)), v(Scratch(kBc * p.dv_pad)) {}
};

// Whether the M rows of a key/value head take their scores as dot products along d
// (ScoresByDot: 5 to 7 rows in one pass, else rows 8, then 4 at a time, the first group
// reading the tile's K from memory, the others from cache) or as Sᵀ = K·Qᵀ through the
// microkernel and a transposition: fewer rows than a vector's lanes, and up to 14 rows (8
// grouped query heads decoding, as Llama 3 70B's 64/8; a group of 4 with 2 or 3
// speculative tokens, of 5 to 7 with 2), where Sᵀ fills one or two AVX2 vectors of rows,
// the second partly. Measured on Zen 3 (AVX2, 2 threads, the calls of two builds
// interleaved in one process), d = 128, the dots against Sᵀ, float32 K / bfloat16 K: 8
// rows +38-45 % / +14-19 % (Nk = 32768), and at Nk = 16384 (2026-11-24): 9 rows +64 % /
// +26 %, 10 +44 / +23, 12 +37 / +12, 13 +39 / +7, 14 +24-27 / +3.5-3.8, 15 +22 / -3, 16
// +16 / -5, 24 +14 / -7, 32 +2.5 / -14. At d = 64, 12 and 14 rows were within ±6 % either
// way; at d = 256, 10 rows +8 % / +21 %. Up to 14 rows both types gain; beyond, float32
// alone would (to 24 rows), and one rule for every element type keeps a 16-bit cache's
// results bitwise the float32 engine's on the converted values (test_engine_precision; the
// fused step, float32 only, aside: see fused_decode_allowed). With ScoresByDot's groups of
// 8 rows, 15 to 24 rows at d = 128 gained +19 to +35 % / -1.4 to +9 %, but at d = 64 and
// 256, 16 rows ±0 / -6 % and ±0 / -1.5 %: the line stays at 14. On AVX-512 (16 lanes)
// it falls at 15 rows. Measured on Zen 4 (with the requests into L2, Nk = 16384, one
// interleaved run each, float32 / bfloat16), the dots against Sᵀ: 9 rows +24 % / +31 %, 12
// +11 % / +15 %, 14 −2 % / +8 %, 15 +4 % / −3 %; Sᵀ against the dots: 16 rows ±0 / +4 %, 24
// +5 % / −3 %, 32 +13 % / +8 %. The line stands.
bool ScoresAsDots(int64_t rows) { return rows < static_cast<int64_t>(hn::Lanes(DF())) || rows <= 14; }

// Packs the queries of key/value head (b, hk) into sc.q, laid out as DecodeScratch says.
void PackQueries(const DecodeWork& w, int64_t b, int64_t hk, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const int64_t d = p.dims.d, L = static_cast<int64_t>(hn::Lanes(DF()));
  if (ScoresAsDots(w.rows)) {
    for (int64_t r = 0; r < w.rows; ++r)
      PackRows(p.q, b, w.head_of(hk, r), w.query_of(r), 1, d, p.d_pad, sc.q.get() + r * p.d_pad);
    return;
  }
  WithElementType(p.q, [&](auto qv) {
    const int64_t q_ks = qv.stride(kDim);
    for (int64_t r0 = 0; r0 < w.rows; r0 += kBr) {
      const int64_t W = std::min(kBr, w.rows - r0), w_pad = round_up(W, L);
      float* qt = sc.q.get() + (r0 / kBr) * d * kBr;
      for (int64_t r = 0; r < W; ++r) {
        const auto* q = qv.row(b, w.head_of(hk, r0 + r), w.query_of(r0 + r));
        for (int64_t c = 0; c < d; ++c) qt[c * w_pad + r] = ToFloat(q[c * q_ks]);
      }
      for (int64_t c = 0; c < d; ++c)
        for (int64_t r = W; r < w_pad; ++r) qt[c * w_pad + r] = 0.0f;
    }
  });
}

#if HWY_TARGET == HWY_AVX2
// The 8 × 8 block at x (row stride x_rs) transposed into y (row stride y_rs): unpacks
// within 128-bit halves, then 64-bit unpacks, then the halves exchanged (24 shuffles
// for 64 floats, where gathers take a load per float).
HWY_INLINE void Transpose8x8(const float* HWY_RESTRICT x, size_t x_rs, float* HWY_RESTRICT y, size_t y_rs) {
  const DF df;
  const hn::Repartition<double, DF> dd;
  VF r[8];
  for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(df, x + i * x_rs);
  VF t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = hn::InterleaveLower(df, r[2 * i], r[2 * i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[2 * i + 1] = hn::InterleaveUpper(df, r[2 * i], r[2 * i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  VF u[8];  // u[4h + c]: rows 4h…4h+3 of columns c and c + 4
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 2; ++c) {
      const auto lo = hn::BitCast(dd, t[4 * h + c]), hi = hn::BitCast(dd, t[4 * h + 2 + c]);
      u[4 * h + 2 * c] = hn::BitCast(df, hn::InterleaveLower(dd, lo, hi));
      u[4 * h + 2 * c + 1] = hn::BitCast(df, hn::InterleaveUpper(dd, lo, hi));
    }
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(df, u[4 + c], u[c]), df, y + c * y_rs);
    hn::StoreU(hn::ConcatUpperUpper(df, u[4 + c], u[c]), df, y + (c + 4) * y_rs);
  }
}
#endif

#if ATTNLAB_DECODE_AVX512
// The 16 × 16 block at x (row stride x_rs) transposed into y (row stride y_rs), as
// Transpose8x8 one level deeper: 32-bit unpacks of row pairs, 64-bit unpacks, then two
// rounds of 128-bit block shuffles (64 shuffles for 256 floats, where gathers take a
// load per float). After the unpacks u[4g + c] holds, in its block k, rows 4g…4g+3 of
// column 4k + c; the block shuffles gather each column's four blocks in row order.
HWY_INLINE void Transpose16x16(const float* HWY_RESTRICT x, size_t x_rs, float* HWY_RESTRICT y, size_t y_rs) {
  __m512 r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(x + i * x_rs);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // per block: a0 b0 a1 b1
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // a2 b2 a3 b3
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d ablo = _mm512_castps_pd(t[4 * g]), abhi = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d cdlo = _mm512_castps_pd(t[4 * g + 2]), cdhi = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(ablo, cdlo));      // a0 b0 c0 d0
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(ablo, cdlo));  // a1 b1 c1 d1
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(abhi, cdhi));  // a2 b2 c2 d2
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(abhi, cdhi));  // a3 b3 c3 d3
  }
  // t[c], t[4 + c]: rows 0–7 of columns c, 8 + c and 4 + c, 12 + c; t[8 + c], t[12 + c]: rows 8–15.
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    _mm512_storeu_ps(y + c * y_rs, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
    _mm512_storeu_ps(y + (8 + c) * y_rs, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD));
    _mm512_storeu_ps(y + (4 + c) * y_rs, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88));
    _mm512_storeu_ps(y + (12 + c) * y_rs, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD));
  }
}
#endif

// S [W × nc] (row stride kBc) from Sᵀ [nc × w_pad]: each row of S is a column of Sᵀ.
// Register transposes, 8 × 8 on AVX2 and 16 × 16 on AVX-512 (rows past W, zero in Sᵀ,
// land in the scratch's unused rows), elsewhere gathers of a vector of keys at a time.
// On Zen 4 the gathers were 8 % of a chunked prefill's samples (32/8 heads × 16 queries,
// Nk = 8192); the 16 × 16 transposes made it 7.8 % faster (two interleaved runs, 2
// threads), 16 to 32 rows per K/V head +4.5 to +4.9 %, bfloat16 16 rows +4.7 %, d = 64
// +11 %: the same floats moved, so the same results (max |ΔO| = 0).
void TransposeScores(int64_t W, int64_t nc, int64_t w_pad, const float* st, float* s) {
#if HWY_TARGET == HWY_AVX2 || ATTNLAB_DECODE_AVX512
  constexpr int64_t kSide = HWY_TARGET == HWY_AVX2 ? 8 : 16;
  const int64_t j_done = nc / kSide * kSide;
  for (int64_t j = 0; j < j_done; j += kSide)
    for (int64_t r = 0; r < w_pad; r += kSide) {
#if HWY_TARGET == HWY_AVX2
      Transpose8x8(st + j * w_pad + r, static_cast<size_t>(w_pad), s + r * kBc + j, kBc);
#else
      Transpose16x16(st + j * w_pad + r, static_cast<size_t>(w_pad), s + r * kBc + j, kBc);
#endif
    }
#else
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const hn::RebindToSigned<DF> di;
  const auto column = hn::Mul(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(w_pad)));
  const int64_t j_done = nc / L * L;
  for (int64_t r = 0; r < W; ++r)
    for (int64_t j = 0; j < j_done; j += L)
      hn::StoreU(hn::GatherIndex(df, st + j * w_pad + r, column), df, s + r * kBc + j);
#endif
  for (int64_t r = 0; r < W; ++r)
    for (int64_t j = j_done; j < nc; ++j) s[r * kBc + j] = st[j * w_pad + r];
}

// S[r · s_rs + j] = Σ_c q[r · d_pad + c] · k[j · k_rs + c] for r < R, j < KB: the scores
// of R < Lanes rows as dot products along c (vectors of c), each reduced across its
// lanes at the end. For so few rows Sᵀ = K·Qᵀ would fill R of a vector's lanes and
// wait on the FMA latency; here every lane works, and R·KB·U independent accumulators
// (U per score, over alternate vectors of c: 8 in all) keep the FMA units busy.
// `cols` is d, or d_pad when q and k carry zero padding; a whole number of U vectors.
// An empty asm that says it reads and writes v in a vector register: the compiler then
// loads v once rather than folding a load into each instruction that uses it (GCC did,
// for a q vector used by two keys: 10 loads per 8 FMAs, load-bound). x86 vector targets only.
HWY_INLINE void KeepInRegister(VF& v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

// K's elements are KE (float, bfloat16, float16), converted to float in registers as they
// are loaded: a 16-bit cache is read at half the bytes.
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

// Where a decode prefetch puts its line. On AVX-512 targets into L2 (prefetcht1), not L1:
// a prefetcht0 that misses holds one of the core's few L1 miss buffers for the whole
// trip to memory, and with the grouped heads' requests 8 keys ahead those buffers were
// full (perf: the instructions after the prefetches took 40 % of the samples): in minutes
// when a plain read got 52-60 GB/s on two cores, the fused step got 25-29. An L2 request
// waits in L2's larger queue, and the loads then find the line in L2. Measured on AMD
// Zen 4 (whose prefetcht1 fills L2; on Zen 3 it fills L1 as prefetcht0 does), 2 threads,
// interleaved builds, bitwise the same results: the fused step (its requests 16 keys ahead)
// 32/8 heads +9 to +15 %, 64/8 heads (8 rows) +25 %, 128/8 (Sᵀ) +24 %, bfloat16 32/8
// +16 %, a chunked prefill +10 %, and one query row +12 % (every line asked for, below):
// docs/engine.md, "Prefetching into L2". AVX2 keeps prefetcht0, as tuned on Zen 3.
inline constexpr bool kPrefetchIntoL2 = ATTNLAB_DECODE_AVX512;

HWY_INLINE void PrefetchLine(const char* line) {
  if constexpr (kPrefetchIntoL2) __builtin_prefetch(line, 0, 2);  // prefetcht1
  else hwy::Prefetch(line);                                       // prefetcht0
}

// Asks for rows [j, j + n) of x (row stride x_rs elements, `bytes` each) to be brought
// into the caches: every 64-byte line of each row, or with `first_line` only its first
// (see DotRows). Decoding streams K and V from memory with little work per byte:
// without it, the V rows a tile needs are only fetched when its PV product asks for
// them, after the scores, and the memory stays idle while the scores are computed.
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

// The V rows a decode block prefetches for its product: rows of `row_bytes` bytes,
// `stride` bytes apart (none when data is null).
struct PrefetchV {
  const char* data = nullptr;
  size_t stride = 0, row_bytes = 0;
};

// Prefetch: the rows of K kPrefetchAhead keys ahead, and those of `v` (the V rows of the
// same keys, for the product after the scores).
inline constexpr size_t kPrefetchAhead = 16;

// With a single query row (R = 1: a decoding step without grouped heads) only the first
// line of each K and V row is asked for, and the hardware's prefetchers bring the rest:
// the prefetch instructions were half of that row's loads (one per 64 bytes against two
// FMAs of K), and they queue behind the misses in flight. Measured on AMD Zen 3 (AVX2),
// d = 128: 24.5–29.0 → 19.1–21.6 ns per key with K and V in L2 (BM_DecodeChunk/1/1/1/128,
// several runs), and on 8/8 heads, Nq = 1, Nk = 32768, 25.4 → 28.7 GB/s at 2 threads and
// 14.2 → 15.5 at 1 (five and three interleaved rounds, faster in every one). With 2 and 4
// rows per key the same made decoding slower (4 rows: 23 → 15 GB/s), and so it did for a
// 16-bit cache (rows of 256 bytes at d = 128; bf16 5.1 → 6.2 ms on the shape above): there
// every line is asked for. So is every line of a single row when the prefetches go to L2
// (kPrefetchIntoL2): they no longer queue for L1's miss buffers, and on Zen 4 asking for
// every line made 8/8 heads +12 % faster than the first line alone (interleaved, 2 threads).
template <int R, int KB, int U, class KE>
HWY_INLINE void DotRows(size_t nc, size_t cols, const float* q, size_t q_rs, const KE* k, size_t k_rs, float* s,
                        size_t s_rs, PrefetchV v) {
  constexpr bool first_line = R == 1 && std::is_same_v<KE, float> && !kPrefetchIntoL2;
  size_t j = 0;
  for (; j + KB <= nc; j += KB) {
    if (j + kPrefetchAhead + KB <= nc) PrefetchRows(k, k_rs, j + kPrefetchAhead, KB, cols * sizeof(KE), first_line);
    if (v.data != nullptr) PrefetchRows(v.data, v.stride, j, KB, v.row_bytes, first_line);
    DotBlock<R, KB, U>(cols, q, q_rs, k + j * k_rs, k_rs, s + j, s_rs);
  }
  for (; j < nc; ++j) DotBlock<R, 1, U>(cols, q, q_rs, k + j * k_rs, k_rs, s + j, s_rs);
}

// The scores of rows [0, W) (ScoresAsDots) against nc keys (DotBlock): 5 to 7 rows in
// one pass with one key; else rows 8 at a time with one key, then 4 with 2 keys, then a
// pair with 4 keys; a last single row 4 keys at a time, two accumulators each (8 in all:
// 8 key pointers would not fit the general registers beside the loop's). Eight rows per
// pass read (and, for a 16-bit cache, convert) each K vector once for 8 FMAs where two
// passes of 4 rows read it twice: measured on Zen 3 (2 threads, d = 128, interleaved,
// float32 / bfloat16), 8 rows (64/8 heads) +11 % / +5 %, 9 rows +13 % / +4 %, 12 rows
// (32/8 × 3 queries) +7 % / +2 %; at d = 64 and 256, 8 rows +6 % / +9 % and +6 % / +13 %.
// The same for 5 to 7 rows (one pass, not 4 + 1, 4 + 2, 4 + 2 + 1; 2026-11-24, Nk =
// 16384): 40/8 heads +7.5 % / +3.6 %, 48/8 +5 to +11 % / +2 to +4 %, 56/8 +13 to +15 % /
// +7.5 %, Qwen2's 12/2 and 28/4 +3 to +12 % / +1 % and +10 to +14 % / +5 to +8 %, 16/8 × 3
// queries +7 % / +1 %; d = 64 (5 and 6 rows) ±2 % / +2 to +5 %, d = 256 (7 rows) +11 % /
// +8 to +11 %. After a group of 8 (13, 14 rows) the rest stays 4 + 1, 4 + 2: one pass
// there was −1 to −3 % / ±1 %. Every score of the multi-row passes is one chain of FMAs
// over c and one lane reduction (the lone last row of 5 or 7 took two chains before,
// U = 2: its scores now round as the other rows' do).
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
  // The first group of rows prefetches V; later ones find K in cache.
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

// Sᵀ [nc × w_pad] = K·Qᵀ (see the top): the microkernel, with 8 keys per block when the
// block's rows fill one vector (the default 4 would leave 4 chains waiting on the
// FMA latency), one block of keys at a time for all of Qᵀ's columns, so that each block
// asks for the K rows kKeysAheadOfSt keys ahead, every line, as it starts: K's rows of
// [0, k_prefetchable) are read in place from memory (0: none asked for). The hardware's
// prefetchers alone left the product waiting on K's misses: measured on Zen 3 (2 threads,
// d = 128, interleaved, 8 K/V heads at Nq = 1), 16 rows from L3 129 GFLOP/s, from memory
// 70. With the prefetches (and V's, VFetch::kNextBlock) 16 rows (128/8 heads, Nk = 32768)
// +48 %, 24 rows +35 %, 32 rows +26 %, 64 rows +11 %; 32/8 heads × 4 queries at Nk =
// 16384 +35 %, 16/1 heads at 32768 +48 %, chunked prefill (32/8 × 16 queries,
// bottom-right) +10 %; d = 64 +7 %, d = 256 +5 % (docs/engine.md, "Sixteen rows and
// more waited on K"). K's rows 4, 12 or 16 keys ahead instead of 8: −7, −7 and −5.5 %;
// V's rows asked for here too (the tile's, for the product after the softmax): −4 %.
// Each score is the same chain of FMAs in any block order: the results do not change.
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

// O [W × dv_pad] += P [W × nc] · V [nc × dv_pad], keys 64 at a time: the microkernel
// makes a pass over the keys for each block of columns, and a pass over a whole tile
// would fetch each V row's cache lines from memory in as many strided passes; 64 rows
// (32 KB at dv = 128) stay in L1 for all of them. One or two rows would leave the
// microkernel's 4 × 2 (or 6 × 4) blocks mostly empty and waiting on the FMA latency:
// wider blocks (8 vectors of columns for a row, 4 for two) keep 8 chains going.
// V's elements are VE (float, bfloat16, float16), converted in registers (GemmBlock).
template <int R, int NV, class VE>
HWY_INLINE void ValuesColumns(size_t nv, size_t n, const float* p, const VE* v, size_t v_rs, float* o,
                              size_t o_rs) {
  const size_t L = hn::Lanes(DF());
  size_t c = 0;
  for (; c + NV <= nv; c += NV) GemmBlock<R, NV>(n, p, kBc, 1, v + c * L, v_rs, o + c * L, o_rs, true);
  for (; c < nv; ++c) GemmBlock<R, 1>(n, p, kBc, 1, v + c * L, v_rs, o + c * L, o_rs, true);
}

// How O += P·V brings V's rows in (ProbsTimesValues).
enum class VFetch {
  // Keys 64 at a time, V left to the caches and the hardware's prefetchers: V packed in
  // scratch, a single query row (its scores ask for V's rows, see DotRows), or the Sᵀ
  // path's later row blocks (the first brought V's rows into L2).
  kCached,
  // Keys kStreamKeys at a time, each block asking for the V rows kStreamAhead keys ahead,
  // every line, as it starts (grouped heads decoding off the fused step: 16-bit caches,
  // score treatments, partial tiles). The prefetches then go out at the rate the product
  // reads, while it computes, instead of in a burst during the scores (each score asking
  // for the K and V rows of its keys) and none during the product. Measured on Zen 3
  // (attnlab bench, 2 threads, old and new library in alternate runs): 32/8 heads, Nq = 1,
  // Nk = 32768 13.48 → 11.83 ms; B = 4, Nk = 4096 7.05 → 6.16 ms. Blocks of 8 keys cost
  // the product a load and store of O per 8 keys (in L1); with one query row the old way
  // is faster (its V prefetch asks for one line per row, see DotRows) and it is kept.
  kStream,
  // Keys kNextBlockKeys at a time, the next block's V rows asked for, every line, spread
  // over the block's column chunks (the Sᵀ path: 15 rows or more, so more work per key
  // between the requests). Measured with K's prefetches (KeysTimesQueries), interleaved,
  // d = 128: 64 keys per block +4 % at 16 rows (128/8 heads, Nk = 8192); 32 keys against
  // 64: 16 rows +7 to +10 %, 32 rows +11 %, 64 rows (chunked prefill) +8 %, d = 256 +1 %;
  // 16 against 32: 16 rows +6.6 to +7 % (three shapes), 24 rows +3 %, 32 rows −3 to 0 %,
  // 64 rows +1.4 %, d = 64 and 256 +1 %. (A block's 64 V rows fill Zen 3's 32 KB L1: the
  // next block's, asked for into L1, pushed out the current block's.)
  kNextBlock,
};
inline constexpr size_t kStreamKeys = 8, kStreamAhead = 16, kNextBlockKeys = 16;

// O [W × dv_pad] += P [W × nc] · V [nc × dv_pad], V's rows brought in as `fetch` says.
// Whatever the blocking, each O column is the same chain of multiply-adds in key order:
// the results do not change.
template <class VE>
void ProbsTimesValues(size_t W, size_t dv_pad, size_t nc, const float* p, const VE* v, size_t v_rs, float* o,
                      VFetch fetch = VFetch::kCached) {
  const size_t L = hn::Lanes(DF()), nv = dv_pad / L;
  const size_t keys_per_block = fetch == VFetch::kStream      ? kStreamKeys
                                : fetch == VFetch::kNextBlock ? kNextBlockKeys
                                                              : 64;
  for (size_t j = 0; j < nc; j += keys_per_block) {
    const size_t n = std::min(keys_per_block, nc - j);
    // V rows read in place are dv_pad elements long (RowsInPlace: dv is a multiple of kPad).
    if (fetch == VFetch::kStream && j + kStreamAhead < nc)
      PrefetchRows(v, v_rs, j + kStreamAhead, std::min(n, nc - j - kStreamAhead), dv_pad * sizeof(VE), false);
    if (W == 1) {
      ValuesColumns<1, 8>(nv, n, p + j, v + j * v_rs, v_rs, o, dv_pad);
    } else if (W == 2) {
      ValuesColumns<2, 4>(nv, n, p + j, v + j * v_rs, v_rs, o, dv_pad);
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
  const int64_t st = x.stride(kDim);
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

// True if no row of block [r0, r0 + W) may see any key of tile [j0, j0 + nc): by
// causality and padding (key_end), a window or a packed sequence (key_begin), or
// because the boolean mask hides them all. So a sliding window of a long cache reads
// only the keys in the window.
bool DecodeBlockHidden(const DecodeWork& w, int64_t b, int64_t hk, int64_t r0, int64_t W, int64_t j0, int64_t nc) {
  const Plan& p = *w.p;
  const int64_t Nq = p.dims.Nq;
  bool hidden = true;
  for (int64_t r = r0; r < r0 + W && hidden; ++r) {
    const int64_t at = b * Nq + w.query_of(r);
    hidden = w.end[at] <= j0 || w.begin[at] >= j0 + nc;
  }
  if (hidden) return true;
  // The block's rows, cut where the query head changes: runs of consecutive queries.
  for (int64_t r = r0; r < r0 + W;) {
    const int64_t i0 = w.query_of(r), run = std::min(r0 + W - r, Nq - i0);
    if (!p.tile_masked_out(b, w.head_of(hk, r), i0, i0 + run, j0, j0 + nc)) return false;
    r += run;
  }
  return true;
}

// Rows of x (K or V) read in place by the decode kernels: the view when its rows are
// unit-stride and `cols` is a whole number of `multiple` (the dot products load whole
// vectors of K's d values; O += P·V loads dv_pad values of each V row, so dv must be a
// multiple of kPad), of its own element type. Null otherwise: the rows are then packed
// into float scratch.
template <class E>
struct InPlaceRows {
  const E* data = nullptr;
  size_t stride = 0;  // elements between rows
};
template <class E>
InPlaceRows<E> RowsInPlace(ConstView<E> x, int64_t b, int64_t h, int64_t j0, int64_t cols, int64_t multiple) {
  if (x.stride(kDim) != 1 || cols % multiple != 0) return {};
  return {x.row(b, h, j0), static_cast<size_t>(x.stride(kSeq))};
}

// True when O += P·V streams V itself (ProbsTimesValues): several rows of a decoding
// step (grouped heads) with V read in place.
template <class VE>
bool StreamV(const DecodeWork& w, InPlaceRows<VE> v_rows) {
  return ScoresAsDots(w.rows) && w.rows >= 2 && v_rows.data != nullptr;
}

// ---- The fused decoding step of grouped heads ----
//
// With 2 to 4 rows per key (grouped heads decoding; to 8 on AVX-512, kFusedMaxRows) a key
// costs 2·rows·(d + dv) FLOPs of work in L1 for its (d + dv)·4 bytes from memory: at
// d = 128 and 4 rows about 64 FMA cycles of a core against about 180 of its share of the
// bandwidth. The tile-at-a-time step (scores of 256 keys, the softmax, O += P·V) hides
// that work under the memory only in part: its prefetches come in bursts (a tile's V rows
// during its scores, then none during the product), and a burst fills the core's miss
// buffers, so the prefetch instructions wait, and while the product computes nothing is
// asked of the memory.
// The fused step takes the keys kFusedKeys at a time through all three stages (the online
// softmax per block of keys, O rescaled only when a row's max moves) and asks for the K
// and V lines kFusedAhead keys ahead a row or two at a time, as each column block of the
// product starts: requests go out at the rate the kernel consumes, so the memory is never
// idle and the miss buffers never overflow. Its scores are reduced across lanes eight keys
// at a time (on AVX2 by a tree of horizontal adds into one vector of the eight scores, on
// AVX-512 by a tree of shuffles into one vector of two rows' sixteen). Measured on AMD
// Zen 3 (2 threads, float32, d = 128, interleaved with the tile-at-a-time step): see
// docs/engine.md, "The fused grouped-heads step"; on AVX-512 (Zen 4), "The fused step on
// AVX-512".
//
// It takes the common case only: K and V read in place, every row seeing every key of
// the tile (no mask, window edge or cache end inside it), and no treatment between the
// scale and the softmax (softcap, ALiBi, score_mod, mask_mod, an additive or boolean
// mask). Everything else goes through the tile-at-a-time step and SoftmaxRow. Sinks are
// merged after the chunks (MergeRow) and do not concern it. A 16-bit cache (bfloat16,
// float16) takes it on AVX-512, converted in registers as it is loaded (kFused16BitCaches).
// Requests into L2 (kPrefetchIntoL2) go 16 keys ahead: on Zen 4, 8 keys ahead gained only
// at d ≥ 128 (d = 64 −10 %), 16 gained at every d (d = 64 +7 to +11 %, d = 256 +22 to
// +31 %), 12, 20, 24 and 32 no more than 16 at d = 128.
inline constexpr size_t kFusedKeys = 8, kFusedAhead = kPrefetchIntoL2 ? 16 : 8;

// Whether a 16-bit cache takes the fused step where a float32 one does: on AVX-512, so its
// results are the float32 engine's on the converted inputs bit for bit there (the fused
// step's softmax per 8 keys rounds differently from the tiles' per 256), but for the
// bfloat16 scores on the CPU's dot products (Bf16DotsApply). Measured on Zen 4
// against the tile-at-a-time step (2 threads, d = 128 unless said, builds interleaved,
// 15-21 rounds): bfloat16 from memory 1 row +3.7 %, 2 rows +8 %, 3 rows +9 %, 4 rows +1 %,
// 5 +16 %, 6 +10 %, 7 +7.6 %, 8 +4 %, B = 4 +5 %, d = 64 +8.5 %, d = 256 +25 %, in L3
// (Nk = 2048) +15 %; float16 1 row +12 %, 2 rows +15 to +17 %, 4 rows +2 %, 7 rows +4 %,
// 8 rows +1 % (docs/engine.md, "Bitwise equal to the float32 engine"). AVX2 keeps the
// tile-at-a-time step for them: on Zen 3 the fused step of that day was 20-24 % slower
// with a 16-bit cache (half the bytes, so its heavier arithmetic showed).
inline constexpr bool kFused16BitCaches = kPrefetchIntoL2;

// The most rows per K/V head the fused step takes: 4 with AVX2's 16 registers (5 to 7 rows
// there were 12-33 % slower, Zen 3), 8 with AVX-512's 32. Eight rows are the group of
// Llama 3 70B and Qwen 2.5 72B (64/8 heads), seven Qwen 2.5 7B's (28/4); five to eight
// rows are also a few speculative tokens of a smaller group (16/8 heads × 3 queries).
// Measured on Zen 4 against the tile-at-a-time step with its dot products (2 threads,
// d = 128, builds interleaved): from memory (Nk = 32768) 6 to 8 rows +13 to +24 %, 5 rows
// 0 to +15 %, d = 256 +8 to +37 %; with K and V in L2 (one thread, Nk = 512) +13 to
// +28 %. Below d = 128 the tile-at-a-time step keeps them (FusedApplies; docs/engine.md,
// "Five to eight rows, fused").
inline constexpr int64_t kFusedMaxRows = ATTNLAB_DECODE_AVX512 ? 8 : 4, kFusedManyRowsMinDim = 128;

// Prefetches a run of rows line by line, a few lines per call (see the top): rows
// [0, rows) at base + row·stride, `lines` 64-byte lines each. Called once per column
// block of the product, not at each of its keys: the cursor's bookkeeping at every key
// was a quarter of the product's instructions (docs/engine.md, "Tried since": +7-9 %
// with K and V in L3, unchanged from memory). The loop's own instructions space the
// prefetches out; a tight loop over the same lines was 8 % slower from memory.
struct LinePrefetcher {
  const char* base = nullptr;
  size_t stride = 0, lines = 0, rows = 0;
  size_t row = 0, line = 0;
  HWY_INLINE void Next(size_t n) {
    for (size_t i = 0; i < n && row < rows; ++i) {
      PrefetchLine(base + row * stride + line * 64);
      if (++line == lines) line = 0, ++row;
    }
  }
  // Beside a load (kBesideLoads, FusedRequestsBesideLoads): the line `byte` bytes into
  // row `r`. With no rows to ask for (the item's last keys) base is the current block's,
  // whose lines are already in cache, so the loads' loops need no branch.
  HWY_INLINE void At(size_t r, size_t byte) const { PrefetchLine(base + r * stride + byte); }
};

// On AVX-512 the prefetchers are also asked for lines as each group of KB keys of the
// scores starts, not only at the product's column blocks: there are 3 to 4 of those a
// block at d = 128 (16 lanes), so each asked for about 22 lines at once, and the core
// stalled at the prefetches (40 % of the samples in `perf record`, 32/8 heads from
// memory) while its miss buffers were full. Measured on Zen 4 (2 threads, interleaved,
// with the tree below): 32/8 heads +8 to +10 %, bitwise the same results (docs/engine.md,
// "The fused step on AVX-512"). AVX2 keeps the column blocks alone, as tuned on Zen 3
// (6 of them at d = 128, so 11 lines at a time already).
inline constexpr bool kPrefetchInScores = HWY_MAX_BYTES >= 64;

#if ATTNLAB_DECODE_AVX512
// The lane sums of vectors a[16·i, 16·i + 16) for i < n ≤ 16 (the others taken as zero):
// lane i of the result is vector i's sum. A tree of 30 shuffles and 15 adds for all 16,
// where a reduction per vector (SumOfLanes) takes 8 dependent steps each. Each level adds
// pairs of halves: 256-bit halves (shuffle_f32x4 0x44 / 0xEE), then 128-bit blocks
// (0x88 / 0xDD), then 64-bit pairs (unpacklo/hi_pd), then single lanes (shuffle_ps
// 0x88 / 0xDD). That leaves input slot 4t + m's sum in lane 4m + t; reading vector
// 4(i % 4) + i / 4 into slot i puts vector i's sum in lane i. Each sum adds the same
// pairs in the same order as _mm512_reduce_add_ps (SumOfLanes, as GCC 12 defines it),
// which reduced a vector at a time before: the scores are bitwise unchanged.
HWY_INLINE __m512 LaneSums16(const float* HWY_RESTRICT a, size_t n) {
  auto slot = [&](int i) {
    const size_t src = static_cast<size_t>(4 * (i % 4) + i / 4);
    return src < n ? _mm512_load_ps(a + src * 16) : _mm512_setzero_ps();
  };
  __m512 halves[8], blocks[4], pairs[2];
  for (int k = 0; k < 8; ++k) {
    const __m512 x = slot(2 * k), y = slot(2 * k + 1);
    halves[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 x = halves[2 * k], y = halves[2 * k + 1];
    blocks[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  }
  for (int k = 0; k < 2; ++k) {
    const __m512d x = _mm512_castps_pd(blocks[2 * k]), y = _mm512_castps_pd(blocks[2 * k + 1]);
    pairs[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(pairs[0], pairs[1], 0x88), _mm512_shuffle_ps(pairs[0], pairs[1], 0xDD));
}
#endif

// The lane reductions of the fused scores' accumulators acc_out [R][kFusedKeys][lanes]
// into s [R × kFusedKeys]: a row's 8 keys at a time (AVX2, generic), or two rows'.
template <int R>
HWY_INLINE void FusedLaneSums(const float* HWY_RESTRICT acc_out, float* HWY_RESTRICT s) {
  const DF df;
  const size_t L = hn::Lanes(df);
#if ATTNLAB_DECODE_AVX512
  // Two rows' 16 scores per tree; an odd last row's 8 alone.
  static_assert(kFusedKeys == 8, "a tree holds the scores of two rows of 8 keys");
  for (int r = 0; r < R; r += 2) {
    const __m512 sums = LaneSums16(acc_out + r * kFusedKeys * L, r + 1 < R ? 16 : 8);
    if (r + 1 < R) _mm512_storeu_ps(s + r * kFusedKeys, sums);
    else _mm512_mask_storeu_ps(s + r * kFusedKeys, 0xFF, sums);
  }
#elif HWY_TARGET == HWY_AVX2
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, …]: two rounds leave each key's
  // sum in two halves, lanes j (keys 0–3) and j + 4 (keys 4–7) of y and z; one exchange
  // of 128-bit halves and an add put key j's whole sum in lane j.
  for (int r = 0; r < R; ++r) {
    const float* a = acc_out + r * kFusedKeys * L;
    auto h = [&](int j) { return _mm256_hadd_ps(hn::Load(df, a + j * L).raw, hn::Load(df, a + (j + 1) * L).raw); };
    const __m256 y = _mm256_hadd_ps(h(0), h(2)), z = _mm256_hadd_ps(h(4), h(6));
    _mm256_storeu_ps(s + r * kFusedKeys,
                     _mm256_add_ps(_mm256_permute2f128_ps(y, z, 0x20), _mm256_permute2f128_ps(y, z, 0x31)));
  }
#else
  for (int r = 0; r < R; ++r) {
    const float* a = acc_out + r * kFusedKeys * L;
    for (size_t j = 0; j < kFusedKeys; ++j) s[r * kFusedKeys + j] = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, a + j * L)));
  }
#endif
}

// The raw scores of R rows against keys [0, kFusedKeys) of k (row stride k_rs): dot
// products over `cols` values (a whole number of vectors), `KB` keys at a time, each
// reduced across its lanes into s[r · kFusedKeys + j]. With kBesideLoads, asks kpf for
// the line of K ahead beside each K vector it loads (a float32 vector is a line on
// AVX-512; a 16-bit one is half of one, whose line is then asked for twice); else,
// with kPrefetchInScores, `per_group` lines of each prefetcher as each group of KB keys starts.
template <int R, int KB, bool kBesideLoads, class KE>
HWY_INLINE void FusedScores(size_t cols, const float* HWY_RESTRICT q, size_t q_rs, const KE* HWY_RESTRICT k,
                            size_t k_rs, float* HWY_RESTRICT s, size_t per_group, LinePrefetcher& kpf,
                            LinePrefetcher& vpf) {
  const DF df;
  const size_t L = hn::Lanes(df);
  // The accumulators of the eight keys of each row, [R][kFusedKeys][L], reduced together.
  HWY_ALIGN float acc_out[R * kFusedKeys * (HWY_MAX_BYTES / sizeof(float))];
  for (size_t j0 = 0; j0 < kFusedKeys; j0 += KB) {
    if constexpr (kPrefetchInScores && !kBesideLoads) {
      kpf.Next(per_group);
      vpf.Next(per_group);
    }
    VF acc[R][KB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) acc[r][j] = hn::Zero(df);
    for (size_t c = 0; c < cols; c += L) {
      VF kv[KB];
      for (int j = 0; j < KB; ++j) {
        kv[j] = LoadAsFloat(k + (j0 + j) * k_rs + c);
        if constexpr (kBesideLoads) kpf.At(j0 + j, c * sizeof(KE));
        KeepInRegister(kv[j]);
      }
      for (int r = 0; r < R; ++r) {
        VF qv = hn::LoadU(df, q + r * q_rs + c);
        KeepInRegister(qv);
        for (int j = 0; j < KB; ++j) acc[r][j] = hn::MulAdd(qv, kv[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) hn::Store(acc[r][j], df, acc_out + (r * kFusedKeys + j0 + j) * L);
  }
  FusedLaneSums<R>(acc_out, s);
}

#if ATTNLAB_DECODE_AVX512
// A bfloat16 cache's scores on the CPU's bfloat16 dot products (AVX512_BF16: Zen 4,
// Cooper Lake, Sapphire Rapids and later). VDPBF16PS adds to each float lane the two
// products of a pair of bfloat16 values: 32 multiply-adds per instruction where an FMA on
// converted values does 16. Zen 4 issues it at half the FMA's rate (`attnlab peak`: 117
// GFLOP/s per core for both), so the gain is what it saves: K loaded as it is stored, no
// conversion, and half the loads of K and of the queries per multiply-add. A product of two
// bfloat16 values is exact in float32, and each is added with one rounding as an FMA adds
// it (inputs and results below float's normal range are taken as zero: a score that small
// weighs nothing beside the others), so the scores are float32 sums of the exact products,
// as on the converted values, in another order: lane i holds columns 2i and 2i + 1 of each
// 32, where the float32 path's lane i holds column i of each 16. The results obey the
// accuracy rule, not bit for bit the float32 engine's (docs/engine.md, "bfloat16 scores on
// the CPU's dot products"). Issued by inline asm: Debian's Highway 1.0.3 has no target with
// AVX512_BF16, and a target attribute would have to reach every function the step
// inlines; the instruction runs only where cpu_has_bf16_dot_products() (Bf16DotsApply).
HWY_INLINE __m512 DotPairsBf16(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// FusedScores on VDPBF16PS: q holds the R rows' queries as bfloat16 bits (row stride q_rs),
// k the keys' rows; `cols` a whole number of 32.
template <int R, int KB, bool kBesideLoads>
HWY_INLINE void FusedScoresOnBf16Dots(size_t cols, const uint16_t* HWY_RESTRICT q, size_t q_rs,
                                      const bfloat16* HWY_RESTRICT k, size_t k_rs, float* HWY_RESTRICT s,
                                      size_t per_group, LinePrefetcher& kpf, LinePrefetcher& vpf) {
  constexpr size_t L = 16, kPairs = 32;  // float lanes; bfloat16 values per vector
  HWY_ALIGN float acc_out[R * kFusedKeys * L];
  for (size_t j0 = 0; j0 < kFusedKeys; j0 += KB) {
    if constexpr (!kBesideLoads) {
      kpf.Next(per_group);
      vpf.Next(per_group);
    }
    __m512 acc[R][KB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) acc[r][j] = _mm512_setzero_ps();
    for (size_t c = 0; c < cols; c += kPairs) {
      __m512i kv[KB];
      for (int j = 0; j < KB; ++j) {
        kv[j] = _mm512_loadu_si512(k + (j0 + j) * k_rs + c);
        if constexpr (kBesideLoads) kpf.At(j0 + j, c * sizeof(bfloat16));  // a vector is a line
      }
      for (int r = 0; r < R; ++r) {
        const __m512i qv = _mm512_loadu_si512(q + r * q_rs + c);
        for (int j = 0; j < KB; ++j) acc[r][j] = DotPairsBf16(acc[r][j], qv, kv[j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) _mm512_store_ps(acc_out + (r * kFusedKeys + j0 + j) * L, acc[r][j]);
  }
  FusedLaneSums<R>(acc_out, s);
}

// FusedScoresOnBf16Dots in row order (see FusedScoresInRowOrder): each key's row of K
// loaded whole (NP vectors of 32 values), then its dot products, one accumulator per row;
// each score the same chain over c as FusedScoresOnBf16Dots', so bitwise the same.
template <int R, int NP>
HWY_INLINE void FusedScoresOnBf16DotsInRowOrder(const uint16_t* HWY_RESTRICT q, size_t q_rs,
                                                const bfloat16* HWY_RESTRICT k, size_t k_rs, float* HWY_RESTRICT s) {
  constexpr size_t L = 16, kPairs = 32;
  HWY_ALIGN float acc_out[R * kFusedKeys * L];
  for (size_t j = 0; j < kFusedKeys; ++j) {
    __m512i kv[NP];
    for (int c = 0; c < NP; ++c) kv[c] = _mm512_loadu_si512(k + j * k_rs + c * kPairs);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int c = 0; c < NP; ++c)
      for (int r = 0; r < R; ++r) acc[r] = DotPairsBf16(acc[r], _mm512_loadu_si512(q + r * q_rs + c * kPairs), kv[c]);
    for (int r = 0; r < R; ++r) _mm512_store_ps(acc_out + (r * kFusedKeys + j) * L, acc[r]);
  }
  FusedLaneSums<R>(acc_out, s);
}
#endif

// The largest d whose bfloat16 queries the fused step holds on its stack for the dot
// products (R × d bits).
inline constexpr int64_t kBf16DotsMaxDim = 256;

// Whether the fused step takes the scores of `rows` rows per K/V head on the CPU's
// bfloat16 dot products: a bfloat16 cache on AVX-512 where the CPU has them (and the test
// hook allows), 3 rows or more, d a whole number of 32 up to kBf16DotsMaxDim. Measured on
// Zen 4 (builds interleaved, 2 threads, d = 128, Nk = 32768 unless said, against the
// scores on converted values, two or four runs): 8 rows (64/8 heads) +12 to +17 %, 7 rows
// (28/4) +15, +16 %, 4 rows (32/8) +11, +12 %, 3 rows (24/8) +10, +13 %, B = 4 at
// Nk = 4096 +13, +14 %, d = 64 +4 to +6 %, d = 256 +14 %, in L3 (Nk = 2048) +13 %; one
// and two rows, whose scores are a small part of a step bound by the memory, −0.5 to
// +5 % and −2 to −3 % (2 rows at d = 256 +4, +6 %): they keep the float32 products.
template <class E>
bool Bf16DotsApply(const Plan& p, int64_t rows) {
#if ATTNLAB_DECODE_AVX512
  return std::is_same_v<E, bfloat16> && rows >= 3 && p.dims.d % 32 == 0 && p.dims.d <= kBf16DotsMaxDim &&
         cpu_has_bf16_dot_products() && bf16_dot_products_allowed().load(std::memory_order_relaxed);
#else
  (void)p, (void)rows;
  return false;
#endif
}

// O [R × dv_pad] += P [R × kFusedKeys] · V [kFusedKeys × dv_pad] for the columns from c
// on (V's rows at v, stride v_rs; O's rows dv_pad apart), NV vectors of columns at a
// time, asking `per_block` lines of each prefetcher as each column block starts, or with
// kBesideLoads vpf's line of V ahead beside each V vector it loads.
template <int R, int NV, bool kBesideLoads, class VE>
HWY_INLINE void FusedValues(size_t c, size_t dv_pad, const float* HWY_RESTRICT p, const VE* HWY_RESTRICT v,
                            size_t v_rs, float* HWY_RESTRICT o, size_t per_block, LinePrefetcher& kpf,
                            LinePrefetcher& vpf) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (; c + NV * L <= dv_pad; c += NV * L) {
    VF acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < NV; ++u) acc[r][u] = hn::LoadU(df, o + r * dv_pad + c + u * L);
    if constexpr (!kBesideLoads) {
      kpf.Next(per_block);
      vpf.Next(per_block);
    }
    for (size_t j = 0; j < kFusedKeys; ++j) {
      VF vv[NV];
      for (int u = 0; u < NV; ++u) {
        vv[u] = LoadAsFloat(v + j * v_rs + c + u * L);
        if constexpr (kBesideLoads) vpf.At(j, (c + u * L) * sizeof(VE));
        KeepInRegister(vv[u]);
      }
      for (int r = 0; r < R; ++r) {
        const VF pr = hn::Set(df, p[r * kFusedKeys + j]);
        for (int u = 0; u < NV; ++u) acc[r][u] = hn::MulAdd(pr, vv[u], acc[r][u]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < NV; ++u) hn::StoreU(acc[r][u], df, o + r * dv_pad + c + u * L);
  }
  if constexpr (NV > 1)
    if (c < dv_pad) FusedValues<R, 1, kBesideLoads>(c, dv_pad, p, v, v_rs, o, per_block, kpf, vpf);
}

// ---- The fused step in row order, with the hardware prefetchers alone ----
//
// From memory, on the targets that ask for lines into L2, the fused step (any number of
// rows, at d = 64 and 128) reads K and V one row after another and asks for nothing but
// the first lines of each next block at one float32 row and from 6 rows
// (kFusedAsksNextBlock): the CPU's own prefetchers then run ahead of it, further than its
// requests did. A prefetcher follows a stream of lines whose first use goes up the
// addresses; FusedScores takes two keys' rows a vector of each at a time and FusedValues
// each column block down the block's 8 rows, and neither is such a stream: without the
// requests the committed step read 54 % of a plain read's bytes per second, with them
// 79-103 % (bench/memory_bursts.cpp, each pass between two read bounds, Zen 4, 2
// threads, 32/8 heads, Nk = 32768). With the requests the step stayed near 30 GB/s on two
// cores whatever the memory gave; our reading (this VM has no PMU to count them) is that a
// prefetch instruction takes one of the core's few L1 miss buffers as a load does, and
// L2's own prefetchers do not. Every step of the block below takes the same FMAs in
// the same order as FusedScores and FusedValues, so the results are bitwise the same.
// Measured in that instrument, in one process (the 4 rows' step, 2 threads; the median
// pass over its read bound, read bounds < 36 GB/s / 36-44 GB/s, about 1000 / 50-250
// passes each):
//   committed step (requests)                                   79-101 % / 73-79 %
//   no requests                                                 54 % / 44 %
//   no requests, V in row order (FusedValuesInRowOrder)         55-65 % / 52-54 %
//   no requests, scores taking each key's row whole, V as now   78-79 % / 72-73 %
//   the two together, no requests (this)                        108-109 % / 101 %
//   the two together, with the requests                         85 % / 76 % (1 row)
//   K read by a plain loop before the scores, interleaved order 52 % / 50 %
//   the same in row order                                       55-95 % / 51-86 %
// (the last two: the order of the first touch decides, but a separate touch loop's
// gain came and went with the code around it). 1 row 101 / 92 % against 119 / 120 %,
// 2 rows 100 / 93 % against 137 / 135 %.
// The library against the one before, builds interleaved (attnlab_interleave_builds,
// 2 threads, Nk = 32768, d = 128 unless said, 21-31 rounds; bitwise the same results):
// 32/8 heads +15 %, +35 %, +35 %; 16/8 +12 %; 24/8 +14 %; B = 4 at Nk = 4096 +8 %;
// d = 64 +8 %; but d = 256 (rows of 16 vectors: four passes over V for 4 rows) −18 %: it
// keeps the requests (rows of 4 or 8 vectors only). One row was −4 % (three runs) until
// it asked for the next block's first row (kFusedAsksNextBlock). 5 rows +7 %, +7 %
// against asking beside the loads, which 6 to 8 rows kept (FusedRequestsBesideLoads) until
// their queries were held in registers (kFusedQueriesHeldMinRows, below). In cache (beside
// the loads) nothing changes.
// 16-bit caches gain at every row count (half the bytes per key for the same arithmetic;
// bfloat16's scores on the CPU's dot products, FusedScoresOnBf16DotsInRowOrder, load half
// the queries' bytes too), against the requests they took before: bfloat16 32/8 +15 %,
// 16/8 +18 %, 5 rows +17 %, B = 4 +21 %, d = 64 +27 %; float16 32/8 +30 %, 16/8 +27 %; and
// against their requests where float32 keeps them: one row bfloat16 +20 %, float16 +19 %;
// 6 and 8 rows (beside the loads before) bfloat16 +10 %, +9 %.

// Six rows or more: the row-order step holds the queries and streams K past them.
//
// Loading each key's row whole and then every row's queries costs R · NC loads of Q per
// key: at 8 rows 72 loads for 64 multiply-adds, and a 512-bit load issues no faster than
// a multiply-add on Zen 4, where 6 to 8 rows already do about 0.4 of the FMA peak's work
// per byte. So from 6 rows the scores take groups of rows whose queries stay in
// kGroupRegisters (24) registers while the block's 8 keys pass (3 rows at d = 128; the
// groups after the first read the block again from L1, the first still touches K's lines
// in row order), and the product holds a group's rows of O in 24 accumulators (not 16)
// with each vector of V kept in a register for them (GCC otherwise folded its load into
// each row's multiply-add: a load per FMA). The same FMA chains in the same order:
// bitwise the same. Measured on Zen 4 (2 threads, Nk = 32768, d = 128, builds
// interleaved, 3-5 runs of 21 rounds, against asking beside the loads, which 6 to 8 rows
// took), K and V in 4 KiB pages: 48/8 heads +17 to +43 %, 56/8 +20 to +25 %, 64/8 +27 to
// +36 %, 28/4 +14 to +26 %, B = 4 at Nk = 4096 +21 to +26 %; in 2 MiB pages, where the
// requests do not walk a page table every 8 keys, −18 to +9 % (7 and 8 rows about −2 %);
// float16 caches +12 to +19 % and bfloat16 (the product only: its scores are the CPU's dot
// products) −1 to +6 % in either (docs/engine.md, "Six to eight rows: the queries held").
// Groups of 2 rows gained less (48/8 +17 against +23 %, 64/8 +3 against +7 %, in one
// run); held queries at 3 rows −26 %, at 4 and 5 rows −3 to 0 %; the spread requests
// added to the held queries at 8 rows −19 %.
inline constexpr int kFusedQueriesHeldMinRows = 6, kGroupRegisters = 24;

// With the queries held, the step also asks for the first line of K's and of V's next
// block as each block starts: two requests a block. A block of 8 keys of a float32 K or V
// at d = 128 is one 4 KiB page, and the CPU's prefetchers do not cross pages: `perf
// record` put 20 % of the 8-row step's samples on the instruction after the last load of
// a row (11 % K, 9 % V), where it waits for a line from memory. Measured on Zen 4 (2
// threads, Nk = 32768, d = 128, interleaved, 21 rounds, bitwise the same results): 64/8
// heads +5, +2, +2 %, 56/8 +6 %, 48/8 +8, +5 %, bfloat16 and float16 at 64/8 +2 %, K and
// V in 2 MiB pages ±0; at 4 rows −0.5 % (not taken). Two lines of the block after next
// −2.5 % at 8 rows and −12 % at 4; four lines of the next ±0 to +2 %; every line of the
// next (the spread requests) −19 %.

// Whether the step in row order asks for K's and V's next block as each block starts
// (PrefetchRows on the block's first key row): at one row of a float32 cache the whole row
// (8 lines at d = 128), from kFusedQueriesHeldMinRows rows its first line, else nothing.
// A float32 block of 8 keys at d = 128 is one 4 KiB page, and the CPU's prefetchers do not
// cross pages: each block begins with misses, which one row's few multiply-adds cannot
// hide. One row in row order against its spread requests, measured on Zen 4 (2 threads,
// 8/8 heads, Nk = 32768, d = 128, builds interleaved, 15-21 rounds, 4 KiB / 2 MiB pages,
// bitwise the same results): asking for nothing −5.9, −5.5, +10.9, −4.2, −1.4 % / +6.4,
// +3.7, +2.0, +4.9, +7.3 %; one line −3.2, −2.8 / +6.0, +6.4 %; four lines −1.2, +0.8, +0.8
// / +5.9, +7.3, +7.1 %; eight lines (this) +2.2 / +6.8 %; B = 4 at Nk = 8192 +1.0, +0.9 /
// +6.3, +7.4 %. A 16-bit cache (in row order already; its block is half a page) asks for
// nothing: bfloat16 asking for 8 lines +0.2, −0.2 / +0.8, −1.9 %, for 4 lines +7.4, +2.5 /
// −2.6, −6.6 %.
// From 6 rows see kFusedQueriesHeldMinRows; at 2 to 5 rows one line was −0.5 % at 4.
template <int R, class E>
inline constexpr bool kFusedAsksNextBlock = (R == 1 && std::is_same_v<E, float>) || R >= kFusedQueriesHeldMinRows;

// group(r0, integral_constant<int, GR>) for R rows in groups of G from row 0 (GR = G;
// the last group R % G rows): the row-order kernels' register blocks of rows.
template <int R, int G, class Group>
HWY_INLINE void ForRowGroups(const Group& group) {
  int r0 = 0;
  for (; r0 + G <= R; r0 += G) group(r0, std::integral_constant<int, G>());
  if constexpr (R % G != 0) group(r0, std::integral_constant<int, R % G>());
}

// FusedScores in row order: each key's row of K loaded whole (NC vectors, in order),
// then R · NC multiply-adds into one accumulator per row; from kFusedQueriesHeldMinRows
// rows, groups of rows whose queries stay in registers while the block's keys pass
// (see above). Each score is the same chain of FMAs over c as FusedScores' (from zero,
// c ascending), so bitwise the same.
template <int R, int NC, class KE>
HWY_INLINE void FusedScoresInRowOrder(const float* HWY_RESTRICT q, size_t q_rs, const KE* HWY_RESTRICT k, size_t k_rs,
                                      float* HWY_RESTRICT s) {
  const DF df;
  constexpr size_t L = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float acc_out[R * kFusedKeys * L];  // [R][kFusedKeys][L], reduced together
  if constexpr (R >= kFusedQueriesHeldMinRows) {
    // GR rows from r0: their queries [GR][NC] in registers, each key's K vectors loaded once.
    auto group = [&](int r0, auto rows) {
      constexpr int GR = decltype(rows)::value;
      VF qv[GR][NC];
      for (int r = 0; r < GR; ++r)
        for (int c = 0; c < NC; ++c) qv[r][c] = hn::LoadU(df, q + (r0 + r) * q_rs + c * L);
      for (size_t j = 0; j < kFusedKeys; ++j) {
        VF acc[GR];
        for (int r = 0; r < GR; ++r) acc[r] = hn::Zero(df);
        for (int c = 0; c < NC; ++c) {
          VF kv = LoadAsFloat(k + j * k_rs + c * L);
          KeepInRegister(kv);
          for (int r = 0; r < GR; ++r) acc[r] = hn::MulAdd(qv[r][c], kv, acc[r]);
        }
        for (int r = 0; r < GR; ++r) hn::Store(acc[r], df, acc_out + ((r0 + r) * kFusedKeys + j) * L);
      }
    };
    ForRowGroups<R, std::min(R, kGroupRegisters / NC)>(group);
    FusedLaneSums<R>(acc_out, s);
    return;
  }
  for (size_t j = 0; j < kFusedKeys; ++j) {
    VF kv[NC];
    for (int c = 0; c < NC; ++c) {
      kv[c] = LoadAsFloat(k + j * k_rs + c * L);
      KeepInRegister(kv[c]);
    }
    VF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
    for (int c = 0; c < NC; ++c)
      for (int r = 0; r < R; ++r) {
        VF qv = hn::LoadU(df, q + r * q_rs + c * L);
        KeepInRegister(qv);
        acc[r] = hn::MulAdd(qv, kv[c], acc[r]);
      }
    for (int r = 0; r < R; ++r) hn::Store(acc[r], df, acc_out + (r * kFusedKeys + j) * L);
  }
  FusedLaneSums<R>(acc_out, s);
}

// O [R × NV·L] += P [R × kFusedKeys] · V [kFusedKeys × NV·L] in row order: G rows of O
// with all NV vectors of their columns in registers (G · NV = 16 accumulators;
// kGroupRegisters from kFusedQueriesHeldMinRows rows, each V vector then kept in a
// register for the group's rows), V's rows in order; the groups after the first read the
// block's V again, from L1. Each element of O adds the keys in the same order as
// FusedValues', so bitwise the same.
template <int R, int NV, class VE>
HWY_INLINE void FusedValuesInRowOrder(const float* HWY_RESTRICT p, const VE* HWY_RESTRICT v, size_t v_rs,
                                      float* HWY_RESTRICT o) {
  const DF df;
  constexpr size_t L = HWY_MAX_BYTES / sizeof(float);
  constexpr bool kMany = R >= kFusedQueriesHeldMinRows;
  constexpr int G = std::min(R, (kMany ? kGroupRegisters : 16) / NV);
  auto group = [&](int r0, auto rows) {
    constexpr int GR = decltype(rows)::value;
    VF acc[GR][NV];
    for (int r = 0; r < GR; ++r)
      for (int u = 0; u < NV; ++u) acc[r][u] = hn::LoadU(df, o + (r0 + r) * NV * L + u * L);
    for (size_t j = 0; j < kFusedKeys; ++j) {
      VF pr[GR];
      for (int r = 0; r < GR; ++r) pr[r] = hn::Set(df, p[(r0 + r) * kFusedKeys + j]);
      for (int u = 0; u < NV; ++u) {
        VF vv = LoadAsFloat(v + j * v_rs + u * L);
        if constexpr (kMany && GR > 1) KeepInRegister(vv);  // 3 to 5 rows: −2 to −3 %, noise or a loss
        for (int r = 0; r < GR; ++r) acc[r][u] = hn::MulAdd(pr[r], vv, acc[r][u]);
      }
    }
    for (int r = 0; r < GR; ++r)
      for (int u = 0; u < NV; ++u) hn::StoreU(acc[r][u], df, o + (r0 + r) * NV * L + u * L);
  };
  ForRowGroups<R, G>(group);
}

// The online-softmax step of one row on a block of kFusedKeys raw scores x (in place:
// they become P): the scale, then the online-softmax update on the block. Every key of
// the block is visible.
//
// The running max is lazy (FlashAttention-4's conditional rescaling): m is a reference
// at or above every score seen, not their max. While a block's scaled scores are all at
// or below m, P = exp(x − m) and l += ΣP directly: no max reduction, no rescale of O,
// and the branch is nearly always taken the same way, so the exponentials wait only on
// the scores. A block with a score above m (or a NaN, or the chunk's first block) takes
// the exact update with the reference set kLazyMaxHeadroom above the block's max, so
// later blocks rarely move it again. m + log l and O / l are what they were: any
// reference ≥ the max gives the same quotient. P ≤ e^−8 then, so nothing can overflow
// that did not before; keys more than 80 below the max (not 88) flush to zero, a
// relative e^−80 that float cannot see. Measured on Zen 4 (2 threads, interleaved
// builds; results within 1.1e-7 of the exact update's): K and V in L3 (32/8 heads,
// Nk = 2048; d = 64 at 4096) +6 to +16 %, 16/8 heads +3 to +6 %; from memory −0.4 to
// +2.6 %, within noise; the AVX2 target on the same machine alike (docs/engine.md,
// "The lazy max").
inline constexpr float kLazyMaxHeadroom = 8.0f;

HWY_INLINE void FusedSoftmaxRow(float* x, float scale, float& m, float& l, bool& nan_score, float* o_row,
                                size_t dv_pad) {
  const hn::CappedTag<float, kFusedKeys> d8;
  const size_t N = hn::Lanes(d8);
  const auto vscale = hn::Set(d8, scale);
  if (m > kNegInf) {
    const auto vm = hn::Set(d8, m);
    bool below = true;  // false for a NaN too: it takes the exact update and its checks
    for (size_t j = 0; j < kFusedKeys; j += N)
      below &= hn::AllTrue(d8, hn::Le(hn::Mul(hn::LoadU(d8, x + j), vscale), vm));
    if (below) {
      auto sum = hn::Zero(d8);
      for (size_t j = 0; j < kFusedKeys; j += N) {
        const auto pj = ExpNonPositive(d8, hn::Sub(hn::Mul(hn::LoadU(d8, x + j), vscale), vm));
        sum = hn::Add(sum, pj);
        hn::StoreU(pj, d8, x + j);
      }
      l += hn::GetLane(hn::SumOfLanes(d8, sum));
      return;
    }
  }
  auto vmax = hn::Set(d8, kNegInf);
  for (size_t j = 0; j < kFusedKeys; j += N) {
    const auto xj = hn::Mul(hn::LoadU(d8, x + j), vscale);
    hn::StoreU(xj, d8, x + j);
    vmax = hn::Max(vmax, xj);
  }
  const float block_max = hn::GetLane(hn::MaxOfLanes(d8, vmax));
  // Every key of a fused block is visible (no mask takes this path): a block with no finite
  // max holds only NaN (which the max may skip) or −inf scores, which overflowed float32
  // and would pass for masked keys (MaskRow's rule), so the row is logged as overflowed.
  if (!(block_max > kNegInf)) nan_score = true;
  // −inf and NaN stay what they are with the headroom added, and the update treats them as before.
  SoftmaxUpdateRowInline(x, static_cast<int64_t>(kFusedKeys), block_max + kLazyMaxHeadroom, m, l, o_row,
                         static_cast<int64_t>(dv_pad), nullptr, d8);
}

// The rows from which FusedSoftmaxRows takes two rows a vector. At 8 rows the online
// softmax was 13 % of the step's samples in L2 (perf record: each row alone, its
// exponential's constants loaded again for each), and the step's arithmetic alone nearly
// fills the memory's time. Measured on Zen 4 (2 threads, Nk = 32768, d = 128, builds
// interleaved, 4 KiB / 2 MiB pages, bitwise the same results): 64/8 heads +3 to +4 / +3 to
// +5 %, 56/8 +0 to +3 / +2 to +4 %, 48/8 +2 / −1 to +2 %, 28/4 +2 to +4 / 0 to +3 %,
// bfloat16 and float16 at 64/8 +4 to +6 %, B = 4 +1 to +5 %. Below 6 rows inlined pairs
// cost the 2-row scores spills (−2 %) and out of line 4 rows lost 19–28 % from memory
// (docs/engine.md, "The softmax, two rows a vector").
inline constexpr int kFusedSoftmaxPairsMinRows = 6;

// FusedSoftmaxRow for the R rows of a block, s [R × kFusedKeys]; m, l, nan_score and the
// rows of O (o, dv_pad apart) are the rows' own, row 0 first. On AVX-512, from
// kFusedSoftmaxPairsMinRows rows, two rows share a vector, row r's keys in its low half
// and row r + 1's in its high: where both rows' scaled scores are at or below their m
// (the lazy max's common case) one exponential and one sum tree serve the pair, else each
// row takes FusedSoftmaxRow. The tree adds each half's lanes in the pairs SumOfLanes adds
// them in over 8 lanes (k with k + 4, then 0 with 2, then 0 with 1), so l, P and O are
// bitwise what the rows alone give.
template <int R>
HWY_INLINE void FusedSoftmaxRows(float* HWY_RESTRICT s, const float* scale, float* m, float* l, bool* nan_score,
                                 float* o, size_t dv_pad) {
  int r = 0;
#if ATTNLAB_DECODE_AVX512
  static_assert(kFusedKeys == 8, "a vector holds two rows of 8 keys");
  if constexpr (R >= kFusedSoftmaxPairsMinRows) {
    const hn::Full512<float> d16;
    // Two floats' broadcasts, one per half: lo in lanes 0-7, hi in lanes 8-15.
    auto halves = [](float lo, float hi) { return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1); };
    for (; r + 1 < R; r += 2) {
      if (m[r] > kNegInf && m[r + 1] > kNegInf) {
        const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + r * kFusedKeys), halves(scale[r], scale[r + 1]));
        const __m512 vm = halves(m[r], m[r + 1]);
        if (_mm512_cmp_ps_mask(x, vm, _CMP_LE_OQ) == 0xFFFF) {  // a NaN fails it, as in FusedSoftmaxRow
          const __m512 pr = ExpNonPositive(d16, hn::Vec512<float>{_mm512_sub_ps(x, vm)}).raw;
          _mm512_storeu_ps(s + r * kFusedKeys, pr);
          __m512 t = _mm512_add_ps(pr, _mm512_shuffle_f32x4(pr, pr, 0xB1));  // lane k + lane k + 4
          t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
          t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
          l[r] += _mm512_cvtss_f32(t);
          l[r + 1] += _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));
          continue;
        }
      }
      for (int i = r; i < r + 2; ++i)
        FusedSoftmaxRow(s + i * kFusedKeys, scale[i], m[i], l[i], nan_score[i], o + i * dv_pad, dv_pad);
    }
  }
#endif
  for (; r < R; ++r) FusedSoftmaxRow(s + r * kFusedKeys, scale[r], m[r], l[r], nan_score[r], o + r * dv_pad, dv_pad);
}

// The vectors of a K or V row when the shape reads in row order (d = dv = 64 or 128 on
// AVX-512: 4 or 8), else 0; whatever the rows (see FusedRowOrderVectors).
int RowOrderRowVectors(const Plan& p) {
  if constexpr (!kPrefetchIntoL2) {
    (void)p;
    return 0;
  } else {
    const int64_t L = static_cast<int64_t>(hn::Lanes(DF())), d = p.dims.d;
    if (!fused_row_order_allowed().load(std::memory_order_relaxed) || p.dims.dv != d || p.dv_pad != d || d % L != 0)
      return 0;
    const int64_t n = d / L;
    return n == 4 || n == 8 ? static_cast<int>(n) : 0;
  }
}

// How the fused step asks for the K and V lines kFusedAhead keys ahead, on the targets
// that ask into L2 (kPrefetchIntoL2): beside each of its loads (one line per vector) when
// the call's K and V hold at most fused_beside_loads_max_kv_bytes (the last-level cache's
// size), spread over its blocks (LinePrefetcher::Next) otherwise. The two ask for the same
// lines at other moments, and the results are bitwise the same. Where K and V fit the
// cache, a call made again finds them there, and the spread requests' bookkeeping costs
// more than it brings (13 instructions a line: more than the step's multiply-adds at 4
// rows; perf, 32/8 heads in L3: about 15 % of the samples in its loops, 24 % at one row); from
// memory the spread requests are as fast or up to 9 % faster. Measured on
// Zen 4 (2 threads, d = 128 unless said, builds interleaved), beside the loads against
// spread: K and V in L3, 32/8 heads, Nk = 2048 to 4096, +19 to +41 %; 16/8 +57 %,
// 24/8 +46 %, B = 4 at Nk = 512 +37 %, d = 64 +22 %, d = 256 +49 %; in L2 (one thread,
// 4/1 heads, Nk = 512) +41 %; K and V of 48 MiB −5 %, 64 MiB ±0; from memory (Nk = 32768)
// 32/8 −2 to +3 %, 24/8 −3 %, 16/8 −9 %, d = 256 −8 %. So a model whose layers' caches
// are each smaller than the cache, read from memory as decoding goes layer by layer,
// loses up to 9 % with 2 rows (none with 4), and a call that finds its cache in L3 gains
// a third or more (docs/engine.md, "Requests beside the loads, in cache"). AVX2 asks as
// tuned on Zen 3.
//
// A float32 cache with fused_beside_loads_min_rows (6) rows per K/V head or more, whatever
// the size (a 16-bit cache from memory reads in row order, FusedRowOrderVectors): from
// memory too, 5 to 8 rows were faster beside the loads than with the spread requests (Zen 4,
// 2 threads, interleaved, 94 rounds over 14 minutes: 8 rows +11 % and 6 rows +15 % in the
// median, never slower; 5 and 7 rows −1 to +12 %, 8 rows at d = 256 +14 to +16 %, B = 4
// +8 to +10 %), where 3 and 4 rows were 1 % slower (4 rows 10 % faster in the memory's
// bursts; docs/engine.md, "Five to eight rows, fused"). Against the row order that took
// the spread requests' place (FusedRowOrderVectors), beside the loads lost at 5 rows (row
// order +7 %, +7 %) and won at 6, 7 and 8 (row order −5 %, −9 %, −20 %, −17 %): five rows
// take the row order.
//
// Since the row-order step holds the queries of 6 rows or more (kFusedQueriesHeldMinRows),
// those rows read in row order from memory too (in 4 KiB pages 48/8 heads +17 to +43 %,
// 64/8 +27 to +36 %, against beside the loads); the rule is left to the rows that row
// order does not take (d = 256, or row order turned off).
bool FusedRequestsBesideLoads(const Plan& p, int64_t rows) {
  if constexpr (!kPrefetchIntoL2) return false;
  if (p.k.is_f32() && rows >= fused_beside_loads_min_rows().load(std::memory_order_relaxed) && RowOrderRowVectors(p) == 0)
    return true;
  const auto& dm = p.dims;
  const double kv_bytes = static_cast<double>(dm.B * dm.Hkv) * static_cast<double>(dm.Nk) *
                          static_cast<double>(dm.d + dm.dv) * (p.k.is_f32() ? 4.0 : 2.0);
  return kv_bytes <= static_cast<double>(fused_beside_loads_max_kv_bytes().load(std::memory_order_relaxed));
}

// True when the item's block takes the fused step on tile [j0, j0 + nc) (see its
// comment): decoding with 2 to kFusedMaxRows rows per K/V head (grouped heads), or one row on the
// targets that ask for lines into L2 (all in this block; their scores are dot products),
// K and V in place, of one type (float32; 16-bit on AVX-512), whole blocks of keys, no score
// treatment, and every row's key range covering the tile.
//
// One query row per K/V head (a decoding step without grouped heads) takes the fused
// step on AVX-512: from memory it keeps the memory busy where the tile-at-a-time step
// leaves it idle during each tile's softmax and product, and in cache, with its requests
// beside the loads (FusedRequestsBesideLoads), it is ahead too. Measured on Zen 4 (2
// threads, interleaved builds), against the tile-at-a-time step: 8/8 heads, Nk = 32768,
// d = 128, +4 to +10 % with the memory at 25–29 GB/s (−1 to +5 % at 20–26); B = 4,
// Nk = 4096 +5 to +11 %; d = 64 +14 to +25 %, d = 256 +2 to +4 %; in 2 MiB pages +9 to
// +13 %; with K and V in L3 (Nk = 512, 2048) +16, +11 %, where with the spread requests
// it had been −33 to −37 % and kept to caches larger than the last-level one. The AVX2
// target keeps the tile-at-a-time step: on Zen 3, its machine, one row fused was −1 to
// −3 % (before the lazy max and the spread requests; docs/engine.md, "One query row, fused").
template <class E>
bool FusedApplies(const DecodeWork& w, int64_t b, int64_t W, int64_t j0, int64_t nc, InPlaceRows<E> k_rows,
                  InPlaceRows<E> v_rows) {
  const Plan& p = *w.p;
  const AttentionOptions<float>& o = *p.options;
  if (W < 1 || W > kFusedMaxRows || W != w.rows || !fused_decode_allowed().load(std::memory_order_relaxed)) return false;
  if (W == 1 && !kPrefetchIntoL2) return false;
  if (!std::is_same_v<E, float> && !kFused16BitCaches) return false;
  // Five to eight rows at d < 128: the step's costs per row and key (lane sums, softmax)
  // weigh more against half the multiply-adds, and the tile-at-a-time step was ahead (Zen 4,
  // from memory: d = 64 −6 %, d = 80 −10 %, d = 96 −4 % at 8 rows; d = 128 +23 %, d = 256
  // +8 to +26 %). A bfloat16 cache whose scores take the CPU's dot products (Bf16DotsApply)
  // is fused there too: against the tile-at-a-time step (Zen 4, 2 threads, Nk = 32768,
  // interleaved, two runs each) 14/2 heads at d = 64 +14, +16 %, 64/8 +14, +15 %, 40/8
  // +22, +23 %, 12/2 at d = 96 +30, +30 %.
  if (W > 4 && p.dims.d < kFusedManyRowsMinDim && !Bf16DotsApply<E>(p, W)) return false;
  if (k_rows.data == nullptr || v_rows.data == nullptr || nc % static_cast<int64_t>(kFusedKeys) != 0) return false;
  if (p.softcap != 0.0f || p.alibi || p.score_mod != nullptr || p.mask_mod != nullptr || o.additive_mask.present() ||
      o.bool_mask.present())
    return false;
  for (int64_t i = 0; i < p.dims.Nq; ++i) {
    const int64_t at = b * p.dims.Nq + i;
    if (w.begin[at] > j0 || w.end[at] < j0 + nc) return false;
  }
  return true;
}

// The fused step (see above) for the R = w.rows rows of item `item` on tile [j0, j0 + nc):
// K's rows at k_rows, V's at v_rows (row j0 first), `ahead` keys from j0 on that may be
// prefetched (the item's keys), asked for beside the loads or spread over the block
// (kBesideLoads, FusedRequestsBesideLoads). sc.q holds the item's packed queries. Kept out of line,
// as it was measured: ScoresByDot's groups of 8 rows led GCC to inline it into
// DecodeBlock, and 32/8 heads then decoded 9 % slower in one interleaved run (within the
// driver's ±2 % noise in three later ones).
template <int R, bool kBesideLoads, class E, bool kBf16Dots, int kRowVectors = 0>
HWY_NOINLINE void FusedDecodeBlock(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t nc,
                                   int64_t ahead, InPlaceRows<E> k_rows, InPlaceRows<E> v_rows, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df), dv_pad = static_cast<size_t>(p.dv_pad), d = static_cast<size_t>(dm.d);
  const int64_t row0 = item * w.rows;
  float* o = w.o + row0 * p.dv_pad;  // O [R × dv_pad], this item's rows
  float scale[R];
  for (int r = 0; r < R; ++r) scale[r] = w.scale[(b * dm.Hq + w.head_of(hk, r)) * dm.Nq + w.query_of(r)];
  // The product's register blocks, R rows × NV vectors of columns: 3 or 4 rows take 3
  // vectors (AVX2's 16 registers: 12 accumulators, 3 of V, a broadcast p) up to 16
  // vectors of columns, 2 beyond. Measured from memory against 2 vectors everywhere
  // (interleaved builds, Zen 3, 2 threads, bitwise the same results): 32/8 heads,
  // Nk = 32768 +2 to +6 %, B = 4 +3.5 to +5 %, 24/8 (3 rows) +3 to +5 %, d = 64 ±0;
  // d = 256 −3.5 to −4.4 %, hence the limit.
  // On AVX-512, 5 and 6 rows take 3 vectors too (15 and 18 accumulators of 32 registers;
  // 6 rows with 2: −1 to −2 %); 7 and 8 rows take 2 (7 rows with 3, 21 accumulators, were
  // 3 to 10 % slower from memory, the same in L2 and L3, bitwise the same results; 8 rows
  // with 3, 24 accumulators, 10 % slower from memory and 14 % in L3).
  constexpr int kNarrowNV = R <= 2 ? 4 : 2;  // 1 and 2 rows: 1 × 4, 2 × 4
  const bool three = R > 2 && R < 7 && dv_pad / L <= 16;
  const size_t NV = three ? 3 : kNarrowNV;
  // 64-byte lines asked for as each column block of the product starts (and on AVX-512 as
  // each group of keys of the scores starts, kPrefetchInScores): all of the K and V lines
  // of the block kFusedAhead keys ahead, spread over those calls (d = dv = 128, 4 rows, a
  // row is 8 lines: AVX2 11 lines of each per call, AVX-512 10; 2 rows: 16 and 16).
  // Keys per group of the scores: R × KB accumulators (1 row: 2 keys and 1 × 2 blocks no
  // better, ±6 %; 5 rows: 4 keys, 20 accumulators, no better than 2).
  constexpr int KB = R <= 2 ? 4 : 2;
  const size_t k_lines = (d * sizeof(E) + 63) / 64, v_lines = (dv_pad * sizeof(E) + 63) / 64;
  // ≤ the calls made: FusedValues' blocks (its 1-vector tail included) and the score groups.
  const size_t calls = (dv_pad / L + NV - 1) / NV + (kPrefetchInScores ? kFusedKeys / KB : 0);
  const size_t per_call = (std::max(k_lines, v_lines) * kFusedKeys + calls - 1) / calls;
  HWY_ALIGN float s[R * kFusedKeys];  // S, then P, of the block [R × kFusedKeys]
  // With kBf16Dots, the rows' queries as bfloat16 bits [R × d]: the high half of each packed
  // float, exact, as they were bfloat16 values (a tile's 256 keys pay R × d shifts).
  HWY_ALIGN uint16_t q16[kBf16Dots ? R * kBf16DotsMaxDim : 1];
  if constexpr (kBf16Dots)
    for (int r = 0; r < R; ++r)
      for (size_t c = 0; c < d; ++c)
        q16[r * d + c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(sc.q.get()[r * p.d_pad + c]) >> 16);
  // Row 0's raw scores · 0, accumulated: NaN if K held a NaN or ±inf (check_finite, see DecodeBlock).
  const hn::CappedTag<float, kFusedKeys> d8;
  auto finite8 = hn::Zero(d8);
  for (int64_t j = 0; j < nc; j += static_cast<int64_t>(kFusedKeys)) {
    const E* k = k_rows.data + static_cast<size_t>(j) * k_rows.stride;
    const E* v = v_rows.data + static_cast<size_t>(j) * v_rows.stride;
    // The block kFusedAhead keys ahead, if it is the item's; else none (LinePrefetcher::At
    // then asks for this block's lines again). In row order none of these (from 6 rows two
    // lines of the next block, below).
    const bool ask = kRowVectors == 0 && j + static_cast<int64_t>(kFusedAhead + kFusedKeys) <= ahead;
    const size_t pf_rows = ask ? kFusedKeys : 0, pf_key = static_cast<size_t>(j) + (ask ? kFusedAhead : 0);
    LinePrefetcher kpf{reinterpret_cast<const char*>(k_rows.data + pf_key * k_rows.stride),
                       k_rows.stride * sizeof(E), k_lines, pf_rows};
    LinePrefetcher vpf{reinterpret_cast<const char*>(v_rows.data + pf_key * v_rows.stride),
                       v_rows.stride * sizeof(E), v_lines, pf_rows};
    // In row order, the first lines of K's and of V's next block as this one starts (one
    // float32 row: the block's first key row; from 6 rows its first line: kFusedAsksNextBlock).
    if constexpr (kRowVectors > 0 && kFusedAsksNextBlock<R, E>) {
      const size_t next = static_cast<size_t>(j) + kFusedKeys;
      if (static_cast<int64_t>(next + kFusedKeys) <= ahead) {
        PrefetchRows(k_rows.data, k_rows.stride, next, 1, d * sizeof(E), /*first_line=*/R > 1);
        PrefetchRows(v_rows.data, v_rows.stride, next, 1, dv_pad * sizeof(E), /*first_line=*/R > 1);
      }
    }
#if ATTNLAB_DECODE_AVX512
    if constexpr (kRowVectors > 0 && kBf16Dots) FusedScoresOnBf16DotsInRowOrder<R, kRowVectors / 2>(q16, d, k, k_rows.stride, s);
    else
#endif
    if constexpr (kRowVectors > 0)
      FusedScoresInRowOrder<R, kRowVectors>(sc.q.get(), static_cast<size_t>(p.d_pad), k, k_rows.stride, s);
    else
#if ATTNLAB_DECODE_AVX512
    if constexpr (kBf16Dots) FusedScoresOnBf16Dots<R, KB, kBesideLoads>(d, q16, d, k, k_rows.stride, s, per_call, kpf, vpf);
    else
#endif
      FusedScores<R, KB, kBesideLoads>(d, sc.q.get(), static_cast<size_t>(p.d_pad), k, k_rows.stride, s, per_call, kpf, vpf);
    if (w.kv_suspect != nullptr)
      for (size_t j8 = 0; j8 < kFusedKeys; j8 += hn::Lanes(d8)) finite8 = hn::MulAdd(hn::LoadU(d8, s + j8), hn::Zero(d8), finite8);
    FusedSoftmaxRows<R>(s, scale, w.m + row0, w.l + row0, w.nan_score + row0, o, dv_pad);
    if constexpr (kRowVectors > 0) FusedValuesInRowOrder<R, kRowVectors>(s, v, v_rows.stride, o);
    else if (three) FusedValues<R, 3, kBesideLoads>(0, dv_pad, s, v, v_rows.stride, o, per_call, kpf, vpf);
    else FusedValues<R, kNarrowNV, kBesideLoads>(0, dv_pad, s, v, v_rows.stride, o, per_call, kpf, vpf);
  }
  if (w.kv_suspect != nullptr && !hn::AllFalse(d8, hn::IsNaN(finite8))) w.kv_suspect->store(true, std::memory_order_relaxed);
}

// The vectors of K's and V's rows when the fused step takes them in row order (see
// FusedScoresInRowOrder), else 0: on the targets that ask for lines into L2, from memory
// (not beside the loads), rows of 4 or 8 vectors (d = dv = 64 or 128 on AVX-512), any
// number of rows, unless a test turns it off (fused_row_order_allowed).
template <bool kBesideLoads, class E>
int FusedRowOrderVectors(const Plan& p) {
  if constexpr (kBesideLoads || !kPrefetchIntoL2 || (!std::is_same_v<E, float> && !kFused16BitCaches)) {
    (void)p;
    return 0;
  } else {
    return RowOrderRowVectors(p);
  }
}

// FusedDecodeBlock for W = 1 to kFusedMaxRows rows (5 to 8 instantiated on AVX-512 only).
template <bool kBesideLoads, class E>
void FusedDecodeRows(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t W, int64_t nc, int64_t ahead,
                     InPlaceRows<E> k_rows, InPlaceRows<E> v_rows, DecodeScratch& sc) {
  const bool dots = Bf16DotsApply<E>(*w.p, W);
  const int row_vectors = FusedRowOrderVectors<kBesideLoads, E>(*w.p);
  // R rows, scores on the bfloat16 dot products or not: in row order (rows of 4 or 8
  // vectors) or with the requests.
  auto block = [&](auto r, auto on_dots) {
    constexpr int R = decltype(r)::value;
    constexpr bool kDots = decltype(on_dots)::value;
    if constexpr (!kBesideLoads && kPrefetchIntoL2) {
      if (row_vectors == 4) return FusedDecodeBlock<R, false, E, kDots, 4>(w, item, b, hk, nc, ahead, k_rows, v_rows, sc);
      if (row_vectors == 8) return FusedDecodeBlock<R, false, E, kDots, 8>(w, item, b, hk, nc, ahead, k_rows, v_rows, sc);
    }
    FusedDecodeBlock<R, kBesideLoads, E, kDots>(w, item, b, hk, nc, ahead, k_rows, v_rows, sc);
  };
  auto rows = [&](auto r) {
    if constexpr (std::is_same_v<E, bfloat16>)
      if (dots) return block(r, std::true_type());
    block(r, std::false_type());
  };
  using std::integral_constant;
  if (W == 1) rows(integral_constant<int, 1>());
  else if (W == 2) rows(integral_constant<int, 2>());
  else if (W == 3) rows(integral_constant<int, 3>());
  else if (W == 4 || kFusedMaxRows == 4) rows(integral_constant<int, 4>());
  else if constexpr (kFusedMaxRows == 8) {
    if (W == 5) rows(integral_constant<int, 5>());
    else if (W == 6) rows(integral_constant<int, 6>());
    else if (W == 7) rows(integral_constant<int, 7>());
    else rows(integral_constant<int, 8>());
  }
}

// One row block on one key tile: S = scores, the online-softmax step, O += P·V.
// V's rows: in place (v_rows.data, of element type VE), or packed into sc.v (float,
// [nc × dv_pad]); sc.q holds the item's packed queries. Returns true if the block took
// the fused step (counted for the tests: TileCounts).
template <class E, class VE>
bool DecodeBlock(const DecodeWork& w, int64_t item, int64_t b, int64_t hk, int64_t r0, int64_t W, int64_t j0,
                 int64_t nc, int64_t ahead, InPlaceRows<VE> v_rows, DecodeScratch& sc) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  const ConstView<E> kv = p.k.as<E>();
  if constexpr (std::is_same_v<E, VE>) {
    // Grouped heads decoding in the common case: the fused step (see FusedDecodeBlock).
    const InPlaceRows<E> k_rows = RowsInPlace(kv, b, hk, j0, dm.d, L);
    if (FusedApplies(w, b, W, j0, nc, k_rows, v_rows)) {
      if (FusedRequestsBesideLoads(p, w.rows)) FusedDecodeRows<true>(w, item, b, hk, W, nc, ahead, k_rows, v_rows, sc);
      else FusedDecodeRows<false>(w, item, b, hk, W, nc, ahead, k_rows, v_rows, sc);
      return true;
    }
  }
  float* s = sc.s.get();  // S [W × width], row stride kBc
  const bool stream_v = StreamV(w, v_rows), by_dots = ScoresAsDots(w.rows);
  if (by_dots) {
    // K's rows in place when they are whole vectors (converted in registers). V's rows are
    // prefetched here for the product below, unless the product streams them itself.
    const PrefetchV pv = stream_v ? PrefetchV{}
                                            : PrefetchV{reinterpret_cast<const char*>(v_rows.data),
                                                        v_rows.stride * sizeof(VE), static_cast<size_t>(dm.dv) * sizeof(VE)};
    const float* q = sc.q.get() + r0 * p.d_pad;
    if (const InPlaceRows<E> k_rows = RowsInPlace(kv, b, hk, j0, dm.d, L); k_rows.data != nullptr) {
      ScoresByDot(static_cast<size_t>(W), static_cast<size_t>(nc), static_cast<size_t>(dm.d), q,
                  static_cast<size_t>(p.d_pad), k_rows.data, k_rows.stride, s, kBc, pv);
    } else {
      PackRows(kv, b, hk, j0, nc, dm.d, p.d_pad, sc.k.get());
      ScoresByDot(static_cast<size_t>(W), static_cast<size_t>(nc), static_cast<size_t>(p.d_pad), q,
                  static_cast<size_t>(p.d_pad), sc.k.get(), static_cast<size_t>(p.d_pad), s, kBc, pv);
    }
  } else {
    // Sᵀ [nc × w_pad] = K·Qᵀ, K's rows read in place (float32; 16-bit K is converted
    // into scratch first: this path is compute bound), then transposed into S.
    const int64_t w_pad = round_up(W, L);
    const float* k_rows = sc.k.get();
    size_t k_rs = static_cast<size_t>(p.d_pad), k_ks = 1;
    size_t k_prefetchable = 0;  // K's rows the product asks for ahead (KeysTimesQueries)
    if constexpr (std::is_same_v<E, float>) {
      k_rows = kv.row(b, hk, j0), k_rs = static_cast<size_t>(kv.stride(kSeq)), k_ks = static_cast<size_t>(kv.stride(kDim));
      // The first row block asks for them (from memory, in place); the others find them in L2.
      if (r0 == 0) k_prefetchable = static_cast<size_t>(ahead);
    } else {
      PackRows(kv, b, hk, j0, nc, dm.d, p.d_pad, sc.k.get());
    }
    KeysTimesQueries(static_cast<size_t>(nc), static_cast<size_t>(w_pad), static_cast<size_t>(dm.d), k_rows, k_rs,
                     k_ks, sc.q.get() + (r0 / kBr) * dm.d * kBr, sc.st.get(), k_prefetchable);
    TransposeScores(W, nc, w_pad, sc.st.get(), s);
  }
  // Every score of a row involves every K value of the tile, and a NaN or ±inf in K makes
  // the score NaN or ±inf whatever q holds (0·inf is NaN): one row's raw scores check them.
  if (w.kv_suspect != nullptr && !AllFinite(s, nc)) w.kv_suspect->store(true, std::memory_order_relaxed);
  // The per-row softmax step (the tile's padding columns [nc, width) are zero before MaskRow hides them).
  const int64_t row0 = item * w.rows;  // this item's first partial row
  const int64_t width = TileWidth(nc);
  for (int64_t r = 0; r < W; ++r) {
    float* srow = s + r * kBc;
    for (int64_t j = nc; j < width; ++j) srow[j] = 0.0f;
    const int64_t row = r0 + r, h = w.head_of(hk, row), i = w.query_of(row);
    const int64_t at = row0 + row;
    SoftmaxRow(p, b, h, i, j0, nc, w.end[b * dm.Nq + i], w.scale[(b * dm.Hq + h) * dm.Nq + i], srow, w.m[at], w.l[at],
               w.nan_score[at], w.o + at * p.dv_pad, nullptr);
  }
  // O [W × dv_pad] += P [W × nc] · V [nc × dv_pad]
  float* o = w.o + (row0 + r0) * p.dv_pad;
  if (v_rows.data != nullptr) {
    // V in place: streamed (grouped heads decoding), or on the Sᵀ path the first row
    // block asks for the next block's rows (the others find them in L2).
    const VFetch fetch = stream_v              ? VFetch::kStream
                         : !by_dots && r0 == 0 ? VFetch::kNextBlock
                                               : VFetch::kCached;
    ProbsTimesValues(static_cast<size_t>(W), static_cast<size_t>(p.dv_pad), static_cast<size_t>(nc), s, v_rows.data,
                     v_rows.stride, o, fetch);
  } else {
    ProbsTimesValues(static_cast<size_t>(W), static_cast<size_t>(p.dv_pad), static_cast<size_t>(nc), s, sc.v.get(),
                     static_cast<size_t>(p.dv_pad), o);
  }
  return false;
}

// Item `item` of the batch: key/value head kv = b·Hkv + hk, chunk c. Writes its partial.
// E: the element type of q, k, v (float, bfloat16, float16).
template <class E>
void DecodeChunk(const DecodeWork& w, int64_t item, int64_t kv, int64_t c, DecodeScratch& sc) {
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
  // shows in the raw scores (DecodeBlock), one in its V in the O of the rows that used the
  // tile (0·inf is NaN too), checked below. Tiles that no row sees are not otherwise read:
  // they are scanned here. So K and V are read once, not once to check and once to use.
  const bool verify = w.kv_suspect != nullptr;
  const int64_t chunk_end = std::min(dm.Nk, (c + 1) * w.chunk);
  int64_t computed = 0, fused = 0;  // (row block, key tile) pairs, and those fused, for TileCounts
  for (int64_t j0 = c * w.chunk; j0 < (verify ? chunk_end : keys_end); j0 += kBc) {
    const int64_t nc = std::min(kBc, dm.Nk - j0);  // a whole tile (masking hides what lies past keys_end)
    bool used = false;  // V's rows packed (when not read in place) only if some block needs them
    for (int64_t r0 = 0; r0 < w.rows && j0 < keys_end; r0 += kBr) {
      const int64_t W = std::min(kBr, w.rows - r0);
      if (DecodeBlockHidden(w, b, hk, r0, W, j0, nc)) continue;
      const InPlaceRows<E> v_rows = RowsInPlace(p.v.as<E>(), b, hk, j0, dm.dv, kPad);
      if (!used && v_rows.data == nullptr) PackRows(p.v, b, hk, j0, nc, dm.dv, p.dv_pad, sc.v.get());
      used = true;
      fused += DecodeBlock<E>(w, item, b, hk, r0, W, j0, nc, keys_end - j0, v_rows, sc);
      ++computed;
    }
    if (verify && !used && !(RowsFinite(p.k, b, hk, j0, nc, dm.d) && RowsFinite(p.v, b, hk, j0, nc, dm.dv)))
      w.kv_suspect->store(true, std::memory_order_relaxed);
  }
  if (verify && !AllFinite(w.o + row0 * p.dv_pad, w.rows * p.dv_pad)) w.kv_suspect->store(true, std::memory_order_relaxed);
  p.tiles_computed.fetch_add(computed, std::memory_order_relaxed);
  if (fused != 0) {
    tile_counts().decode_fused.fetch_add(fused, std::memory_order_relaxed);
    if (FusedRequestsBesideLoads(p, w.rows)) tile_counts().decode_fused_beside_loads.fetch_add(fused, std::memory_order_relaxed);
    else if (FusedRowOrderVectors<false, E>(p) != 0) tile_counts().decode_fused_row_order.fetch_add(fused, std::memory_order_relaxed);
    if (Bf16DotsApply<E>(p, w.rows)) tile_counts().decode_bf16_dots.fetch_add(fused, std::memory_order_relaxed);
  }
}

// Row r of key/value head kv (batch item kvl): its partials merged in chunk order and
// the finished O and L written (FinishRow's rules for overflowed and empty rows).
void MergeRow(const DecodeWork& w, int64_t kvl, int64_t kv, int64_t r, TensorView<float> out, TensorView<float> lse) {
  const Plan& p = *w.p;
  const auto& dm = p.dims;
  const DF df;
  const size_t L = hn::Lanes(df);
  const int64_t b = kv / dm.Hkv, hk = kv % dm.Hkv, h = w.head_of(hk, r), i = w.query_of(r);
  auto at = [&](int64_t c) { return (kvl * w.n_chunks + c) * w.rows + r; };
  float m = kNegInf;
  bool nan_score = false, nan_m = false;
  for (int64_t c = 0; c < w.n_chunks; ++c) {
    nan_m |= std::isnan(w.m[at(c)]);
    nan_score |= w.nan_score[at(c)];
    m = std::max(m, w.m[at(c)]);
  }
  // A sink is one more logit with no value row (attention_variants.hpp): a partial of its
  // own with m = sink, l = 1, O = 0, merged after the chunks.
  const bool sink = p.sinks;
  if (sink) m = std::max(m, p.sink(h));
  if (nan_m) m = std::numeric_limits<float>::quiet_NaN();
  // The chunks' sums rescaled to the common max, added in chunk order into chunk 0's O.
  float* acc = w.o + at(0) * p.dv_pad;
  float l = 0.0f;
  if (m > kNegInf && m < std::numeric_limits<float>::infinity()) {
    for (int64_t c = 0; c < w.n_chunks; ++c) {
      const float mc = w.m[at(c)];
      const float alpha = mc == m ? 1.0f : mc == kNegInf ? 0.0f : hn::GetLane(ExpNonPositive(df, hn::Set(df, mc - m)));
      l += alpha * w.l[at(c)];
      const float* oc = w.o + at(c) * p.dv_pad;
      const VF va = hn::Set(df, alpha);
      for (size_t col = 0; col < static_cast<size_t>(p.dv_pad); col += L) {
        const VF x = hn::LoadU(df, oc + col);
        hn::StoreU(c == 0 ? hn::Mul(va, x) : hn::MulAdd(va, x, hn::LoadU(df, acc + col)), df, acc + col);
      }
    }
    if (sink) l += hn::GetLane(ExpNonPositive(df, hn::Set(df, p.sink(h) - m)));
  }
  FinishRow(p, b, h, i, m, l, nan_score, acc, out, lse);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_INL_H_
