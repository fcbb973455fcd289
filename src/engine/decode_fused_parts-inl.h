// The fused decoding step's parts (decode_fused-inl.h puts them together): the scores of
// R rows against a block of 8 keys and O += P·V for that block, each in two reading
// orders (with requests spread over the block or beside the loads; or in row order, with
// the CPU's prefetchers alone), and the scores on VDPBF16PS for a bfloat16 cache. Every
// variant of a part takes the same FMAs in the same order: the results are bitwise the
// same whichever runs. Included once per SIMD target.
#if defined(ATTNLAB_ENGINE_DECODE_FUSED_PARTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_DECODE_FUSED_PARTS_INL_H_
#undef ATTNLAB_ENGINE_DECODE_FUSED_PARTS_INL_H_
#else
#define ATTNLAB_ENGINE_DECODE_FUSED_PARTS_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "engine/decode_strategy.hpp"
#include "engine/decode_target-inl.h"
#include "engine/row_codec-inl.h"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// Keys per block of the fused step, and how far ahead its requests go: 16 keys into L2
// (gained at every d where 8 lost at d = 64), 8 into L1.
inline constexpr size_t kFusedKeys = static_cast<size_t>(kFusedBlockKeys), kFusedAhead = DecodeTarget::avx512 ? 16 : 8;

// Asks for a run of rows line by line, a few lines per call: rows [0, rows) at
// base + row·stride, `lines` 64-byte lines each. Called once per column block of the
// product (and on AVX-512 per group of keys of the scores), not per key: a cursor step
// per key cost a quarter of the product's instructions. The loop's own instructions
// space the requests out.
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
  // Beside a load: the line `byte` bytes into row `r`. With no rows to ask for (the item's
  // last keys) base is the current block's, already in cache, so the loads need no branch.
  HWY_INLINE void At(size_t r, size_t byte) const { PrefetchLine(base + r * stride + byte); }
};

// FusedScores' NP vectors of columns from c for keys [j0, j0 + KB): each key's loaded (a pair
// at once where the codec loads pairs), then each row's multiply-adds in column order.
template <int R, int KB, int NP, bool kBesideLoads, class KE>
HWY_INLINE void ScoreColumns(size_t c, const float* HWY_RESTRICT q, size_t q_rs, const RowCodec<KE>& kc,
                             const KE* HWY_RESTRICT k, size_t k_rs, size_t j0, LinePrefetcher& kpf, VF (&acc)[R][KB]) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF kv[KB][NP];
  for (int j = 0; j < KB; ++j) {
    const KE* row = k + (j0 + j) * k_rs;
    if constexpr (NP == 2) kc.LoadTwo(row, c, kv[j][0], kv[j][1]);
    else kv[j][0] = kc.Load(row, c);
    if constexpr (kBesideLoads) kpf.At(j0 + j, kc.AskedByte(c + (NP - 1) * L));
    for (int u = 0; u < NP; ++u) KeepInRegister(kv[j][u]);
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < NP; ++u) {
      VF qv = hn::LoadU(df, q + r * q_rs + c + u * L);
      KeepInRegister(qv);
      for (int j = 0; j < KB; ++j) acc[r][j] = hn::MulAdd(qv, kv[j][u], acc[r][j]);
    }
}

// The raw scores of R rows against keys [0, kFusedKeys) of k (row stride k_rs): dot
// products over `cols` values (whole vectors), KB keys at a time, reduced across lanes
// into s[r · kFusedKeys + j]. With kBesideLoads, asks kpf for the line of K ahead beside
// each K vector it loads; else, on AVX-512, `per_group` lines of each prefetcher as each
// group of keys starts (the product's column blocks alone asked for too many at once).
template <int R, int KB, bool kBesideLoads, class KE>
HWY_INLINE void FusedScores(size_t cols, const float* HWY_RESTRICT q, size_t q_rs, const RowCodec<KE>& kc,
                            const KE* HWY_RESTRICT k, size_t k_rs, float* HWY_RESTRICT s, size_t per_group,
                            LinePrefetcher& kpf, LinePrefetcher& vpf) {
  const DF df;
  const size_t L = hn::Lanes(df);
  HWY_ALIGN float acc_out[R * kFusedKeys * (HWY_MAX_BYTES / sizeof(float))];  // [R][kFusedKeys][L]
  for (size_t j0 = 0; j0 < kFusedKeys; j0 += KB) {
    if constexpr (DecodeTarget::avx512 && !kBesideLoads) {
      kpf.Next(per_group);
      vpf.Next(per_group);
    }
    VF acc[R][KB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) acc[r][j] = hn::Zero(df);
    size_t c = 0;
    if constexpr (RowCodec<KE>::kLoadsPairs)
      for (; c + 2 * L <= cols; c += 2 * L) ScoreColumns<R, KB, 2, kBesideLoads>(c, q, q_rs, kc, k, k_rs, j0, kpf, acc);
    for (; c < cols; c += L) ScoreColumns<R, KB, 1, kBesideLoads>(c, q, q_rs, kc, k, k_rs, j0, kpf, acc);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) hn::Store(acc[r][j], df, acc_out + (r * kFusedKeys + j0 + j) * L);
  }
  FusedLaneSums<R>(acc_out, s);
}

// FusedScores for a bfloat16 cache on VDPBF16PS (AVX-512 with AVX512_BF16): K loaded as
// stored, no conversion, half the loads per multiply-add. A product of two bfloat16 values
// is exact in float32 and each is added with one rounding, so the scores are float32 sums
// of the exact products in another order (lane i holds columns 2i and 2i + 1 of each 32;
// inputs below float's normal range taken as zero): the accuracy rule holds, not bit
// equality with the float32 engine. q: the rows' queries as bfloat16 bits; cols a whole
// number of 32.
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
    Bf16Acc acc[R][KB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) acc[r][j] = ZeroBf16Acc();
    for (size_t c = 0; c < cols; c += kPairs) {
      Bf16Pairs kv[KB];
      for (int j = 0; j < KB; ++j) {
        kv[j] = LoadBf16Pairs(k + (j0 + j) * k_rs + c);
        if constexpr (kBesideLoads) kpf.At(j0 + j, c * sizeof(bfloat16));  // a vector is a line
      }
      for (int r = 0; r < R; ++r) {
        const Bf16Pairs qv = LoadBf16Pairs(q + r * q_rs + c);
        for (int j = 0; j < KB; ++j) acc[r][j] = DotPairsBf16(acc[r][j], qv, kv[j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < KB; ++j) StoreBf16Acc(acc[r][j], acc_out + (r * kFusedKeys + j0 + j) * L);
  }
  FusedLaneSums<R>(acc_out, s);
}

// FusedScoresOnBf16Dots in row order: each key's row of K loaded whole (NP vectors of 32
// values), then its dot products, one accumulator per row; the same chain over c.
template <int R, int NP>
HWY_INLINE void FusedScoresOnBf16DotsInRowOrder(const uint16_t* HWY_RESTRICT q, size_t q_rs,
                                                const bfloat16* HWY_RESTRICT k, size_t k_rs, float* HWY_RESTRICT s) {
  constexpr size_t L = 16, kPairs = 32;
  HWY_ALIGN float acc_out[R * kFusedKeys * L];
  for (size_t j = 0; j < kFusedKeys; ++j) {
    Bf16Pairs kv[NP];
    for (int c = 0; c < NP; ++c) kv[c] = LoadBf16Pairs(k + j * k_rs + c * kPairs);
    Bf16Acc acc[R];
    for (int r = 0; r < R; ++r) acc[r] = ZeroBf16Acc();
    for (int c = 0; c < NP; ++c)
      for (int r = 0; r < R; ++r) acc[r] = DotPairsBf16(acc[r], LoadBf16Pairs(q + r * q_rs + c * kPairs), kv[c]);
    for (int r = 0; r < R; ++r) StoreBf16Acc(acc[r], acc_out + (r * kFusedKeys + j) * L);
  }
  FusedLaneSums<R>(acc_out, s);
}

// O [R × dv_pad] += P [R × kFusedKeys] · V [kFusedKeys × dv_pad] for the columns from c
// on, NV vectors of columns at a time, asking `per_block` lines of each prefetcher as
// each column block starts, or with kBesideLoads vpf's line of V ahead beside each load.
template <int R, int NV, bool kBesideLoads, class VE>
HWY_INLINE void FusedValues(size_t c, size_t dv_pad, const float* HWY_RESTRICT p, const RowCodec<VE>& vc,
                            const VE* HWY_RESTRICT v, size_t v_rs, float* HWY_RESTRICT o, size_t per_block,
                            LinePrefetcher& kpf, LinePrefetcher& vpf) {
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
        if constexpr (RowCodec<VE>::kLoadsPairs) {  // a pair at once, the last odd one alone
          if (u % 2 == 1) continue;
          if (u + 1 < NV) vc.LoadTwo(v + j * v_rs, c + u * L, vv[u], vv[u + 1]);
          else vv[u] = vc.Load(v + j * v_rs, c + u * L);
        } else {
          vv[u] = vc.Load(v + j * v_rs, c + u * L);
        }
        if constexpr (kBesideLoads) vpf.At(j, vc.AskedByte(c + u * L));
        KeepInRegister(vv[u]);
      }
      if constexpr (RowCodec<VE>::kLoadsPairs)
        for (int u = 1; u < NV; u += 2) KeepInRegister(vv[u]);
      for (int r = 0; r < R; ++r) {
        const VF pr = hn::Set(df, p[r * kFusedKeys + j]);
        for (int u = 0; u < NV; ++u) acc[r][u] = hn::MulAdd(pr, vv[u], acc[r][u]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < NV; ++u) hn::StoreU(acc[r][u], df, o + r * dv_pad + c + u * L);
  }
  if constexpr (NV > 1)
    if (c < dv_pad) FusedValues<R, 1, kBesideLoads>(c, dv_pad, p, vc, v, v_rs, o, per_block, kpf, vpf);
}

// Row order. A prefetcher follows a stream of lines whose first use goes up the
// addresses; FusedScores takes two keys' rows a vector of each at a time and FusedValues
// each column block down the block's rows, which is no such stream. In row order each
// key's K row is loaded whole, then V's rows in order, and the CPU's prefetchers run
// ahead of the step further than its requests did (rows of 4 or 8 vectors).
//
// From kQueriesHeldMinRows rows (decode_strategy.hpp) the scores take groups of rows whose queries stay in
// kGroupRegisters registers while the block's keys pass (loading each key's row and every
// row's queries costs R·NC loads of Q per key, and a 512-bit load issues no faster than
// an FMA), and the product holds a group's rows of O in as many accumulators.
inline constexpr int kGroupRegisters = 24;

// group(r0, integral_constant<int, GR>) for R rows in groups of G from row 0.
template <int R, int G, class Group>
HWY_INLINE void ForRowGroups(const Group& group) {
  int r0 = 0;
  for (; r0 + G <= R; r0 += G) group(r0, std::integral_constant<int, G>());
  if constexpr (R % G != 0) group(r0, std::integral_constant<int, R % G>());
}

// FusedScores in row order (NC vectors per K row): each score the same chain of FMAs over
// c as FusedScores' (from zero, c ascending).
template <int R, int NC, class KE>
HWY_INLINE void FusedScoresInRowOrder(const float* HWY_RESTRICT q, size_t q_rs, const KE* HWY_RESTRICT k, size_t k_rs,
                                      float* HWY_RESTRICT s) {
  const DF df;
  constexpr size_t L = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float acc_out[R * kFusedKeys * L];  // [R][kFusedKeys][L], reduced together
  if constexpr (R >= kQueriesHeldMinRows) {
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

// FusedValues in row order (NV vectors per V row): G rows of O with all their columns in
// registers (16 accumulators; kGroupRegisters from kQueriesHeldMinRows rows, each V vector
// then kept in a register for the group), V's rows in order; later groups read the
// block's V again from L1. Each element of O adds the keys in FusedValues' order.
template <int R, int NV, class VE>
HWY_INLINE void FusedValuesInRowOrder(const float* HWY_RESTRICT p, const VE* HWY_RESTRICT v, size_t v_rs,
                                      float* HWY_RESTRICT o) {
  const DF df;
  constexpr size_t L = HWY_MAX_BYTES / sizeof(float);
  constexpr bool kMany = R >= kQueriesHeldMinRows;
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
        if constexpr (kMany && GR > 1) KeepInRegister(vv);
        for (int r = 0; r < GR; ++r) acc[r][u] = hn::MulAdd(pr[r], vv, acc[r][u]);
      }
    }
    for (int r = 0; r < GR; ++r)
      for (int u = 0; u < NV; ++u) hn::StoreU(acc[r][u], df, o + (r0 + r) * NV * L + u * L);
  };
  ForRowGroups<R, G>(group);
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_DECODE_FUSED_PARTS_INL_H_
