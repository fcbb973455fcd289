// Register-blocked float32 microkernel shared by the six products of
// FlashAttention (S = Q Kᵀ, O += P V, dV += Pᵀ dO, dP = dO Vᵀ, dK += dSᵀ Q,
// dQ = dS K). Per-target code: included by flash_forward_kernels.cpp and
// flash_backward_kernels.cpp once per SIMD target through hwy/foreach_target.h,
// hence the toggle guard.
//
//   C[M × N] (+)= A[M × K] · B[K × N]
//   A is read one scalar at a time (broadcast), at A[r·a_rs + k·a_ks]: any
//     strides, so Aᵀ (for Pᵀ and dSᵀ) costs nothing.
//   B is row-major with row stride b_rs and N a multiple of the vector length:
//     B is one of our packed, zero-padded buffers, or rows of the caller's (the
//     decode path reads V in place, float32, bfloat16 or float16: TB, converted
//     to float32 in registers as it is loaded).
//   C is row-major with row stride c_rs.
//
// The block kernel keeps an R × NV tile of C in registers (R rows, NV vectors
// of columns) and, for each k, loads NV vectors of B row k and broadcasts R
// scalars of A column k: R·NV independent FMA chains per NV loads + R
// broadcasts. With 32 vector registers (AVX-512) R = 6, NV = 4 gives 24
// accumulators (plus 4 B vectors and a broadcast: 29 registers), more than the
// FMA latency (4 cycles) times the FMA issue rate (2 per cycle); with 16
// registers (AVX2, SSE, EMU128) R = 4, NV = 2 gives 8 accumulators (plus 2 B
// vectors and a broadcast: 11 registers).
#if defined(ATTNLAB_ENGINE_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_GEMM_INL_H_
#undef ATTNLAB_ENGINE_GEMM_INL_H_
#else
#define ATTNLAB_ENGINE_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "attnlab/float16.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#if HWY_TARGET <= HWY_AVX3
inline constexpr int kBlockRows = 6;
inline constexpr int kBlockVecs = 4;
#else
inline constexpr int kBlockRows = 4;
inline constexpr int kBlockVecs = 2;
#endif

// Highway's types of the layout of attnlab's 16-bit types, for its vector conversions.
template <class E>
struct HwyElement {
  using type = E;
};
template <>
struct HwyElement<bfloat16> {
  using type = hwy::bfloat16_t;
};
template <>
struct HwyElement<float16> {
  using type = hwy::float16_t;
};

// A vector of floats from Lanes(DF()) consecutive elements of type E at p (exact:
// bfloat16 is a shift, float16 F16C's conversion on x86).
template <class E>
HWY_INLINE VF LoadAsFloat(const E* HWY_RESTRICT p) {
  const DF df;
  if constexpr (std::is_same_v<E, float>) {
    return hn::LoadU(df, p);
  } else {
    using H = typename HwyElement<E>::type;
    const hn::Rebind<H, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const H*>(p)));
  }
}

template <int R, int NV, class TB = float>
HWY_INLINE void GemmBlock(size_t K, const float* HWY_RESTRICT A, size_t a_rs, size_t a_ks,
                          const TB* HWY_RESTRICT B, size_t b_rs, float* HWY_RESTRICT C, size_t c_rs,
                          bool accumulate) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      c[r][v] = accumulate ? hn::LoadU(df, C + r * c_rs + v * L) : hn::Zero(df);
  for (size_t k = 0; k < K; ++k) {
    const TB* HWY_RESTRICT b = B + k * b_rs;
    VF bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = LoadAsFloat(b + v * L);
    const float* HWY_RESTRICT a = A + k * a_ks;
    for (int r = 0; r < R; ++r) {
      const VF ar = hn::Set(df, a[r * a_rs]);
      for (int v = 0; v < NV; ++v) c[r][v] = hn::MulAdd(ar, bv[v], c[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) hn::StoreU(c[r][v], df, C + r * c_rs + v * L);
}

template <int R, class TB>
HWY_INLINE void GemmRows(size_t nv, size_t K, const float* A, size_t a_rs, size_t a_ks, const TB* B,
                         size_t b_rs, float* C, size_t c_rs, bool accumulate) {
  static_assert(kBlockVecs == 2 || kBlockVecs == 4);
  switch (nv) {
    case 1: return GemmBlock<R, 1, TB>(K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
    case 2: return GemmBlock<R, 2, TB>(K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
#if HWY_TARGET <= HWY_AVX3
    case 3: return GemmBlock<R, 3, TB>(K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
    case 4: return GemmBlock<R, 4, TB>(K, A, a_rs, a_ks, B, b_rs, C, c_rs, accumulate);
#endif
    default: HWY_ASSERT(false);
  }
}

// C[M × N] (+)= A[M × K] · B[K × N]; N must be a multiple of Lanes(DF()).
// The column chunk is the outer loop so that its slice of B stays in L1 while
// every row block streams past it.
template <class TB = float>
inline void Gemm(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const TB* B,
                 size_t b_rs, float* C, size_t c_rs, bool accumulate) {
  const size_t L = hn::Lanes(DF());
  const size_t nvec = N / L;
  for (size_t v0 = 0; v0 < nvec; v0 += kBlockVecs) {
    const size_t nv = std::min<size_t>(kBlockVecs, nvec - v0);
    const TB* Bc = B + v0 * L;
    float* Cc = C + v0 * L;
    size_t r0 = 0;
    for (; r0 + kBlockRows <= M; r0 += kBlockRows)
      GemmRows<kBlockRows>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate);
    switch (M - r0) {
      case 0: break;
      case 1: GemmRows<1>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate); break;
      case 2: GemmRows<2>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate); break;
      case 3: GemmRows<3>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate); break;
#if HWY_TARGET <= HWY_AVX3
      case 4: GemmRows<4>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate); break;
      case 5: GemmRows<5>(nv, K, A + r0 * a_rs, a_rs, a_ks, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate); break;
#endif
      default: HWY_ASSERT(false);
    }
  }
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_GEMM_INL_H_
