#pragma once
// Runs the engine, the naive float32 implementation and the double reference
// on one problem and checks the accuracy rule of issue 3:
//   for each of O, L, dQ, dK, dV:  err(engine) ≤ 2·err(naive) + floor
// with err = max |x − reference| over all elements. `naive` is the float32
// implementation of naive_float.hpp with D = rowsum(dO∘O), the backward that
// issue 3 prescribes. The autograd-style naive (D = rowsum(P∘dP), whose dS
// cancels exactly in near one-hot rows) is measured too and its worst ratio
// printed, not asserted: the engine's gradients can be several times worse
// than it on small, peaked problems (docs/engine.md, "Tolerances").
// floor = 16 float ulps of the size of the terms summed (or of the result),
// times (1 + max|L|): storing L in float32 (the API's lse) perturbs every
// recomputed P = exp(S − L) by up to ulp(L)/2 relative, an error no
// implementation that keeps L in float can avoid, and two implementations that
// round differently may each be off by an ulp where the other is exact.
// Also: no NaN, fully masked rows give O = 0, L = −inf and zero dQ.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "naive_float.hpp"

namespace attnlab::test {

inline constexpr int kQuantities = 6;
struct EngineErrors {
  // O, L, dQ, dK, dV, dsinks; autograd: naive with D = rowsum(P∘dP)
  double engine[kQuantities]{}, naive[kQuantities]{}, autograd[kQuantities]{};
};

inline const char* kQuantity[kQuantities] = {"out", "lse", "dq", "dk", "dv", "dsinks"};

// The rule's floor for each of O, L, dQ, dK, dV, dsinks (see the top), from the problem
// (its inputs exactly those of the implementations), the reference's forward and
// results, and the naive float32 run (its max |D| and column mass).
inline std::array<double, kQuantities> accuracy_floors(const Problem& p, const detail::AttentionForward<double>& rf,
                                                       const Tensor<double>* const (&ref)[kQuantities],
                                                       const NaiveResult& nv) {
  double max_lse = 0;
  for (double y : rf.lse.storage())
    if (std::isfinite(y)) max_lse = std::max(max_lse, std::abs(y));
  // Size of the terms each result sums (its rounding errors scale with them,
  // not with a result that cancels): |v| for O, |S| ≤ |scale|·‖q‖·‖k‖ for L,
  // |dO| for dV; for dQ and dK the result itself.
  auto max_abs_of = [](const Tensor<double>& t) { return max_abs(t); };
  auto max_norm = [](const Tensor<double>& t) {
    double m = 0;
    for (int64_t r = 0; r < t.numel() / t.shape()[3]; ++r) {
      double n = 0;
      for (int64_t c = 0; c < t.shape()[3]; ++c) n += t.data()[r * t.shape()[3] + c] * t.data()[r * t.shape()[3] + c];
      m = std::max(m, std::sqrt(n));
    }
    return m;
  };
  double max_scale = 0;
  for (int64_t n = 1; n <= p.Nk; ++n) max_scale = std::max(max_scale, std::abs(p.scale(p.d, n)));
  // With softcap the scores are at most c; ALiBi adds up to slope·N to them.
  double max_score = max_scale * max_norm(p.q) * max_norm(p.k);
  if (p.softcap) max_score = std::min(max_score, *p.softcap);
  for (double slope : p.alibi_slopes) max_score += slope * static_cast<double>(std::max(p.Nq, p.Nk));
  // dsinks_h sums −P_sink·D_i over the rows of head h: the size of those terms.
  double sink_terms = 0;
  for (int64_t h = 0; h < static_cast<int64_t>(p.sinks.size()); ++h) {
    double sum = 0;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.Nq; ++i) {
        double D = 0;
        for (int64_t c = 0; c < p.dv; ++c) D += p.grad_out(b, h, i, c) * rf.out(b, h, i, c);
        sum += std::exp(std::min(p.sinks[static_cast<size_t>(h)] - rf.lse(b, h, i, 0), 0.0)) * std::abs(D);
      }
    sink_terms = std::max(sink_terms, sum);
  }
  const double term[kQuantities] = {max_abs_of(p.v), max_score, 0.0, 0.0, max_abs_of(p.grad_out), sink_terms};
  std::array<double, kQuantities> floor{};
  for (int x = 0; x < kQuantities; ++x) {
    double big = 0;
    for (double y : ref[x]->storage())
      if (std::isfinite(y)) big = std::max(big, std::abs(y));
    floor[x] = 16.0 * std::numeric_limits<float>::epsilon() * std::max(big, term[x]) * (1.0 + max_lse);
    // dQ and dK also carry the rounding of D_i = rowsum(dO∘O) (FlashAttention's), which enters
    // every dS_ij = P_ij (dP_ij − D_i) of the row alike: in a near one-hot row dP − D cancels to
    // far below D, and half an ulp of D, times |k| (dQ) or |q| times the rows on a key (dK), is
    // then the error of any float implementation, whichever rounds luckier (docs/engine.md).
    const double ulp_D = std::numeric_limits<float>::epsilon() * nv.max_abs_D;
    if (x == 2) floor[x] += 2.0 * ulp_D * max_scale * max_norm(p.k);
    if (x == 3) floor[x] += 2.0 * ulp_D * max_scale * max_norm(p.q) * std::max(1.0, nv.max_column_mass);
  }
  return floor;
}

// strided: pass q, k, v and dq through views with permuted, spread layouts.
inline EngineErrors check_engine_against_reference(const Problem& p0, bool strided, const ComputeConfig& config = {}) {
  const Problem p = FloatProblem::rounded(p0);
  const FloatProblem f(p);
  const AttentionOptions<float> opt = f.options(p);

  // Engine.
  std::vector<float> sq, sk, sv, sdq;
  ConstView<float> q = f.q.view(), k = f.k.view(), v = f.v.view();
  Tensor<float> dq_t(p.q.shape());
  TensorView<float> dq = dq_t.view();
  if (strided) {
    q = strided_copy(f.q, {0, 2, 1, 3}, 1, sq);  // [B, N, H, d] in memory
    k = strided_copy(f.k, {2, 0, 1, 3}, 2, sk);  // [N, B, H, d], every other float
    v = strided_copy(f.v, {0, 1, 3, 2}, 1, sv);  // [B, H, dv, N]: the dim axis strided
    std::vector<float> tmp;
    dq = strided_copy(dq_t, {1, 0, 2, 3}, 3, sdq);
  }
  AttentionOptions<float> fopt = opt;
  Tensor<uint8_t> applied({p.B, p.Hq, p.Nq, p.dropout_p != 0 ? p.Nk : 0});
  const TensorView<uint8_t> mask_out = p.dropout_p != 0 ? applied.view() : TensorView<uint8_t>();
  const auto fe = detail::allocating_forward(q, k, v, fopt, config, mask_out);
  Tensor<float> dk(p.k.shape()), dv(p.v.shape()), dsinks({1, p.Hq, 1, 1});
  const std::span<float> dsinks_out = p.sinks.empty() ? std::span<float>() : std::span<float>(dsinks.storage());
  attention_backward(q, k, v, fe.out.view(), fe.lse.view(), f.grad_out.view(), opt,
                     {dq, dk.view(), dv.view(), dsinks_out}, config);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Nq; ++i)
        for (int64_t c = 0; c < p.d; ++c) dq_t(b, h, i, c) = dq(b, h, i, c);

  // Naive float32 and the double reference.
  const NaiveResult nv = naive_float_attention(p, f, /*d_from_out=*/true);
  const NaiveResult na = naive_float_attention(p, f, /*d_from_out=*/false);
  const auto ropt = p.options();
  AttentionOptions<double> ropt_masked = ropt;
  Tensor<uint8_t> ref_applied(applied.shape());
  const TensorView<uint8_t> ref_mask_out = p.dropout_p != 0 ? ref_applied.view() : TensorView<uint8_t>();
  const auto rf = detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), ropt_masked, {}, ref_mask_out);
  const auto rg = detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), rf, p.grad_out.view(), ropt);
  // Dropout: the engine applied exactly the reference's mask.
  if (p.dropout_p != 0) EXPECT_EQ(applied.storage(), ref_applied.storage()) << "dropout masks differ";
  Tensor<double> ref_dsinks({1, p.Hq, 1, 1});
  for (size_t h = 0; h < rg.dsinks.size(); ++h) ref_dsinks.data()[h] = rg.dsinks[h];

  const Tensor<double>* ref[kQuantities] = {&rf.out, &rf.lse, &rg.dq, &rg.dk, &rg.dv, &ref_dsinks};
  const Tensor<float>* eng[kQuantities] = {&fe.out, &fe.lse, &dq_t, &dk, &dv, &dsinks};
  const Tensor<float>* nai[kQuantities] = {&nv.out, &nv.lse, &nv.dq, &nv.dk, &nv.dv, &nv.dsinks};
  const Tensor<float>* aut[kQuantities] = {&na.out, &na.lse, &na.dq, &na.dk, &na.dv, &na.dsinks};
  const std::array<double, kQuantities> floor = accuracy_floors(p, rf, ref, nv);
  EngineErrors e;
  for (int x = 0; x < kQuantities; ++x) {
    for (float y : eng[x]->storage()) EXPECT_FALSE(std::isnan(y)) << kQuantity[x];
    e.engine[x] = max_abs_diff(to_double(*eng[x]), *ref[x]);
    e.naive[x] = max_abs_diff(to_double(*nai[x]), *ref[x]);
    e.autograd[x] = max_abs_diff(to_double(*aut[x]), *ref[x]);
    EXPECT_LE(e.engine[x], 2.0 * e.naive[x] + floor[x])
        << kQuantity[x] << ": engine error " << e.engine[x] << ", naive float32 error " << e.naive[x];
  }
  // Fully masked rows.
  for (int64_t r = 0; r < rf.lse.numel(); ++r) {
    if (rf.lse.data()[r] != -INFINITY) continue;
    EXPECT_EQ(fe.lse.data()[r], -INFINITY);
    for (int64_t c = 0; c < p.dv; ++c) EXPECT_EQ(fe.out.data()[r * p.dv + c], 0.0f);
    for (int64_t c = 0; c < p.d; ++c) EXPECT_EQ(dq_t.data()[r * p.d + c], 0.0f);
  }
  return e;
}

}  // namespace attnlab::test
