// Per-target tile operations shared by the forward and the backward kernels: tile
// widths, aligned scratch, packing of strided rows into unit-stride padded tiles, and
// the masking of one row of scores (causality, padding, boolean and additive masks).
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

#include "attnlab/error.hpp"

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "engine/gemm-inl.h"  // DF, VF
#include "engine/plan.hpp"

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

// A working buffer of n floats. Out of memory is an OutOfMemory error naming the size,
// never an abort. Inside a parallel region the caller must catch it (ScratchGuard):
// an exception may not leave an OpenMP region.
hwy::AlignedFreeUniquePtr<float[]> Scratch(int64_t n) {
  const size_t count = static_cast<size_t>(std::max<int64_t>(n, 1));
  auto p = hwy::AllocateAligned<float>(count);
  if (!p)
    throw OutOfMemory(fmt::format("attention: out of memory allocating a working buffer of {} bytes ({:.1f} MiB)",
                                  count * sizeof(float), static_cast<double>(count * sizeof(float)) / (1 << 20)));
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

// dst[r · dst_stride + c] = src row r, element c, for r < rows, c < cols;
// zero for c in [cols, padded_cols). Rows come from a strided view.
void PackRows(ConstView<float> x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
              int64_t padded_cols, float* dst) {
  const int64_t st = x.stride(kDim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x.row(b, h, r0 + r);
    float* d = dst + r * padded_cols;
    if (st == 1) {
      std::memcpy(d, src, static_cast<size_t>(cols) * sizeof(float));
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = src[c * st];
    }
    for (int64_t c = cols; c < padded_cols; ++c) d[c] = 0.0f;
  }
}

// Rows [r0, r0 + rows) of x as a B operand of the products (vector loads): x's
// own memory when its rows are unit-stride and a whole number of vectors long,
// else a padded copy in `scratch`. Sets `row_stride`.
const float* RowsOperand(ConstView<float> x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                         int64_t padded_cols, float* scratch, size_t& row_stride) {
  if (x.stride(kDim) == 1 && cols == padded_cols) {
    row_stride = static_cast<size_t>(x.stride(kSeq));
    return x.row(b, h, r0);
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
void PackTransposed(ConstView<float> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols, float* dst) {
  const int64_t w = TileWidth(n);
  // Writes run along dst rows (contiguous), reads gather down the key rows: a
  // scattered write per element was ~6 % of the forward's time.
  const int64_t st = x.stride(kDim), rs = x.stride(kSeq);
  const float* src = n > 0 ? x.row(b, h, j0) : nullptr;
  for (int64_t c = 0; c < cols; ++c) {
    float* d = dst + c * w;
    for (int64_t j = 0; j < n; ++j) d[j] = src[j * rs + c * st];
    for (int64_t j = n; j < w; ++j) d[j] = 0.0f;
  }
}

// Turns a raw row of q·k products into scaled, masked scores minus `offset`
// (0 in the forward, L_i in the backward): entries j ≥ limit (causality, padding, the tile's tail)
// and keys the boolean mask hides become −inf; the additive mask is added.
// s has `width` entries (the tile's key count rounded up to whole vectors,
// TileWidth), the row's stride stays kBc.
float RowMax(const float* s, int64_t width);

// Returns the row's max after masking (−inf if nothing is visible).
float MaskRow(const Plan& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t limit, int64_t width, float scale,
              float offset, float* s) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vscale = hn::Set(df, scale), vlimit = hn::Set(df, static_cast<float>(limit)), vninf = hn::Set(df, kNegInf);
  const AttentionOptions<float>& o = *p.options;
  const float* am = detail::mask_row(o.additive_mask, b, h, i);
  // With an additive mask the offset is subtracted after adding it, in the
  // forward's order of roundings (the forward's max is of scale·S + M).
  const VF voff = hn::Set(df, am == nullptr ? offset : 0.0f);
  VF vmax = vninf;
  for (size_t j = 0; j < static_cast<size_t>(width); j += L) {
    // Not one fused multiply-subtract: the backward must round scale·S exactly
    // as the forward did, so that S − L is exactly 0 at a one-hot row's max
    // (P = 1, as in the forward), not a rounding residue.
    VF x = hn::Sub(hn::Mul(hn::LoadU(df, s + j), vscale), voff);
    if (static_cast<int64_t>(j + L) > limit) x = hn::IfThenElse(hn::Lt(hn::Iota(df, static_cast<float>(j)), vlimit), x, vninf);
    vmax = hn::Max(vmax, x);
    hn::StoreU(x, df, s + j);
  }
  if (const uint8_t* bm = detail::mask_row(o.bool_mask, b, h, i)) {
    const int64_t st = o.bool_mask.stride(kDim);
    for (int64_t j = 0; j < limit; ++j)
      if (bm[(j0 + j) * st] == 0) s[j] = kNegInf;
  }
  if (am != nullptr) {
    const int64_t st = o.additive_mask.stride(kDim);
    for (int64_t j = 0; j < limit; ++j) s[j] = (s[j] + am[(j0 + j) * st]) - offset;
  }
  if (am != nullptr || o.bool_mask.present()) return RowMax(s, width);
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
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
