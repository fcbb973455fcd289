// Per-target tile operations shared by the forward and the backward kernels: tile
// widths, aligned scratch, packing of strided rows into unit-stride padded tiles, the
// treatment of one row of scores (MaskRow: scale, softcap, ALiBi, score_mod, additive
// and boolean masks, mask_mod, the key range) and dropout on a row of probabilities.
// Included once per SIMD target by every TU that compiles kernels (hence the toggle guard).
#if defined(ATTNLAB_ENGINE_TILE_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_TILE_OPS_INL_H_
#undef ATTNLAB_ENGINE_TILE_OPS_INL_H_
#else
#define ATTNLAB_ENGINE_TILE_OPS_INL_H_
#endif

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "attnlab/error.hpp"

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "engine/bf16_products.hpp"
#include "engine/gemm-inl.h"  // DF, VF
#include "engine/plan.hpp"
#include "engine/scratch_cache.hpp"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {


constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Columns of a key tile with nc keys that the products and the softmax touch:
// nc rounded up to whole vectors, not kBc, so that short sequences (the
// training study's N = 16…64) do not pay for a full tile of padding.
int64_t TileWidth(int64_t nc) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  return std::min(kBc, (nc + L - 1) / L * L);
}

// Whether this target computes the products of bfloat16 inputs on VDPBF16PS
// (bf16_products.hpp) where the plan allows it: the AVX-512 targets, whose rows of 16
// floats the pair layout is made for. Every other target keeps the float32 products.
HWY_INLINE bool Bf16Products(const Plan& p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return p.bf16_products;
#else
  (void)p;
  return false;
#endif
}

// Row strides (bf16::pair_row_stride) of a tile of nc keys packed transposed as pairs of
// `dims` dims (Kᵀ for S = Q·Kᵀ, Vᵀ for dP = dO·Vᵀ), and of `cols` columns packed as pairs of
// rows (V for O += P·V, K for dQ += dS·K): padded where the room laid out for float32 holds
// it, ceil(dims/2) rows of TileWidth + 16 words in dims·TileWidth floats (a whole tile,
// dims ≥ 2), and kBc/2 rows of cols_pad + 16 in a tile's kBc·cols_pad floats.
HWY_INLINE int64_t TransposedPairStride(int64_t nc, int64_t dims) {
  return bf16::pair_row_stride(TileWidth(nc), TileWidth(nc) == kBc && dims >= 2);
}
HWY_INLINE int64_t RowPairStride(int64_t cols_pad) { return bf16::pair_row_stride(cols_pad, true); }
HWY_INLINE int64_t KtPairStride(const Plan& p, int64_t nc) { return TransposedPairStride(nc, p.dims.d); }
HWY_INLINE int64_t VPairStride(const Plan& p) { return RowPairStride(p.dv_pad); }

// A working buffer of n floats, from the engine's cache (scratch_cache.hpp). Out of
// memory is an OutOfMemory error naming the size, never an abort. Inside a parallel
// region the caller must catch it (ScratchFailure): an exception may not leave an
// OpenMP region.
ScratchBuffer<float> Scratch(int64_t n) {
  const size_t count = static_cast<size_t>(std::max<int64_t>(n, 1));
  auto p = acquire_scratch_of<float>(count);
  if (!p)
    throw OutOfMemory(fmt::format("attention: out of memory allocating a working buffer of {} bytes ({:.1f} MiB)",
                                  count * sizeof(float), static_cast<double>(count * sizeof(float)) / (1 << 20)));
  return p;
}

// n random words (dropout), as Scratch.
ScratchBuffer<uint32_t> ScratchWords(int64_t n) {
  auto p = acquire_scratch_of<uint32_t>(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (!p) throw OutOfMemory(fmt::format("attention: out of memory allocating a working buffer of {} bytes", n * 4));
  return p;
}

// Per-thread scratch built inside an OpenMP region: a thread whose allocation failed
// records the error and skips its share of the work; rethrow() after the region.
struct ScratchFailure {
  std::atomic<bool> failed{false};
  std::string message;
  template <class S>
  std::optional<S> make(const Plan& p) {
    try {
      return std::optional<S>(std::in_place, p);
    } catch (const std::exception& e) {
#pragma omp critical(attnlab_scratch_failure)
      if (!failed.exchange(true)) message = e.what();
      return std::nullopt;
    }
  }
  void rethrow() const {
    if (failed.load()) throw OutOfMemory(message);
  }
};

// 16-bit inputs (plan.hpp's Operand): converted to float32 where they are loaded
// (LoadAsFloat, gemm-inl.h, for vectors).
template <class E>
HWY_INLINE float ToFloat(E x) {
  if constexpr (std::is_same_v<E, float>) {
    return x;
  } else {
    return x.to_float();
  }
}

// dst[c] = float(src[c]) for c < n (src unit-stride).
template <class E>
void ConvertRow(const E* src, int64_t n, float* dst) {
  if constexpr (std::is_same_v<E, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    const DF df;
    const auto L = static_cast<int64_t>(hn::Lanes(df));
    int64_t c = 0;
    for (; c + L <= n; c += L) hn::StoreU(LoadAsFloat(src + c), df, dst + c);
    for (; c < n; ++c) dst[c] = ToFloat(src[c]);
  }
}

// Calls f(view) with the Operand's view of its own element type.
template <class F>
HWY_INLINE void WithElementType(const Operand& x, F&& f) {
  switch (x.type()) {
    case ElementType::f32: return f(x.as<float>());
    case ElementType::bf16: return f(x.as<bfloat16>());
    case ElementType::f16: return f(x.as<float16>());
  }
}

// dst[r · dst_stride + c] = src row r, element c, for r < rows, c < cols;
// zero for c in [cols, padded_cols). Rows come from a strided view (converted to float).
template <class E>
void PackRows(ConstView<E> x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
              int64_t padded_cols, float* dst) {
  const int64_t st = x.stride(Axis::dim);
  for (int64_t r = 0; r < rows; ++r) {
    const E* src = x.row(b, h, r0 + r);
    float* d = dst + r * padded_cols;
    if (st == 1) {
      ConvertRow(src, cols, d);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = ToFloat(src[c * st]);
    }
    for (int64_t c = cols; c < padded_cols; ++c) d[c] = 0.0f;
  }
}
void PackRows(const Operand& x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols, int64_t padded_cols,
              float* dst) {
  WithElementType(x, [&](auto view) { PackRows(view, b, h, r0, rows, cols, padded_cols, dst); });
}

// Rows [r0, r0 + rows) of x as a B operand of the products (vector loads): x's
// own memory when it is float32, its rows unit-stride and a whole number of vectors
// long, else a padded float copy in `scratch`. Sets `row_stride`.
const float* RowsOperand(const Operand& x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                         int64_t padded_cols, float* scratch, size_t& row_stride) {
  if (x.is_f32() && x.stride(Axis::dim) == 1 && cols == padded_cols) {
    row_stride = static_cast<size_t>(x.stride(Axis::seq));
    return x.f32().row(b, h, r0);
  }
  PackRows(x, b, h, r0, rows, cols, padded_cols, scratch);
  row_stride = static_cast<size_t>(padded_cols);
  return scratch;
}

// dst[c · w + j] = x[b, h, j0 + j, c] for j < n, zero for j in [n, w), where
// w = TileWidth(n): the transposed key tile [cols × w]. Every tile but the last
// has w = kBc; a short last tile is stored narrow, so that a short sequence
// with a large head dim (the training study: N = 16, d = 1024) packs and
// touches d·16 floats per head, not d·kBc.
template <class E>
void PackTransposed(ConstView<E> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols, float* dst) {
  const int64_t w = TileWidth(n);
  // Writes run along dst rows (contiguous), reads gather down the key rows: a
  // scattered write per element cost the forward measurably more.
  const int64_t st = x.stride(Axis::dim), rs = x.stride(Axis::seq);
  const E* src = n > 0 ? x.row(b, h, j0) : nullptr;
  // Eight key rows at a time: their cache lines stay in L1 while every column is read from
  // them, also when the rows are 4 KiB apart (heads interleaved in a [B·N, H·d] buffer) and
  // would otherwise share one cache set and evict one another.
  constexpr int64_t kRows = 8;
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    for (int64_t c = 0; c < cols; ++c) {
      float* d = dst + c * w;
      for (int64_t j = r0; j < r1; ++j) d[j] = ToFloat(src[j * rs + c * st]);
    }
  }
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t j = n; j < w; ++j) dst[c * w + j] = 0.0f;
}
void PackTransposed(const Operand& x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols, float* dst) {
  WithElementType(x, [&](auto view) { PackTransposed(view, b, h, j0, n, cols, dst); });
}

// One row's part in a tile's score treatment (MaskRow): where it is, which keys of the
// tile it sees, and the parameters of attention_variants.hpp that vary by row.
struct RowTreatment {
  int64_t b = 0, h = 0, i = 0;
  int64_t lo = 0, hi = 0;  // keys [lo, hi) of the tile (relative to its first key) are in the row's key range
  int64_t diag = 0;        // the row's diagonal as a key index (ALiBi)
  float slope = 0;         // ALiBi's slope, 0 without
  float scale = 0;         // scale_i
  float offset = 0;        // subtracted last: 0 in the forward, L_i in the backward
  bool mask_mod = false;   // evaluate mask_mod (the tile is partial in the BlockMask)
  // Mark +inf and NaN scores even without a treatment (the backward: see MaskRow).
  bool check_overflow = false;
};

float RowMax(const float* s, int64_t width);

// tanh for softcap's c·tanh(s/c). Softcaps are chosen above the scores (Gemma 2 uses 50),
// so y = s/c is nearly always small: where every lane has |y| < 1/2, tanh's Maclaurin
// series through y¹⁵ (truncation below 1e-8 relative there; no division, 9 operations)
// is evaluated, and otherwise Highway's Tanh (expm1 and a division, about 3 times the
// cost). Both are within 2 float ulps of tanh (EngineTanh); the forward and the
// backward group a row's keys into the same vectors, so they take the same branch.
template <class D, class V>
HWY_INLINE V SoftcapTanh(D d, V y) {
  const V y2 = hn::Mul(y, y);
  if (!hn::AllTrue(d, hn::Lt(y2, hn::Set(d, 0.25f)))) return hn::Tanh(d, y);
  // tanh y = y + y³·P(y²), P(z) = −1/3 + 2/15 z − 17/315 z² + 62/2835 z³ − 1382/155925 z⁴
  //                               + 21844/6081075 z⁵ − 929569/638512875 z⁶  (Bernoulli numbers)
  V p = hn::Set(d, static_cast<float>(-929569.0 / 638512875.0));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(21844.0 / 6081075.0)));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(-1382.0 / 155925.0)));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(62.0 / 2835.0)));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(-17.0 / 315.0)));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(2.0 / 15.0)));
  p = hn::MulAdd(p, y2, hn::Set(d, static_cast<float>(-1.0 / 3.0)));
  return hn::MulAdd(hn::Mul(y, y2), p, y);
}

// a·b rounded to float, as a value that nothing is fused into. The C++ compilers contract
// hn::Sub(hn::Mul(a, b), c) into one fused multiply-subtract by default (GCC's
// -ffp-contract=fast outside ISO C), which rounds scale·S − L once: the backward's S − L at
// a one-hot row's max was then a rounding residue, not 0, and P not 1, in about half of
// such rows (dV of the max key ≠ ΣdO, 143 of 300 random rows), against the forward's
// max of scale·S rounded alone. The empty asm makes the product a value the compiler must
// produce as it is.
HWY_INLINE VF RoundedProduct(VF a, VF b) {
  VF x = hn::Mul(a, b);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(x.raw));
#elif defined(__GNUC__) || defined(__clang__)
  asm("" : "+m"(x));
#endif
  return x;
}

// Turns a raw row of q·k products (keys j0 … j0 + width, width a whole number of
// vectors) into the row's scores minus `offset`, in the order of
// attention_variants.hpp: the scale, softcap, ALiBi, score_mod, the additive mask;
// keys outside [lo, hi) (the row's key range, the tile's tail) and keys the boolean
// mask or mask_mod hide become −inf; a visible score that overflowed float32 becomes
// NaN, and the row's max then NaN. dmod, if given, receives ∂score/∂(scale·q·k) for
// the backward (through softcap and score_mod; 1 without them). Returns the row's max
// (−inf if nothing is visible). The row's stride stays kBc. Shared by the forward and
// backward tiles (and any kernel that needs a row of scores), so that every path
// rounds alike.
float MaskRow(const Plan& p, const RowTreatment& r, int64_t j0, int64_t width, float* s, float* dmod) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const AttentionOptions<float>& o = *p.options;
  const float* am = detail::mask_row(o.additive_mask, r.b, r.h, r.i);
  // Scores that change after the scale (softcap, ALiBi) or per element (score_mod, the additive
  // mask) take the backward's offset last, in the forward's order of roundings (its max is of
  // the final scores): not one fused multiply-subtract, so that S − L is exactly 0 at a one-hot
  // row's max (P = 1, as in the forward), not a rounding residue.
  const bool treated = p.softcap != 0.0f || r.slope != 0.0f;
  const bool late_offset = treated || am != nullptr || p.score_mod != nullptr;
  const VF vscale = hn::Set(df, r.scale), vlo = hn::Set(df, static_cast<float>(r.lo)),
           vhi = hn::Set(df, static_cast<float>(r.hi)), vninf = hn::Set(df, kNegInf), one = hn::Set(df, 1.0f);
  const VF voff = hn::Set(df, late_offset ? 0.0f : r.offset);
  const VF vcap = hn::Set(df, p.softcap), vinv_cap = hn::Set(df, p.softcap != 0 ? 1.0f / p.softcap : 0.0f);
  const VF vslope = hn::Set(df, r.slope), vdiag = hn::Set(df, static_cast<float>(r.diag - j0));
  VF vmax = vninf;
  // The key range and the softcap test in locals (the stores to s may alias r and p for
  // the compiler, which then loaded them again for every vector), and the keys' positions
  // formed only where ALiBi or a partly hidden vector needs them: what the variants
  // cost the plain forward (docs/engine.md, "Variants") is mostly this row pass.
  const int64_t lo = r.lo, hi = r.hi;
  const bool softcap = p.softcap != 0.0f;
  // A score that overflowed float32 (±inf, or NaN from inf − inf in the dot product) has no
  // answer in float: it must reach the softmax as NaN, which logs the row, before anything
  // can make it look plausible. Softcap's c·tanh(±inf) = ±c, ALiBi or a score_mod would,
  // so with them every non-finite score is marked; the backward's exp(min(S − L, 0)) would
  // make +inf or NaN a probability of 1, so it marks those; and a tile of a row whose
  // scores are all −inf would pass for masked keys (only a mask makes −inf), so all are
  // marked. −inf beside finite scores is a probability of 0, as in the reference. Marked
  // keys a mask hides stay hidden.
  const bool mark_nonfinite = treated || p.score_mod != nullptr;
  const bool mark_above = mark_nonfinite || r.check_overflow;
  const VF vinf = hn::Set(df, std::numeric_limits<float>::infinity());
  bool overflowed = false;
  uint8_t overflow_at[kBc];
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
    VF x = hn::Sub(RoundedProduct(hn::LoadU(df, s + j), vscale), voff);
    if (mark_above && !hn::AllTrue(df, mark_nonfinite ? hn::IsFinite(x) : hn::Lt(x, vinf))) {
      if (!overflowed) std::fill(overflow_at, overflow_at + width, uint8_t{0});
      overflowed = true;
      alignas(64) float lanes[hn::MaxLanes(df)];
      hn::Store(x, df, lanes);
      for (size_t lane = 0; lane < L; ++lane)
        overflow_at[j + lane] = mark_nonfinite ? !std::isfinite(lanes[lane]) : !(lanes[lane] < INFINITY);
    }
    if (treated) {
      const VF pos = hn::Iota(df, static_cast<float>(j));
      VF dx = one;
      if (softcap) {  // c·tanh(x/c), and its derivative 1 − tanh²
        // x·(1/c), unless 1/c is subnormal (c > 8.5e37): then a true division.
        const VF t = SoftcapTanh(df, p.softcap_reciprocal ? hn::Mul(x, vinv_cap) : hn::Div(x, vcap));
        x = hn::Mul(vcap, t);
        dx = hn::NegMulAdd(t, t, one);
      }
      if (r.slope != 0.0f) x = hn::NegMulAdd(vslope, hn::Abs(hn::Sub(vdiag, pos)), x);  // − slope·|diag − j|
      if (dmod != nullptr) hn::StoreU(dx, df, dmod + j);
    } else if (dmod != nullptr) {
      hn::StoreU(one, df, dmod + j);
    }
    if (static_cast<int64_t>(j) < lo || static_cast<int64_t>(j + L) > hi) {
      const VF pos = hn::Iota(df, static_cast<float>(j));
      x = hn::IfThenElse(hn::And(hn::Ge(pos, vlo), hn::Lt(pos, vhi)), x, vninf);
    }
    vmax = hn::Max(vmax, x);
    hn::StoreU(x, df, s + j);
  }
  const int64_t n = r.hi - r.lo;
  if (n <= 0) return kNegInf;
  const float vector_max = hn::GetLane(hn::MaxOfLanes(df, vmax));
  if (!(vector_max > kNegInf)) {  // every key of the range −inf (or NaN) before the masks
    if (!overflowed) std::fill(overflow_at, overflow_at + width, uint8_t{0});
    overflowed = true;
    std::fill(overflow_at + lo, overflow_at + hi, uint8_t{1});
  }
  if (p.score_mod != nullptr) {
    if (dmod == nullptr) {
      p.score_mod->score_row(r.b, r.h, r.i, j0 + r.lo, n, s + r.lo);
    } else {
      float ds[kBc];
      p.score_mod->score_row(r.b, r.h, r.i, j0 + r.lo, n, s + r.lo, ds);
      for (int64_t j = 0; j < n; ++j) dmod[r.lo + j] *= ds[j];
    }
  }
  const uint8_t* bm = detail::mask_row(o.bool_mask, r.b, r.h, r.i);
  // The additive mask, the boolean mask and mask_mod on keys [lo, hi) of a row.
  auto apply_masks = [&](float* row) {
    if (am != nullptr) {
      const int64_t st = o.additive_mask.stride(Axis::dim);
      for (int64_t j = r.lo; j < r.hi; ++j) row[j] += am[(j0 + j) * st];
    }
    if (bm != nullptr) {
      const int64_t st = o.bool_mask.stride(Axis::dim);
      for (int64_t j = r.lo; j < r.hi; ++j)
        if (bm[(j0 + j) * st] == 0) row[j] = kNegInf;
    }
    if (r.mask_mod) p.mask_mod->mask_row(r.b, r.h, r.i, j0 + r.lo, n, row + r.lo);
  };
  apply_masks(s);
  if (late_offset && r.offset != 0.0f)
    for (int64_t j = r.lo; j < r.hi; ++j) s[j] -= r.offset;
  if (overflowed) {
    float visible[kBc];
    std::fill(visible + lo, visible + hi, 0.0f);
    apply_masks(visible);
    bool any = false;
    for (int64_t j = lo; j < hi; ++j)
      if (overflow_at[j] != 0 && visible[j] != kNegInf) s[j] = std::numeric_limits<float>::quiet_NaN(), any = true;
    if (any) return std::numeric_limits<float>::quiet_NaN();
  }
  // The vector pass's max is stale if anything changed the scores after it.
  const bool changed = p.score_mod != nullptr || am != nullptr || bm != nullptr || r.mask_mod ||
                       (late_offset && r.offset != 0.0f);
  return changed ? RowMax(s, width) : vector_max;
}

// The row treatment of row i of (b, h) for keys [j0, j0 + limit) of a tile, from the
// plan alone (the row's key range, ALiBi; mask_mod evaluated everywhere). `limit`: keys
// at or past it are hidden (the row's key_end or the tile's end, relative to j0).
RowTreatment RowTreatmentOf(const Plan& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t limit, float scale,
                            float offset) {
  const detail::RowFrame f = p.row_frame(b, i);
  const detail::KeyRange kr = detail::key_range(f, p.options->causal, p.options->window);
  RowTreatment r;
  r.b = b, r.h = h, r.i = i;
  r.hi = std::max<int64_t>(limit, 0);
  r.lo = std::clamp<int64_t>(kr.begin - j0, 0, r.hi);
  r.diag = f.diag;
  r.slope = p.alibi_slope(f.seq, h);
  r.scale = scale;
  r.offset = offset;
  r.mask_mod = p.mask_mod != nullptr;
  return r;
}

// The same for callers that know only the row's key_end: keys j ≥ limit (relative to j0)
// are hidden; the key range's start, ALiBi, softcap, score_mod and mask_mod are the plan's.
[[maybe_unused]] float MaskRow(const Plan& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t limit, int64_t width, float scale,
              float offset, float* s) {
  return MaskRow(p, RowTreatmentOf(p, b, h, i, j0, limit, scale, offset), j0, width, s, nullptr);
}

// Dropout on a row of probabilities: dst_j = factor·src_j where key j is kept (its
// word >= the threshold), 0 where it is dropped. In place when dst = src.
void DropoutRow(const uint32_t* words, uint32_t threshold, float factor, int64_t width, const float* src, float* dst) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const size_t L = hn::Lanes(df);
  // Unsigned ≥ as a signed compare with the top bit flipped (x86 has no unsigned compare).
  const auto flip = hn::Set(di, static_cast<int32_t>(0x80000000u));
  const auto vt = hn::Xor(hn::Set(di, static_cast<int32_t>(threshold)), flip);
  const VF vf = hn::Set(df, factor);
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
    const auto w = hn::Xor(hn::BitCast(di, hn::LoadU(hn::RebindToUnsigned<DF>(), words + j)), flip);
    const auto drop = hn::RebindMask(df, hn::Lt(w, vt));
    hn::StoreU(hn::IfThenZeroElse(drop, hn::Mul(hn::LoadU(df, src + j), vf)), df, dst + j);
  }
}

float RowMax(const float* s, int64_t width) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF m = hn::Set(df, kNegInf);
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) m = hn::Max(m, hn::LoadU(df, s + j));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}


}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_TILE_OPS_INL_H_
