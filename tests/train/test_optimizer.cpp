#include <gtest/gtest.h>

#include <cmath>

#include "attnlab/error.hpp"
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
