// The fused decode step over a paged KV cache, one work item (kv_cache_decode.hpp): the
// positions walked 32 at a time through the block table; each K row dequantized in
// registers and dotted with every query row of its head (the K/V head's bytes read once for
// its whole group), the scores treated (scale, softcap, ALiBi, the row's key range), an
// online softmax per row, and each V row dequantized in registers into O += p·v.
// Compiled once per SIMD target and chosen at run time (Highway's dynamic dispatch).
//
// Dequantized values are exactly kv_quantize.cpp's decode_row's on every target (a zero's sign
// aside; test_kv_cache_fused.cpp checks each target and type), so the item computes attention
// over the dequantized cache, in float32.
// int4 is read two codes a byte: one load gives the low nibbles (even channels) and the high
// ones (odd channels), so the queries are permuted to that order for K and O permuted back for V.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/kv_quantize.hpp"
#include "engine/kv_cache_decode.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/kv_cache_decode_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
// FusedLaneSums: the contiguous decode's tree that reduces many keys' lanes at once (the
// header's tile helpers it brings along are unused here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "engine/decode_target-inl.h"
#include "engine/decode_merge-inl.h"  // MergePartials: the decode paths' one merge
#pragma GCC diagnostic pop

#ifndef ATTNLAB_KV_CACHE_DECODE_ONCE
#define ATTNLAB_KV_CACHE_DECODE_ONCE
namespace attnlab::engine {
namespace {
constexpr int64_t kSub = 32;      // positions per step
constexpr int64_t kAskAhead = 64;  // the rows asked for are this many positions on
}  // namespace
}  // namespace attnlab::engine
#endif

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// 2N channels of a row from channel c (a multiple of 2N, inside one group of 32), in the
// type's channel order: a = [c, c + N), b = [c + N, c + 2N); int4: a = the even, b = the odd.
template <CacheType T>
HWY_INLINE void LoadPair(DF df, const std::byte* row, int64_t dim, int64_t c, float head_scale, VF& a, VF& b) {
  const size_t N = hn::Lanes(df);
  if constexpr (T == CacheType::float32) {
    const float* p = reinterpret_cast<const float*>(row) + c;
    a = hn::LoadU(df, p), b = hn::LoadU(df, p + N);
  } else if constexpr (T == CacheType::float16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* p = reinterpret_cast<const hwy::float16_t*>(row) + c;
    a = hn::PromoteTo(df, hn::LoadU(dh, p)), b = hn::PromoteTo(df, hn::LoadU(dh, p + N));
  } else if constexpr (T == CacheType::bfloat16) {  // the float's high half
    const hn::Rebind<uint16_t, DF> dh;
    const hn::RebindToUnsigned<DF> du;
    const auto* p = reinterpret_cast<const uint16_t*>(row) + c;
    a = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, p))));
    b = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, p + N))));
  } else if constexpr (T == CacheType::int8) {
    const hn::Rebind<int8_t, DF> d8;
    const hn::RebindToSigned<DF> di;
    const auto* p = reinterpret_cast<const int8_t*>(row) + c;
    float s;
    std::memcpy(&s, row + dim + 4 * (c / detail::kQuantGroup), 4);
    const VF vs = hn::Set(df, s);
    a = hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p))), vs);
    b = hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p + N))), vs);
  } else if constexpr (T == CacheType::int4) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::RebindToSigned<DF> di;
    const hn::RebindToUnsigned<DF> du;
    const auto* p = reinterpret_cast<const uint8_t*>(row) + c / 2;
    float s;
    std::memcpy(&s, row + (dim + 1) / 2 + 4 * (c / detail::kQuantGroup), 4);
    const VF vs = hn::Set(df, s);
    const auto x = hn::PromoteTo(du, hn::LoadU(d8, p));
    const auto low = hn::BitCast(di, hn::And(x, hn::Set(du, 0xFu))), high = hn::BitCast(di, hn::ShiftRight<4>(x));
#if HWY_NATIVE_FMA
    // (code − 8)·s as code·s − 8s in one fused multiply-add: exact before its one rounding
    // (8s is exact), so decode_row's value, and no integer subtract.
    const VF minus_8s = hn::Set(df, -8.0f * s);
    a = hn::MulAdd(hn::ConvertTo(df, low), vs, minus_8s);
    b = hn::MulAdd(hn::ConvertTo(df, high), vs, minus_8s);
#else
    // Without a fused multiply-add, code·s would round before − 8s: subtract in integers.
    const auto eight = hn::Set(di, 8);
    a = hn::Mul(hn::ConvertTo(df, hn::Sub(low, eight)), vs);
    b = hn::Mul(hn::ConvertTo(df, hn::Sub(high, eight)), vs);
#endif
  } else {  // fp8_e4m3: the code's value times the head's scale
    // e4m3's 7 bits of exponent and mantissa placed in a float16's (sign kept) make a
    // float16 worth the code's value / 256, subnormals included: F16C converts it, the
    // product by 256 is exact, and the value is decode_row's, bit for bit (a table gather
    // a lane was 5× int8's time per byte).
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* p = reinterpret_cast<const uint8_t*>(row) + c;
    auto value = [&](const uint8_t* at) {
      const auto x = hn::PromoteTo(d16, hn::LoadU(d8, at));
      const auto sign = hn::ShiftLeft<8>(hn::And(x, hn::Set(d16, 0x80)));
      const auto h = hn::Or(sign, hn::ShiftLeft<7>(hn::And(x, hn::Set(d16, 0x7F))));
      return hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, h)), hn::Set(df, 256.0f));
    };
    const VF vs = hn::Set(df, head_scale);
    a = hn::Mul(value(p), vs);
    b = hn::Mul(value(p + N), vs);
  }
}

// Where natural channel c sits in the type's channel order (int4 only differs).
inline int64_t ordered(CacheType t, int64_t c, int64_t N) {
  if (t != CacheType::int4) return c;
  const int64_t base = c - c % (2 * N), i = c % (2 * N);
  return base + (i % 2) * N + i / 2;
}

// Asks for row j of the next step's rows (nullptr: none), a line at a time: a head's run of
// a block is a few KiB between other heads' runs, which the CPU's prefetchers do not cross,
// so the block table's next block is asked for while this one is read (row by row: spread).
HWY_INLINE void AskRow(const std::byte* next, int64_t j, int64_t row_bytes) {
  if (next == nullptr) return;
  const std::byte* row = next + j * row_bytes;
  for (int64_t b = 0; b < row_bytes; b += 64) hwy::Prefetch(row + b);
}

// s[r][j] = q_r·k_j for the n keys from `keys` (rows of key_row bytes); q in K's order.
// Each K row is dequantized once for all R rows. A key leaves each row a vector of per-lane
// partial products; FusedLaneSums<2> (decode_target-inl.h, the contiguous decode's tree)
// reduces 16 keys' vectors of a row together, a few shuffles a key where a horizontal sum
// per key and row was ~10 dependent operations, and adds the same pairs as SumOfLanes.
template <int R, CacheType KT>
void Scores(const detail::CacheLayerView& cv, const std::byte* keys, const std::byte* next, int64_t n,
            float head_scale, const float* q, float (*s)[kSub]) {
  const DF df;
  constexpr int64_t G = 16;  // keys per tree: FusedLaneSums<2> sums two rows of 8 keys
  constexpr auto L = static_cast<int64_t>(hn::MaxLanes(DF()));
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  static_assert(kSub % G == 0, "a step holds whole trees");
  HWY_ALIGN float part[R][G * L];
  const int64_t d = cv.head_dim;
  for (int64_t j0 = 0; j0 < n; j0 += G) {
    const int64_t g = std::min(G, n - j0);
    for (int64_t j = 0; j < g; ++j) {
      const std::byte* row = keys + (j0 + j) * cv.key_row;
      AskRow(next, j0 + j, cv.key_row);
      // Two accumulators a row (a's lanes and b's): half the chain of dependent multiply-adds.
      VF acc[R], acc_b[R];
      for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df), acc_b[r] = hn::Zero(df);
      for (int64_t c = 0; c < d; c += 2 * N) {
        VF a, b;
        LoadPair<KT>(df, row, d, c, head_scale, a, b);
        for (int r = 0; r < R; ++r) {
          acc[r] = hn::MulAdd(hn::LoadU(df, q + r * d + c), a, acc[r]);
          acc_b[r] = hn::MulAdd(hn::LoadU(df, q + r * d + c + N), b, acc_b[r]);
        }
      }
      for (int r = 0; r < R; ++r) hn::Store(hn::Add(acc[r], acc_b[r]), df, part[r] + j * N);
    }
    for (int64_t j = g; j < G; ++j)  // a short step's last tree: the keys past n sum to 0
      for (int r = 0; r < R; ++r) hn::Store(hn::Zero(df), df, part[r] + j * N);
    for (int r = 0; r < R; ++r) FusedLaneSums<2>(part[r], s[r] + j0);
  }
}

// O[r][c0, c0 + 2N·P) = corr[r]·O + Σ_j p[r][j]·v_j, the accumulators held in registers.
template <int R, int P, CacheType VT>
HWY_INLINE void CacheValueColumns(const detail::CacheLayerView& cv, const std::byte* values, int64_t n,
                                  float head_scale, const float (*p)[kSub], const float* corr, int64_t c0, float* o) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dv = cv.value_dim;
  VF acc[R][2 * P];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < 2 * P; ++k) acc[r][k] = hn::Mul(hn::LoadU(df, o + r * dv + c0 + k * N), hn::Set(df, corr[r]));
  for (int64_t j = 0; j < n; ++j) {
    const std::byte* row = values + j * cv.value_row;
    VF pr[R];
    for (int r = 0; r < R; ++r) pr[r] = hn::Set(df, p[r][j]);
    for (int k = 0; k < P; ++k) {
      VF a, b;
      LoadPair<VT>(df, row, dv, c0 + 2 * N * k, head_scale, a, b);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * k] = hn::MulAdd(pr[r], a, acc[r][2 * k]);
        acc[r][2 * k + 1] = hn::MulAdd(pr[r], b, acc[r][2 * k + 1]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < 2 * P; ++k) hn::StoreU(acc[r][k], df, o + r * dv + c0 + k * N);
}

template <int R, CacheType VT>
void Values(const detail::CacheLayerView& cv, const std::byte* values, const std::byte* next, int64_t n,
            float head_scale, const float (*p)[kSub], const float* corr, float* o) {
  for (int64_t j = 0; j < n; ++j) AskRow(next, j, cv.value_row);
  // Register blocks of R × 2P vectors: 8 for one row, 16 for 2 to 8.
  constexpr int P = R == 1 ? 4 : R <= 4 ? 2 : 1;
  const auto N = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t c0 = 0;
  for (; c0 + 2 * N * P <= cv.value_dim; c0 += 2 * N * P)
    CacheValueColumns<R, P, VT>(cv, values, n, head_scale, p, corr, c0, o);
  for (; c0 < cv.value_dim; c0 += 2 * N) CacheValueColumns<R, 1, VT>(cv, values, n, head_scale, p, corr, c0, o);
}

template <int R>
using ScoresFn = void (*)(const detail::CacheLayerView&, const std::byte*, const std::byte*, int64_t, float,
                          const float*, float (*)[kSub]);
template <int R>
using ValuesFn = void (*)(const detail::CacheLayerView&, const std::byte*, const std::byte*, int64_t, float,
                          const float (*)[kSub], const float*, float*);

template <int R>
ScoresFn<R> scores_for(CacheType t) {
  switch (t) {
    case CacheType::float32: return &Scores<R, CacheType::float32>;
    case CacheType::bfloat16: return &Scores<R, CacheType::bfloat16>;
    case CacheType::float16: return &Scores<R, CacheType::float16>;
    case CacheType::int8: return &Scores<R, CacheType::int8>;
    case CacheType::int4: return &Scores<R, CacheType::int4>;
    case CacheType::fp8_e4m3: break;
  }
  return &Scores<R, CacheType::fp8_e4m3>;
}

template <int R>
ValuesFn<R> values_for(CacheType t) {
  switch (t) {
    case CacheType::float32: return &Values<R, CacheType::float32>;
    case CacheType::bfloat16: return &Values<R, CacheType::bfloat16>;
    case CacheType::float16: return &Values<R, CacheType::float16>;
    case CacheType::int8: return &Values<R, CacheType::int8>;
    case CacheType::int4: return &Values<R, CacheType::int4>;
    case CacheType::fp8_e4m3: break;
  }
  return &Values<R, CacheType::fp8_e4m3>;
}

// The scores of row r for positions [pos, pos + n) treated in the engine's order (scale,
// softcap, ALiBi, then the row's key range), and their online softmax: p, and the factor
// corr that rescales the row's earlier O and l to the new max.
void Softmax(const CacheDecodeWork& w, int r, int64_t pos, int64_t n, float* s, float* p, float& m, float& l,
             float& corr) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const CacheDecodeRows& rw = *w.queries;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t n_vec = (n + N - 1) / N * N;
  const VF scale = hn::Set(df, rw.scale[r]);
  for (int64_t j = 0; j < n_vec; j += N) hn::StoreU(hn::Mul(hn::LoadU(df, s + j), scale), df, s + j);
  if (w.softcap != 0.0f) {
    const VF cap = hn::Set(df, w.softcap);
    for (int64_t j = 0; j < n_vec; j += N)
      hn::StoreU(hn::Mul(cap, hn::Tanh(df, hn::Div(hn::LoadU(df, s + j), cap))), df, s + j);
  }
  if (rw.slope[r] != 0.0f)
    for (int64_t j = 0; j < n; ++j) s[j] -= rw.slope[r] * static_cast<float>(std::llabs(rw.diag[r] - (pos + j)));
  const int64_t begin = rw.key_begin[r], end = rw.key_end[r];
  if (n < n_vec || pos < begin || pos + n > end)  // lanes past n, or the step crosses the row's key range
    for (int64_t j = 0; j < n_vec; ++j)
      if (j >= n || pos + j < begin || pos + j >= end) s[j] = kNegInf;
  VF vmax = hn::Set(df, kNegInf);
  for (int64_t j = 0; j < n_vec; j += N) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  const float block_max = hn::GetLane(hn::MaxOfLanes(df, vmax));
  if (block_max == kNegInf) {  // the row sees none of these positions
    corr = 1.0f;
    for (int64_t j = 0; j < n_vec; ++j) p[j] = 0.0f;
    return;
  }
  const float m_new = std::max(m, block_max);
  corr = m == kNegInf ? 0.0f : std::exp(m - m_new);
  m = m_new;
  VF sum = hn::Zero(df);
  const VF vm = hn::Set(df, m_new), neg_inf = hn::Set(df, kNegInf);
  for (int64_t j = 0; j < n_vec; j += N) {
    const VF x = hn::LoadU(df, s + j);
    const VF e = hn::IfThenElseZero(hn::Gt(x, neg_inf), hn::Exp(df, hn::Sub(x, vm)));
    hn::StoreU(e, df, p + j);
    sum = hn::Add(sum, e);
  }
  l = l * corr + hn::GetLane(hn::SumOfLanes(df, sum));
}

template <int R>
void ChunkRows(const CacheDecodeWork& w) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const detail::CacheLayerView& cv = *w.cache;
  const CacheDecodeRows& rw = *w.queries;
  const int64_t d = cv.head_dim, dv = cv.value_dim, T = cv.block_tokens;
  const ScoresFn<R> scores = scores_for<R>(cv.key_type);
  const ValuesFn<R> values = values_for<R>(cv.value_type);
  const float k_scale = cv.key_scales[w.head], v_scale = cv.value_scales[w.head];
  HWY_ALIGN float q[R * kCacheFusedMaxDim], o[R * kCacheFusedMaxDim];
  HWY_ALIGN float s[R][kSub], p[R][kSub];
  float m[R], l[R], corr[R];
  for (int r = 0; r < R; ++r) {
    for (int64_t c = 0; c < d; ++c) q[r * d + ordered(cv.key_type, c, N)] = r < rw.rows ? rw.q[r * d + c] : 0.0f;
    for (int64_t c = 0; c < dv; ++c) o[r * dv + c] = 0.0f;
    for (int64_t j = 0; j < kSub; ++j) p[r][j] = 0.0f;
    m[r] = -std::numeric_limits<float>::infinity(), l[r] = 0.0f, corr[r] = 1.0f;
  }
  const bool ask_k = cache_rows_asked_ahead(cv.key_row), ask_v = cache_rows_asked_ahead(cv.value_row);
  for (int64_t pos = w.key_begin; pos < w.key_end;) {
    const int32_t block = w.blocks[pos / T];
    const int64_t t0 = pos % T, n = std::min({kSub, T - t0, w.key_end - pos});
    // The rows kAskAhead positions on, asked for beside this step's (when a whole step), if
    // they are short (cache_rows_asked_ahead).
    const int64_t ahead = pos + kAskAhead;
    const bool ask = ahead + kSub <= w.key_end && n == kSub;
    const int32_t next_block = ask ? w.blocks[ahead / T] : 0;
    const std::byte* k_next = ask && ask_k ? cv.keys(next_block, w.head) + ahead % T * cv.key_row : nullptr;
    const std::byte* v_next = ask && ask_v ? cv.values(next_block, w.head) + ahead % T * cv.value_row : nullptr;
    scores(cv, cv.keys(block, w.head) + t0 * cv.key_row, k_next, n, k_scale, q, s);
    for (int r = 0; r < rw.rows; ++r) Softmax(w, r, pos, n, s[r], p[r], m[r], l[r], corr[r]);
    values(cv, cv.values(block, w.head) + t0 * cv.value_row, v_next, n, v_scale, p, corr, o);
    pos += n;
  }
  for (int r = 0; r < rw.rows; ++r) {
    w.m[r] = m[r], w.l[r] = l[r];
    for (int64_t c = 0; c < dv; ++c) w.acc[r * dv + c] = o[r * dv + ordered(cv.value_type, c, N)];
  }
}

}  // namespace

MergedRow CacheMergeRow(int64_t n_chunks, const float* m, const float* l, int64_t stride, const float* acc,
                        int64_t acc_stride, int64_t value_dim, float sink, float* row) {
  return MergePartials(n_chunks, m, l, stride, acc, acc_stride, value_dim, sink, row);
}

void CacheDecodeChunk(const CacheDecodeWork& w) {
  const int rows = w.queries->rows;
  if (rows <= 1) return ChunkRows<1>(w);
  if (rows <= 2) return ChunkRows<2>(w);
  if (rows <= 4) return ChunkRows<4>(w);
  ChunkRows<8>(w);
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {
HWY_EXPORT(CacheDecodeChunk);
HWY_EXPORT(CacheMergeRow);
void cache_decode_chunk(const CacheDecodeWork& w) { HWY_DYNAMIC_DISPATCH(CacheDecodeChunk)(w); }
MergedRow cache_merge_row(int64_t n_chunks, const float* m, const float* l, int64_t stride, const float* acc,
                               int64_t acc_stride, int64_t value_dim, float sink, float* row) {
  return HWY_DYNAMIC_DISPATCH(CacheMergeRow)(n_chunks, m, l, stride, acc, acc_stride, value_dim, sink, row);
}
}  // namespace attnlab::engine
#endif
