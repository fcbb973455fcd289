// Adam's update (train/adam_update.hpp), compiled once per SIMD target and chosen at run time
// (HWY_DYNAMIC_DISPATCH), as the GELU is. It was a tenth of a toy step and a twentieth of a
// GPT step as a scalar loop of double divisions and square roots.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "train/adam_update.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>

#include "train/adam_update.hpp"

HWY_BEFORE_NAMESPACE();
namespace attnlab::train::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a·b as a value nothing is fused into: the compilers contract a·b + c into one fused
// multiply-add by default (GCC's -ffp-contract=fast), which would round once where the
// scalar form, built for baseline x86-64, rounds twice. The empty asm forbids it.
template <class V>
HWY_INLINE V Product(V a, V b) {
  V x = hn::Mul(a, b);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(x.raw));
#endif
  return x;
}

void AdamUpdateImpl(float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as doubles: half a vector
  using VD = hn::Vec<decltype(dd)>;
  const size_t L = hn::Lanes(dd);
  const VD beta1 = hn::Set(dd, s.beta1), beta2 = hn::Set(dd, s.beta2), rest1 = hn::Set(dd, 1 - s.beta1),
           rest2 = hn::Set(dd, 1 - s.beta2), c1 = hn::Set(dd, s.c1), c2 = hn::Set(dd, s.c2), rate = hn::Set(dd, s.rate),
           eps = hn::Set(dd, s.eps);
  const auto shrink = hn::Set(df, s.shrink);
  auto lanes = [&](float* wp, const float* gp, float* mp, float* vp, bool aligned) {
    auto wf = aligned ? hn::Load(df, wp) : hn::LoadU(df, wp);
    wf = Product(wf, shrink);  // rounded before the step is subtracted, as the scalar form
    const VD gd = hn::PromoteTo(dd, aligned ? hn::Load(df, gp) : hn::LoadU(df, gp));
    const VD md = hn::PromoteTo(dd, aligned ? hn::Load(df, mp) : hn::LoadU(df, mp));
    const VD vd = hn::PromoteTo(dd, aligned ? hn::Load(df, vp) : hn::LoadU(df, vp));
    const auto mf = hn::DemoteTo(df, hn::Add(Product(beta1, md), Product(rest1, gd)));
    const auto vf = hn::DemoteTo(df, hn::Add(Product(beta2, vd), Product(Product(rest2, gd), gd)));
    const VD mhat = hn::Div(hn::PromoteTo(dd, mf), c1), vhat = hn::Div(hn::PromoteTo(dd, vf), c2);
    const VD step = hn::Div(Product(rate, mhat), hn::Add(hn::Sqrt(vhat), eps));
    wf = hn::Sub(wf, hn::DemoteTo(df, step));
    hn::StoreU(mf, df, mp);
    hn::StoreU(vf, df, vp);
    hn::StoreU(wf, df, wp);
  };
  size_t i = 0;
  for (; i + L <= n; i += L) lanes(w + i, g + i, m + i, v + i, false);
  if (i == n) return;
  // The last partial vector through zero-padded copies: the same arithmetic as every other lane.
  HWY_ALIGN float tw[hn::MaxLanes(dd)] = {}, tg[hn::MaxLanes(dd)] = {}, tm[hn::MaxLanes(dd)] = {},
                  tv[hn::MaxLanes(dd)] = {};
  const size_t r = n - i;
  std::copy(w + i, w + n, tw);
  std::copy(g + i, g + n, tg);
  std::copy(m + i, m + n, tm);
  std::copy(v + i, v + n, tv);
  lanes(tw, tg, tm, tv, true);
  std::copy(tw, tw + r, w + i);
  std::copy(tm, tm + r, m + i);
  std::copy(tv, tv + r, v + i);
}

}  // namespace attnlab::train::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::train {
HWY_EXPORT(AdamUpdateImpl);

void adam_update(float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  HWY_DYNAMIC_DISPATCH(AdamUpdateImpl)(w, g, m, v, n, s);
}

}  // namespace attnlab::train
#endif  // HWY_ONCE
