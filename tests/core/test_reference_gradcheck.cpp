// The reference's dQ, dK, dV against central finite differences of
// loss = Σ dO ∘ O, in double. Rule: max|fd − analytic| / max|analytic| < 1e-6
// (step 1e-5: truncation ≈ 1e-10, rounding ≈ 1e-11, so 1e-6 leaves a wide margin
// while any wrong term, which is O(1), fails it).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "problem.hpp"

namespace al = attnlab;
using al::test::Problem;

namespace {

double loss(const Problem& p) {
  const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
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


// The sinks' gradient (dsinks, returned by the backward) by the same central differences.
double gradcheck_sinks(Problem& p, const std::vector<double>& analytic) {
  const double h = 1e-5;
  double err = 0, scale = 0;
  for (size_t i = 0; i < p.sinks.size(); ++i) {
    const double x0 = p.sinks[i];
    p.sinks[i] = x0 + h;
    const double lp = loss(p);
    p.sinks[i] = x0 - h;
    const double lm = loss(p);
    p.sinks[i] = x0;
    err = std::max(err, std::abs((lp - lm) / (2 * h) - analytic[i]));
    scale = std::max(scale, std::abs(analytic[i]));
  }
  return scale == 0 ? err : err / scale;
}

void check(Problem& p, const char* name) {
  const auto opt = p.options();
  const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), opt);
  const auto g = al::detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), f, p.grad_out.view(), opt);
  EXPECT_LT(gradcheck(p, p.q, g.dq), 1e-6) << name << " dQ: " << p.describe();
  EXPECT_LT(gradcheck(p, p.k, g.dk), 1e-6) << name << " dK: " << p.describe();
  EXPECT_LT(gradcheck(p, p.v, g.dv), 1e-6) << name << " dV: " << p.describe();
  ASSERT_EQ(g.dsinks.size(), p.sinks.size()) << name;
  if (!p.sinks.empty()) EXPECT_LT(gradcheck_sinks(p, g.dsinks), 1e-6) << name << " dsinks: " << p.describe();
}

std::vector<double> random_values(std::mt19937_64& rng, int64_t n, double lo, double hi) {
  std::vector<double> x(static_cast<size_t>(n));
  for (double& v : x) v = std::uniform_real_distribution<double>(lo, hi)(rng);
  return x;
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
      // The variants (attention_variants.hpp), alone and with the options above.
      {"window (1, 0)", [](Problem& p, std::mt19937_64&) { p.window = {1, 0}; }},
      {"window (0, 2) with causal top-left",
       [](Problem& p, std::mt19937_64&) {
         p.window = {0, 2};
         p.causal = al::Causal::top_left;
       }},
      {"window (2, -1) with padding and ssmax",
       [](Problem& p, std::mt19937_64&) {
         p.window = {2, -1};
         p.key_lengths = {3, p.Nk};
         p.scale = al::ScalePolicy::scalable_softmax(0.8);
       }},
      {"softcap", [](Problem& p, std::mt19937_64&) { p.softcap = 0.7; }},  // small: tanh far from linear
      {"softcap with additive mask and causal bottom-right",
       [](Problem& p, std::mt19937_64& rng) {
         p.softcap = 1.5;
         p.causal = al::Causal::bottom_right;
         p.additive_mask = al::Tensor<double>({1, p.Hq, p.Nq, p.Nk});
         al::test::fill_normal(p.additive_mask, rng);
       }},
      {"ALiBi per head", [](Problem& p, std::mt19937_64& rng) { p.alibi_slopes = random_values(rng, p.Hq, 0.1, 1.0); }},
      {"ALiBi per batch and head with padding and softcap",
       [](Problem& p, std::mt19937_64& rng) {
         p.alibi_slopes = random_values(rng, p.B * p.Hq, 0.1, 1.0);
         p.key_lengths = {p.Nk - 1, 2};
         p.softcap = 2.0;
       }},
      {"sinks", [](Problem& p, std::mt19937_64& rng) { p.sinks = random_values(rng, p.Hq, -1.0, 1.5); }},
      {"sinks with fully masked rows and causal top-left",
       [](Problem& p, std::mt19937_64& rng) {
         p.sinks = random_values(rng, p.Hq, -1.0, 1.5);
         p.causal = al::Causal::top_left;
         p.key_lengths = {p.Nk, 0};  // batch 1 sees no key: all mass on the sink
       }},
      {"dropout", [](Problem& p, std::mt19937_64&) { p.dropout_p = 0.3, p.seed = 17; }},
      {"dropout with sinks, ALiBi and a boolean mask",
       [](Problem& p, std::mt19937_64& rng) {
         p.dropout_p = 0.5, p.seed = 99;
         p.sinks = random_values(rng, p.Hq, -1.0, 1.0);
         p.alibi_slopes = random_values(rng, p.Hq, 0.1, 0.5);
         p.bool_mask = al::Tensor<uint8_t>({p.B, 1, p.Nq, p.Nk});
         for (auto& m : p.bool_mask.storage()) m = std::bernoulli_distribution(0.7)(rng);
       }},
      {"mask_mod and score_mod",
       [](Problem& p, std::mt19937_64&) {
         // A striped mask and a smooth non-linear score: s + 0.3·sin(s + q − k), derivative 1 + 0.3·cos(...).
         static const auto stripes = al::make_mask_mod([](int64_t, int64_t h, int64_t q, int64_t k) {
           return (q + k + h) % 3 != 0;
         });
         static const auto wobble = al::make_score_mod(
             [](auto s, int64_t, int64_t, int64_t q, int64_t k) { return s + 0.3 * std::sin(s + double(q - k)); },
             [](auto s, int64_t, int64_t, int64_t q, int64_t k) { return 1 + 0.3 * std::cos(s + double(q - k)); });
         p.mask_mod = &stripes;
         p.score_mod = &wobble;
         p.softcap = 2.0;
       }},
      {"everything at once",
       [](Problem& p, std::mt19937_64& rng) {
         p.window = {2, 1};
         p.causal = al::Causal::bottom_right;
         p.softcap = 1.2;
         p.alibi_slopes = random_values(rng, p.B * p.Hq, 0.1, 0.6);
         p.sinks = random_values(rng, p.Hq, -0.5, 1.0);
         p.dropout_p = 0.25, p.seed = 5;
         p.scale = al::ScalePolicy::entropy_invariant();
       }},
  };
  std::mt19937_64 rng(20);
  for (const auto& sc : scenarios) {
    // Square, then Nq ≠ Nk both ways, GQA (Hq = 4, Hkv = 2) and dv ≠ d.
    for (auto [Nq, Nk] : {std::pair<int64_t, int64_t>{5, 5}, {3, 6}, {6, 4}}) {
      Problem p = al::test::make_problem(rng, 2, 4, 2, Nq, Nk, 4, 3);
      sc.setup(p, rng);
      check(p, sc.name);
    }
  }
}

TEST(ReferenceGradcheck, MultiQueryAndSingleKey) {
  std::mt19937_64 rng(21);
  Problem mqa = al::test::make_problem(rng, 1, 3, 1, 4, 5, 2, 6);  // MQA: one K/V head for three query heads
  check(mqa, "multi-query");
  Problem one = al::test::make_problem(rng, 1, 1, 1, 3, 1, 3, 2);  // a single key: P = 1, dQ = dK = 0
  check(one, "single key");
}

TEST(ReferenceGradcheck, FullyMaskedRowsGiveZeroOutputLseMinusInfAndZeroGradients) {
  std::mt19937_64 rng(22);
  Problem p = al::test::make_problem(rng, 1, 2, 1, 3, 4, 2, 2);
  p.additive_mask = al::Tensor<double>({1, 1, 3, 4}, 0.0);
  for (int64_t j = 0; j < 4; ++j) p.additive_mask(0, 0, 2, j) = -INFINITY;  // row 2: all −inf
  const auto opt = p.options();
  const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), opt);
  const auto g = al::detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), f, p.grad_out.view(), opt);
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

// Packed sequences (cu_seqlens): batch 1, several sequences of different lengths (one
// of no queries, one of no keys), alone and with causality, the window, ALiBi per
// sequence, sinks, softcap and dropout.
TEST(ReferenceGradcheck, PackedSequences) {
  std::mt19937_64 rng(23);
  const std::vector<std::function<void(Problem&)>> setups = {
      [](Problem&) {},
      [](Problem& p) { p.causal = al::Causal::top_left; },
      [](Problem& p) { p.causal = al::Causal::bottom_right, p.window = {1, -1}; },
      [&](Problem& p) { p.alibi_slopes = random_values(rng, 4 * p.Hq, 0.1, 0.8), p.window = {-1, 1}; },
      [&](Problem& p) { p.sinks = random_values(rng, p.Hq, -1, 1), p.softcap = 1.0, p.dropout_p = 0.2, p.seed = 3; },
  };
  for (const auto& setup : setups) {
    Problem p = al::test::make_problem(rng, 1, 2, 1, 8, 9, 3, 2);
    p.cu_seqlens_q = {0, 3, 3, 6, 8};  // lengths 3, 0, 3, 2
    p.cu_seqlens_k = {0, 2, 5, 5, 9};  // lengths 2, 3, 0, 4: sequence 2 has queries but no keys
    setup(p);
    check(p, "packed");
  }
}

