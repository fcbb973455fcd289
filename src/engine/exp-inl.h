// exp(x) for the softmax inside the kernels, where x = S − max ≤ 0 always.
// Per-target code: included by the kernels' TUs once per SIMD target, hence
// the toggle guard.
//
// Why not hwy/contrib/math's Exp: it serves every x, so it scales by 2^q in two
// steps (to reach 2^±127 without overflow), maps x < −104 to 0 with a compare
// and a select, and rounds and converts q with the fix-ups that float → int
// conversion needs on x86: about 24 instructions per vector. The softmax only
// needs x ≤ 0, where one exponent insert suffices, a clamp replaces the
// compare, and the "magic number" 1.5·2^23 rounds and converts in one FMA:
// 14 instructions instead of about 24 (BM_Exp measures the throughput). exp is
// a large part of the forward's time outside the products, so this pays on the
// whole forward (docs/engine.md, "Forward and backward").
//
// The method (Cody–Waite reduction, then a polynomial):
//   x  ← max(x, −127·ln 2)                 (−inf and anything below → 0 below)
//   n  = round(x / ln 2),  r = x − n·ln 2   (r ∈ [−ln2/2, ln2/2]; ln 2 split into
//                                            a high part of 15 significant bits,
//                                            so n·hi is exact, and a low part)
//   e^r ≈ degree-6 polynomial                (minimax for relative error, 1.9e-9
//                                            in exact arithmetic: ~0.02 ulp, so
//                                            float rounding dominates)
//   exp(x) = e^r · 2^n, with 2^n built as the bits (n + 127) << 23.
// n = −127 gives the bit pattern 0, i.e. exactly 0: −inf (a masked key) gives
// exactly 0, as it must, and so does any x below about −87.7 (true value
// < 1.2e-38, smaller than FLT_MIN: an absolute error far below what a sum of
// probabilities ≥ 1 can see). Valid for x ≤ 88 (n + 127 ≤ 254); NaN in gives
// NaN out on x86 (max returns its second operand when either is NaN).
//
// Measured maximum error against exp in double (tests/engine/test_engine_exp.cpp,
// every 7th float in [−88.1, 0]): 1.03 ulp on AVX3, 1.29 ulp on SCALAR (no FMA),
// for results ≥ FLT_MIN; the test fails above 2 ulp.
#if defined(ATTNLAB_ENGINE_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_EXP_INL_H_
#undef ATTNLAB_ENGINE_EXP_INL_H_
#else
#define ATTNLAB_ENGINE_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V kMin = hn::Set(d, -88.029691931f);  // −127·ln 2
  const V kLog2e = hn::Set(d, 1.44269504088896341f);
  const V kMagic = hn::Set(d, 12582912.0f);  // 1.5·2^23: its ulp is 1
  const V kLn2Hi = hn::Set(d, 0.693145751953125f);  // 15 significant bits: n·hi is exact for |n| < 2^9
  const V kLn2Lo = hn::Set(d, 1.428606765330187045e-6f);
  // Max(kMin, x), not Max(x, kMin): x86's max returns the second operand when
  // either is NaN, so a NaN score stays NaN and the kernel's checks see it.
  x = hn::Max(kMin, x);
  // t = x/ln2 + 1.5·2^23 rounds x/ln2 to the nearest integer n in one fused
  // operation and leaves n in t's low mantissa bits: no round or convert needed.
  const V t = hn::MulAdd(x, kLog2e, kMagic);
  const V n = hn::Sub(t, kMagic);  // exact
  V r = hn::NegMulAdd(n, kLn2Hi, x);
  r = hn::NegMulAdd(n, kLn2Lo, r);
  // e^r on |r| ≤ ln2/2: degree-6 minimax for relative error (1.9e-9 in exact
  // arithmetic; Lawson-weighted Chebyshev fit, coefficients rounded to float).
  V p = hn::Set(d, 0.0013836845755577087f);
  p = hn::MulAdd(p, r, hn::Set(d, 0.008374815806746483f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.04166822507977486f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.16666419804096222f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.49999991059303284f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  // 2^n as bits: t's bits are those of 1.5·2^23 plus n, whose low 9 bits are n's;
  // (n + 127) << 23 keeps just those, and n = −127 gives 0, i.e. exactly 0.
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(d, bits));
}

}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_EXP_INL_H_
