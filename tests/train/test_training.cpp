// End-to-end: short real runs (seconds) on the engine.
#include <gtest/gtest.h>

#include <cmath>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {
namespace {

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
