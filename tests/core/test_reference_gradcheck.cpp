// The reference's dQ, dK, dV against central finite differences of
// loss = Σ dO ∘ O, in double. Rule: max|fd − analytic| / max|analytic| < 1e-6
// (step 1e-5: truncation ≈ 1e-10, rounding ≈ 1e-11, so 1e-6 leaves a wide margin
// while any wrong term, which is O(1), fails it).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "attnlab/reference.hpp"
#include "problem.hpp"

namespace al = attnlab;
using al::test::Problem;

namespace {

double loss(const Problem& p) {
  const auto f = al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
  double s = 0;
  for (int64_t i = 0; i < f.out.numel(); ++i) s += f.out.data()[i] * p.grad_out.data()[i];
  return s;
}

// Relative error of the analytic gradient of `x` (one of p.q, p.k, p.v).
double gradcheck(Problem& p, al::Tensor<double>& x, const al::Tensor<double>& analytic) {
  const double h = 1e-5;
  double err = 0, scale = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.data()[i];
    x.data()[i] = x0 + h;
    const double lp = loss(p);
    x.data()[i] = x0 - h;
    const double lm = loss(p);
    x.data()[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    err = std::max(err, std::abs(fd - analytic.data()[i]));
    scale = std::max(scale, std::abs(analytic.data()[i]));
  }
  return scale == 0 ? err : err / scale;
}

struct Scenario {
  const char* name;
  std::function<void(Problem&, std::mt19937_64&)> setup;
};

Problem base_problem(std::mt19937_64& rng, int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t d,
                     int64_t dv) {
  Problem p;
  p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.Nq = Nq, p.Nk = Nk, p.d = d, p.dv = dv;
  p.q = al::Tensor<double>({B, Hq, Nq, d});
  p.k = al::Tensor<double>({B, Hkv, Nk, d});
  p.v = al::Tensor<double>({B, Hkv, Nk, dv});
  p.grad_out = al::Tensor<double>({B, Hq, Nq, dv});
  for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
  return p;
}

void check(Problem& p, const char* name) {
  const auto opt = p.options();
  const auto f = al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), opt);
  const auto g = al::reference::attention_backward(p.q.view(), p.k.view(), p.v.view(), f, p.grad_out.view(), opt);
  EXPECT_LT(gradcheck(p, p.q, g.dq), 1e-6) << name << " dQ: " << p.describe();
  EXPECT_LT(gradcheck(p, p.k, g.dk), 1e-6) << name << " dK: " << p.describe();
  EXPECT_LT(gradcheck(p, p.v, g.dv), 1e-6) << name << " dV: " << p.describe();
}

}  // namespace

TEST(ReferenceGradcheck, NamedScenarios) {
  const std::vector<Scenario> scenarios = {
      {"no mask", [](Problem&, std::mt19937_64&) {}},
      {"causal top-left", [](Problem& p, std::mt19937_64&) { p.causal = al::Causal::top_left; }},
      {"causal bottom-right", [](Problem& p, std::mt19937_64&) { p.causal = al::Causal::bottom_right; }},
      {"boolean mask",
       [](Problem& p, std::mt19937_64& rng) {
         p.bool_mask = al::Tensor<uint8_t>({1, p.Hq, p.Nq, p.Nk});
         for (auto& m : p.bool_mask.storage()) m = std::bernoulli_distribution(0.6)(rng);
       }},
      {"additive mask",
       [](Problem& p, std::mt19937_64& rng) {
         p.additive_mask = al::Tensor<double>({p.B, 1, p.Nq, p.Nk});
         std::normal_distribution<double> n(0, 1);
         for (auto& m : p.additive_mask.storage()) m = std::bernoulli_distribution(0.2)(rng) ? -INFINITY : n(rng);
       }},
      {"padding", [](Problem& p, std::mt19937_64&) { p.key_lengths = {3, p.Nk}; }},
      {"fully masked rows",
       [](Problem& p, std::mt19937_64&) {
         p.bool_mask = al::Tensor<uint8_t>({p.B, 1, p.Nq, p.Nk}, 1);
         for (int64_t j = 0; j < p.Nk; ++j) p.bool_mask(0, 0, 1, j) = 0;  // row 1 of batch 0 sees nothing
         p.key_lengths = {p.Nk, 0};                                        // batch 1 has no keys at all
       }},
      {"entropy-invariant scale",
       [](Problem& p, std::mt19937_64&) {
         p.scale = al::ScalePolicy::entropy_invariant();
         p.causal = al::Causal::top_left;
       }},
      {"scalable softmax", [](Problem& p, std::mt19937_64&) {
         p.scale = al::ScalePolicy::scalable_softmax(0.8);
         p.key_lengths = {2, p.Nk};
       }},
      {"no scale", [](Problem& p, std::mt19937_64&) { p.scale = al::ScalePolicy::none(); }},
      {"1/d scale", [](Problem& p, std::mt19937_64&) { p.scale = al::ScalePolicy::inv_d(); }},
  };
  std::mt19937_64 rng(20);
  for (const auto& sc : scenarios) {
    // Square, then Nq ≠ Nk both ways, GQA (Hq = 4, Hkv = 2) and dv ≠ d.
    for (auto [Nq, Nk] : {std::pair<int64_t, int64_t>{5, 5}, {3, 6}, {6, 4}}) {
      Problem p = base_problem(rng, 2, 4, 2, Nq, Nk, 4, 3);
      sc.setup(p, rng);
      check(p, sc.name);
    }
  }
}

TEST(ReferenceGradcheck, MultiQueryAndSingleKey) {
  std::mt19937_64 rng(21);
  Problem mqa = base_problem(rng, 1, 3, 1, 4, 5, 2, 6);  // MQA: one K/V head for three query heads
  check(mqa, "multi-query");
  Problem one = base_problem(rng, 1, 1, 1, 3, 1, 3, 2);  // a single key: P = 1, dQ = dK = 0
  check(one, "single key");
}

TEST(ReferenceGradcheck, FullyMaskedRowsGiveZeroOutputLseMinusInfAndZeroGradients) {
  std::mt19937_64 rng(22);
  Problem p = base_problem(rng, 1, 2, 1, 3, 4, 2, 2);
  p.additive_mask = al::Tensor<double>({1, 1, 3, 4}, 0.0);
  for (int64_t j = 0; j < 4; ++j) p.additive_mask(0, 0, 2, j) = -INFINITY;  // row 2: all −inf
  const auto opt = p.options();
  const auto f = al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), opt);
  const auto g = al::reference::attention_backward(p.q.view(), p.k.view(), p.v.view(), f, p.grad_out.view(), opt);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(f.lse(0, h, 2, 0), -INFINITY);
    for (int64_t c = 0; c < 2; ++c) {
      EXPECT_EQ(f.out(0, h, 2, c), 0.0);
      EXPECT_EQ(g.dq(0, h, 2, c), 0.0);
    }
  }
  for (double x : g.dk.storage()) EXPECT_FALSE(std::isnan(x));
  for (double x : g.dv.storage()) EXPECT_FALSE(std::isnan(x));
}
