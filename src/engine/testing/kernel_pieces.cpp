// The kernel pieces of kernel_pieces.hpp, compiled per SIMD target from the
// kernels' own -inl.h files and dispatched like the kernels.
#include "engine/testing/kernel_pieces.hpp"

#include <cstring>
#include <memory>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/testing/kernel_pieces.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
// The shared -inl.h pieces define functions in anonymous namespaces that this TU does
// not call (the kernels' loops use them).
#pragma GCC diagnostic ignored "-Wunused-function"
#include "engine/decode_chunk-inl.h"
#include "engine/decode_fused_softmax-inl.h"
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
  const Plan p(dims, ConstView<float>(), ConstView<float>(), ConstView<float>(), options, 1);
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

// The decode path's work item (decode_chunk-inl.h, DecodeChunk), `steps` times: key/value
// head 0 of a [1, Hq, Nq, d] × [1, Hkv, Nk, d] problem, its first chunk of keys.
void DecodeChunkPieceImpl(const float* q, const float* k, const float* v, int64_t Hq, int64_t Hkv, int64_t Nq,
                          int64_t Nk, int64_t d, int64_t steps, bool from_memory) {
  const detail::AttentionDims dims{1, Hq, Hkv, Nq, Nk, d, d};
  const AttentionOptions<float> options;
  const ConstView<float> qv(q, {1, Hq, Nq, d}), kv(k, {1, Hkv, Nk, d}), vv(v, {1, Hkv, Nk, d});
  Plan p(dims, qv, kv, vv, options, 1);
  DecodeSwitches switches = default_decode_switches();
  if (from_memory) switches.beside_loads_max_kv_bytes = 0;
  std::vector<int64_t> begin(static_cast<size_t>(Nq)), end(begin.size());
  std::vector<float> scale(static_cast<size_t>(Hq * Nq), p.fixed_scale);
  for (int64_t i = 0; i < Nq; ++i) {
    begin[static_cast<size_t>(i)] = p.key_begin(0, i);
    end[static_cast<size_t>(i)] = p.key_end(0, i);
  }
  DecodeWork w;
  w.p = &p;
  w.strategy = choose_decode_strategy(decode_shape(p), DecodeTarget::facts(), switches);
  w.rows = dims.group() * Nq;
  w.chunk = decode_chunk_keys(dims.B, dims.Hkv, dims.Nk);
  w.n_chunks = 1;
  w.begin = begin.data();
  w.end = end.data();
  w.scale = scale.data();
  auto o = Scratch(w.rows * p.dv_pad), m = Scratch(w.rows), l = Scratch(w.rows);
  std::unique_ptr<bool[]> nan(new bool[static_cast<size_t>(w.rows)]);
  w.o = o.get();
  w.m = m.get();
  w.l = l.get();
  w.nan_score = nan.get();
  DecodeScratch sc(p);
  for (int64_t step = 0; step < steps; ++step) DecodeChunk<float>(w, 0, 0, 0, sc);
}

bool FusedSoftmaxRowsPieceImpl(int rows, bool by_rows, float* s, const float* scale, float* m, float* l,
                               bool* nan_score, float* o, size_t dv_pad) {
  HWY_ASSERT(rows >= 1 && rows <= 8 && dv_pad % 16 == 0);
  if (by_rows) {
    for (int r = 0; r < rows; ++r)
      FusedSoftmaxRow(s + r * kFusedKeys, scale[r], m[r], l[r], nan_score[r], o + r * dv_pad, dv_pad);
    return false;
  }
  auto run = [&](auto n) {
    constexpr int R = decltype(n)::value;
    FusedSoftmaxRows<R>(s, scale, m, l, nan_score, o, dv_pad);
    return DecodeTarget::avx512 && R >= kFusedSoftmaxPairsMinRows;
  };
  switch (rows) {
    case 1: return run(std::integral_constant<int, 1>());
    case 2: return run(std::integral_constant<int, 2>());
    case 3: return run(std::integral_constant<int, 3>());
    case 4: return run(std::integral_constant<int, 4>());
    case 5: return run(std::integral_constant<int, 5>());
    case 6: return run(std::integral_constant<int, 6>());
    case 7: return run(std::integral_constant<int, 7>());
    default: return run(std::integral_constant<int, 8>());
  }
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
HWY_EXPORT(DecodeChunkPieceImpl);
HWY_EXPORT(FusedSoftmaxRowsPieceImpl);

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
void decode_chunk_piece(const float* q, const float* k, const float* v, int64_t Hq, int64_t Hkv, int64_t Nq,
                        int64_t Nk, int64_t d, int64_t steps, bool from_memory) {
  HWY_DYNAMIC_DISPATCH(DecodeChunkPieceImpl)(q, k, v, Hq, Hkv, Nq, Nk, d, steps, from_memory);
}

bool fused_softmax_rows_piece(int rows, bool by_rows, float* s, const float* scale, float* m, float* l,
                              bool* nan_score, float* o, size_t dv_pad) {
  return HWY_DYNAMIC_DISPATCH(FusedSoftmaxRowsPieceImpl)(rows, by_rows, s, scale, m, l, nan_score, o, dv_pad);
}
}  // namespace attnlab::engine::testing
#endif  // HWY_ONCE
