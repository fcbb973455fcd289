// The kernel pieces of kernel_pieces.hpp, compiled per SIMD target from the
// kernels' own -inl.h files and dispatched like the kernels.
#include "engine/testing/kernel_pieces.hpp"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/testing/kernel_pieces.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "engine/exp-inl.h"
#include "engine/forward_tile-inl.h"
#include "engine/gemm-inl.h"
#include "engine/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {

void GemmPieceImpl(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B, size_t b_rs,
                   float* C, size_t c_rs, bool accumulate) {
  Gemm(M, N, K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
}

// One forward softmax step on a tile of `rows` × nc scores (a row stride of kBc),
// unmasked, with d = dv = 64 (a made-up problem: only the tile shape matters here).
void SoftmaxPieceImpl(float* s, int64_t rows, int64_t nc, int64_t steps) {
  HWY_ASSERT(rows >= 1 && rows <= kBr && nc >= 1 && nc <= kBc);
  const detail::AttentionDims dims{1, 1, 1, rows, nc, 64, 64};
  const AttentionOptions<float> options;
  const Plan p(dims, {}, {}, {}, options, 1);
  ForwardScratch w(p);
  BeginQueryTile(p, 0, 0, 0, rows, w);
  auto raw = Scratch(rows * kBc);
  std::memcpy(raw.get(), s, sizeof(float) * static_cast<size_t>(rows * kBc));
  for (int64_t step = 0; step < steps; ++step) {
    std::memcpy(w.s.get(), raw.get(), sizeof(float) * static_cast<size_t>(rows * kBc));  // as the product writes it
    const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
    SoftmaxTile(p, 0, 0, 0, SubTile{0, rows, 0, nc, (nc + L - 1) / L * L, false}, w, false);
  }
  std::memcpy(s, w.s.get(), sizeof(float) * static_cast<size_t>(rows * kBc));
}

void ExpPieceImpl(float* x, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (size_t j = 0; j + L <= n; j += L) hn::StoreU(ExpNonPositive(df, hn::LoadU(df, x + j)), df, x + j);
}

void TanhPieceImpl(float* x, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (size_t j = 0; j + L <= n; j += L) hn::StoreU(SoftcapTanh(df, hn::LoadU(df, x + j)), df, x + j);
}

const char* PiecesTargetImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine::testing {

HWY_EXPORT(GemmPieceImpl);
HWY_EXPORT(ExpPieceImpl);
HWY_EXPORT(TanhPieceImpl);
HWY_EXPORT(SoftmaxPieceImpl);
HWY_EXPORT(PiecesTargetImpl);

void gemm_piece(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B,
                size_t b_rs, float* C, size_t c_rs, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmPieceImpl)(M, N, K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
}
void exp_piece(float* x, size_t n) { HWY_DYNAMIC_DISPATCH(ExpPieceImpl)(x, n); }
void tanh_piece(float* x, size_t n) { HWY_DYNAMIC_DISPATCH(TanhPieceImpl)(x, n); }
void softmax_piece(float* s, int64_t rows, int64_t nc, int64_t steps) {
  HWY_DYNAMIC_DISPATCH(SoftmaxPieceImpl)(s, rows, nc, steps);
}
const char* pieces_target_name() { return HWY_DYNAMIC_DISPATCH(PiecesTargetImpl)(); }

}  // namespace attnlab::engine::testing
#endif  // HWY_ONCE
