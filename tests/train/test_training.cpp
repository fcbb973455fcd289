// End-to-end: short real runs (seconds) on the engine.
#include <gtest/gtest.h>

#include <cmath>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"
#include "train/model.hpp"

namespace attnlab::train {
namespace {

// C20's arm without the hidden scale: additive_unit draws a ~ N(0, 1), the usual additive a ~ N(0, 1/d_k)
// (the 1/√d_k built into its init); the two are different scalings with their own names.
TEST(AdditiveScore, UnitInitDrawsAWithoutTheHiddenScale) {
  const Scaling usual = Scaling::parse("additive"), unit = Scaling::parse("additive_unit");
  EXPECT_EQ(unit.name(), "additive_unit");
  EXPECT_FALSE(usual == unit);
  auto a_std = [](const Scaling& s) {
    ModelConfig m;
    m.d_k = 256;
    m.scale = s;
    Model<float> model(m, TaskConfig{});
    model.init(7);
    for (const auto* p : model.params())
      if (p->name.size() >= 4 && p->name.compare(p->name.size() - 4, 4, ".w_a") == 0) {
        double s2 = 0;
        for (float x : p->value) s2 += static_cast<double>(x) * x;
        return std::sqrt(s2 / static_cast<double>(p->value.size()));
      }
    return -1.0;
  };
  EXPECT_NEAR(a_std(usual), 1.0 / 16, 0.01);  // 1/√256
  EXPECT_NEAR(a_std(unit), 1.0, 0.15);
}


RunConfig tiny_run() {
  RunConfig c;
  c.task.kind = TaskKind::copy_after_marker;
  c.task.seq_len = 8;
  c.task.n_content = 8;
  c.model.d_model = 16;
  c.model.d_k = 16;
  c.steps = 150;
  c.warmup = 10;
  c.batch = 32;
  c.eval_every = 25;
  c.eval_examples = 128;
  return c;
}

TEST(Training, ScaledAttentionLearnsTheCopyTask) {
  const RunResult r = train_run(tiny_run());
  ASSERT_FALSE(r.diverged);
  EXPECT_GE(r.final_accuracy, 0.9);
  EXPECT_GT(r.steps_to_threshold, 0);
  EXPECT_EQ(r.curve.front().step, 0);
  EXPECT_EQ(r.curve.back().step, 150);
  EXPECT_LT(r.curve.back().eval_loss, r.curve.front().eval_loss);
  // Chance is 1/8 at step 0.
  EXPECT_LT(r.curve.front().eval_accuracy, 0.4);
}

TEST(Training, Deterministic) {
  RunConfig c = tiny_run();
  c.steps = 20;
  c.eval_every = 10;
  const RunResult a = train_run(c), b = train_run(c);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t i = 0; i < a.curve.size(); ++i) EXPECT_EQ(a.curve[i].eval_loss, b.curve[i].eval_loss);
}

// The coordinate check: the logits' size at initialisation (1/√d_k: about 1 at every width;
// 1/d_k: about 1/√d_k), their change over the first steps, deterministic, bad steps an error.
TEST(Training, TraceLogitsAtInitAndThroughTheFirstSteps) {
  RunConfig c = tiny_run();
  c.lr = 3e-3;
  for (int64_t width : {16, 256}) {
    c.model.d_k = width;
    c.model.scale = ScalePolicy::inv_sqrt_d();
    const LogitTrace a = trace_logits(c, 3);
    ASSERT_EQ(a.rms.size(), 4u);
    ASSERT_FALSE(a.diverged);
    EXPECT_EQ(a.change[0], 0.0);
    EXPECT_GT(a.change[3], 0.0);
    EXPECT_NEAR(a.rms[0], 1.0, 0.5) << width;
    c.model.scale = ScalePolicy::inv_d();
    const LogitTrace b = trace_logits(c, 3);
    EXPECT_NEAR(b.rms[0] * std::sqrt(static_cast<double>(width)), a.rms[0], 1e-4 * a.rms[0]) << width;
    EXPECT_EQ(trace_logits(c, 3).change, b.change);  // deterministic
  }
  EXPECT_THROW(trace_logits(c, 0), Error);
}

TEST(Training, RejectsBadConfigs) {
  RunConfig c = tiny_run();
  c.steps = 0;
  EXPECT_THROW(train_run(c), Error);
  c = tiny_run();
  c.lr = std::nan("");
  EXPECT_THROW(train_run(c), Error);
  c = tiny_run();
  c.warmup = c.steps + 1;
  EXPECT_THROW(train_run(c), Error);
}

TEST(Training, HugeLearningRateIsReportedAsDivergence) {
  RunConfig c = tiny_run();
  c.optimizer = OptimizerKind::sgd;
  c.lr = 1e30;
  c.steps = 20;
  const RunResult r = train_run(c);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.steps_to_threshold, -1);
}

}  // namespace
}  // namespace attnlab::train
