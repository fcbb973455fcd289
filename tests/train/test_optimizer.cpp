#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attnlab/error.hpp"
#include "train/adam_update.hpp"
#include "train/optimizer.hpp"

namespace attnlab::train {
namespace {

TEST(Optimizer, AdamFirstStepMovesEachWeightByLrTimesSign) {
  Param<float> p("p", 1, 3);
  p.value = {1, 1, 1};
  p.grad = {1e-6f, -5.0f, 0.0f};
  Optimizer opt(OptimizerKind::adam, {&p});
  opt.step(0.01);
  // m̂ = g, v̂ = g²: the step is lr·g/(|g| + ε).
  EXPECT_NEAR(p.value[0], 1 - 0.01 * 1e-6 / (1e-6 + 1e-8), 1e-7);
  EXPECT_NEAR(p.value[1], 1.01, 1e-6);
  EXPECT_EQ(p.value[2], 1.0f);
}

// C19's matched arm: qk_lr_scale multiplies the rate of the query and key projections only.
TEST(Optimizer, QkLrScaleMultipliesOnlyTheQueryAndKeyRates) {
  for (OptimizerKind kind : {OptimizerKind::adam, OptimizerKind::sgd}) {
    Param<float> q("layer0.w_q", 1, 1), k("layer0.w_k", 1, 1), v("layer0.w_v", 1, 1);
    for (auto* p : {&q, &k, &v}) p->value = {1}, p->grad = {0.5f};
    OptimizerSettings settings;
    settings.qk_lr_scale = 0.25;
    Optimizer opt(kind, {&q, &k, &v}, settings);
    opt.step(0.01);
    const double moved_v = 1 - v.value[0];
    EXPECT_GT(moved_v, 0);
    EXPECT_NEAR(1 - q.value[0], 0.25 * moved_v, 1e-7) << to_string(kind);
    EXPECT_NEAR(1 - k.value[0], 0.25 * moved_v, 1e-7) << to_string(kind);
  }
}

TEST(Optimizer, AdamEpsilonStopsVanishingGradients) {
  // A gradient far below ε barely moves the weight: Adam cannot rescue it.
  Param<float> p("p", 1, 1);
  p.value = {1};
  p.grad = {1e-12f};
  Optimizer opt(OptimizerKind::adam, {&p});
  opt.step(0.01);
  EXPECT_NEAR(p.value[0], 1.0f, 1e-5);
}

TEST(Optimizer, SgdMomentum) {
  Param<float> p("p", 1, 1);
  p.value = {0};
  Optimizer opt(OptimizerKind::sgd, {&p});
  p.grad = {1};
  opt.step(0.1);  // m = 1
  EXPECT_NEAR(p.value[0], -0.1, 1e-7);
  p.grad = {1};
  opt.step(0.1);  // m = 0.9 + 1
  EXPECT_NEAR(p.value[0], -0.1 - 0.19, 1e-6);
}

// AdamW (the language-model study's): w ← w(1 − lr·λ) before the Adam step, on the
// parameters marked for decay only; β₂ from the settings.
TEST(Optimizer, AdamWDecaysTheMarkedParametersOnly) {
  Param<float> decayed("w", 1, 2), kept("b", 1, 2);
  decayed.value = kept.value = {2, -4};
  decayed.grad = kept.grad = {0, 0};
  OptimizerSettings s;
  s.beta2 = 0.95;
  s.weight_decay = 0.1;
  Optimizer opt(OptimizerKind::adam, {&decayed, &kept}, s, {true, false});
  opt.step(0.5);
  EXPECT_FLOAT_EQ(decayed.value[0], 2 * 0.95f);
  EXPECT_FLOAT_EQ(decayed.value[1], -4 * 0.95f);
  EXPECT_EQ(kept.value[0], 2.0f);
  // With a gradient: decay, then the step of size lr (first Adam step: m̂/√v̂ = sign g).
  decayed.value = {1, 1};
  decayed.grad = {3, -3};
  Optimizer second(OptimizerKind::adam, {&decayed}, s, {true});
  second.step(0.01);
  EXPECT_NEAR(decayed.value[0], 1 * (1 - 0.001) - 0.01, 1e-6);
  EXPECT_NEAR(decayed.value[1], 1 * (1 - 0.001) + 0.01, 1e-6);
  EXPECT_THROW(Optimizer(OptimizerKind::adam, {&decayed, &kept}, s, {true}), Error);
}

// The SIMD update (train/adam_update.cpp, the CPU's best target) gives the bits of the
// scalar double form, the studies' results depend on it: a fused multiply-add anywhere,
// or float arithmetic where the form has double, changes some of 10,000 entries. Sizes
// that leave a partial last vector on every target, with and without weight decay.
TEST(Optimizer, AdamUpdateGivesTheScalarFormsBitsOnThisCpusTarget) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t n : {1, 7, 9999}) {
    for (bool decay : {false, true}) {
      std::vector<float> w(n), g(n), m(n), v(n);
      for (size_t i = 0; i < n; ++i) {
        w[i] = normal(rng);
        g[i] = normal(rng) * 1e-3f;
        m[i] = normal(rng) * 1e-3f;
        v[i] = std::abs(normal(rng)) * 1e-6f;
      }
      const AdamScalars s{0.9, 0.95, 1e-8, 1 - std::pow(0.9, 3.0), 1 - std::pow(0.95, 3.0), 3e-3,
                          decay ? static_cast<float>(1.0 - 3e-3 * 0.1) : 1.0f};
      auto ew = w, em = m, ev = v;
      for (size_t i = 0; i < n; ++i) {
        if (decay) ew[i] *= s.shrink;
        em[i] = static_cast<float>(s.beta1 * em[i] + (1 - s.beta1) * g[i]);
        ev[i] = static_cast<float>(s.beta2 * ev[i] + (1 - s.beta2) * static_cast<double>(g[i]) * g[i]);
        const double mhat = em[i] / s.c1, vhat = ev[i] / s.c2;
        ew[i] -= static_cast<float>(s.rate * mhat / (std::sqrt(vhat) + s.eps));
      }
      adam_update(w.data(), g.data(), m.data(), v.data(), n, s);
      EXPECT_EQ(std::memcmp(w.data(), ew.data(), n * sizeof(float)), 0) << "w, n = " << n << ", decay " << decay;
      EXPECT_EQ(std::memcmp(m.data(), em.data(), n * sizeof(float)), 0) << "m, n = " << n;
      EXPECT_EQ(std::memcmp(v.data(), ev.data(), n * sizeof(float)), 0) << "v, n = " << n;
    }
  }
}

TEST(Schedule, WarmupThenCosineToATenth) {
  EXPECT_NEAR(learning_rate(1.0, 0, 100, 10), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(1.0, 9, 100, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(1.0, 10, 100, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(1.0, 100, 100, 10), 0.1, 1e-12);
  EXPECT_LT(learning_rate(1.0, 60, 100, 10), 1.0);
  EXPECT_GT(learning_rate(1.0, 60, 100, 10), 0.1);
}

}  // namespace
}  // namespace attnlab::train
