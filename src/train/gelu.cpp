// The float GPT's GELU forward (train/gelu.hpp), compiled once per SIMD target
// (hwy/foreach_target.h) and chosen at run time (HWY_DYNAMIC_DISPATCH), as the engine's kernels
// are: the exponential from Highway's contrib math (1 ULP), erf from Abramowitz & Stegun 7.1.26
// on that same exponential. The scalar loop it replaces spent a tenth of a step at d_k = 16 in
// glibc's expf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "train/gelu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>

#include "train/gelu.hpp"

HWY_BEFORE_NAMESPACE();
namespace attnlab::train::lm::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE void GeluLanes(D d, V u, V& g, V& slope) {
  const V one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f);
  const V e = hn::Exp(d, hn::Mul(hn::Set(d, -0.5f), hn::Mul(u, u)));  // exp(−u²/2) = exp(−x²), x = u/√2
  const V x = hn::Mul(hn::Abs(u), hn::Set(d, static_cast<float>(kGeluInvSqrt2)));
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, kAs26P), x, one));
  V poly = hn::Set(d, kAs26A[4]);
  for (int k = 3; k >= 0; --k) poly = hn::MulAdd(poly, t, hn::Set(d, kAs26A[k]));
  poly = hn::Mul(poly, t);
  const V erf_abs = hn::NegMulAdd(poly, e, one);  // 1 − poly·e
  const V cdf = hn::Mul(half, hn::Add(one, hn::CopySign(erf_abs, u)));
  g = hn::Mul(u, cdf);
  slope = hn::MulAdd(hn::Mul(u, hn::Set(d, static_cast<float>(kGeluInvSqrt2Pi))), e, cdf);
}

void GeluForwardImpl(const float* u, float* g, float* slope, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    auto gv = hn::Zero(d), sv = hn::Zero(d);
    GeluLanes(d, hn::LoadU(d, u + i), gv, sv);
    hn::StoreU(gv, d, g + i);
    hn::StoreU(sv, d, slope + i);
  }
  if (i == n) return;
  // The last partial vector through a zero-padded copy: the same arithmetic as every other lane.
  HWY_ALIGN float in[hn::MaxLanes(d)] = {}, out_g[hn::MaxLanes(d)], out_s[hn::MaxLanes(d)];
  std::copy(u + i, u + n, in);
  auto gv = hn::Zero(d), sv = hn::Zero(d);
  GeluLanes(d, hn::Load(d, in), gv, sv);
  hn::Store(gv, d, out_g);
  hn::Store(sv, d, out_s);
  std::copy(out_g, out_g + (n - i), g + i);
  std::copy(out_s, out_s + (n - i), slope + i);
}

}  // namespace attnlab::train::lm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::train::lm {
HWY_EXPORT(GeluForwardImpl);

void gelu_forward(const float* u, float* g, float* slope, size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluForwardImpl)(u, g, slope, n);
}

}  // namespace attnlab::train::lm
#endif  // HWY_ONCE
