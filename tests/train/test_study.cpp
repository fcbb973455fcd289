// The study's bookkeeping and the verdict rule, on hand-made results (no training),
// and a tiny real sweep on one and on two threads.
#include <algorithm>
#include <gtest/gtest.h>

#include "attnlab/error.hpp"
#include "attnlab/blas.hpp"
#include "attnlab/train.hpp"
#include "train/csv.hpp"

namespace attnlab::train {
namespace {

RunResult fake(OptimizerKind opt, int64_t d_k, const Scaling& scale, uint64_t seed, int64_t steps_to_90, double final_acc) {
  RunResult r;
  r.config.optimizer = opt;
  r.config.model.d_k = d_k;
  r.config.model.scale = scale;
  r.config.seed = seed;
  r.config.steps = 400;
  r.config.eval_every = 20;
  r.steps_to_threshold = steps_to_90;
  r.final_accuracy = final_acc;
  CurvePoint p0, p1;
  p0.entropy = 1.0;
  p1.step = 20;
  p1.grad_qk = 0.5;
  r.curve = {p0, p1};
  return r;
}

StudyResult fake_study(int64_t none_steps, double none_acc, int64_t sqrt_steps) {
  StudyResult s;
  s.config.d_ks = {16, 256};
  s.config.scales = {ScalePolicy::none(), ScalePolicy::inv_sqrt_d()};
  s.config.optimizers = {OptimizerKind::adam};
  s.config.seeds = 3;
  s.config.base.steps = 400;
  for (int64_t d : s.config.d_ks)
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      s.runs.push_back(fake(OptimizerKind::adam, d, ScalePolicy::none(), seed, d == 256 ? none_steps : 100,
                            d == 256 ? none_acc : 1.0));
      s.runs.push_back(fake(OptimizerKind::adam, d, ScalePolicy::inv_sqrt_d(), seed, sqrt_steps, 1.0));
    }
  return s;
}

// Learning rates: a sweep axis for tuning, each cell's best rate, and tuned rates applied.
TEST(Study, LearningRatesAreASweepAxisThenOnePerCell) {
  StudyConfig c;
  c.d_ks = {16};
  c.seeds = 2;
  c.optimizers = {OptimizerKind::adam};
  c.scales = {ScalePolicy::none(), ScalePolicy::inv_sqrt_d()};
  // No rate given: the optimiser's default, written into every run.
  for (const auto& r : expand(c)) EXPECT_EQ(r.lr, default_lr(OptimizerKind::adam));
  // The tuning study: every cell at every rate of the grid, on its own seeds.
  const StudyConfig t = tuning_study(c, 3, 501);
  const auto grid = tuning_grid(OptimizerKind::adam);
  const auto runs = expand(t);
  ASSERT_EQ(runs.size(), 2u * grid.size() * 3);
  EXPECT_EQ(runs[0].lr, grid[0]);
  EXPECT_EQ(runs[0].seed, 501u);
  EXPECT_EQ(runs[3].lr, grid[1]);
  // Tuned rates apply per cell; a cell without one falls back to the default.
  c.tuned = {{TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "none", 0.01}};
  const auto tuned = expand(c);
  EXPECT_EQ(tuned[0].lr, 0.01);
  EXPECT_EQ(tuned[2].lr, default_lr(OptimizerKind::adam));
  c.adam_lrs = {0.0};
  EXPECT_THROW(expand(c), Error);
}

TEST(Study, BestRateLearnsAndKeepsItThenIsFastest) {
  auto cell = [](double lr, double steps, double accuracy, int64_t reached = 3) {
    CellSummary c;
    c.d_k = 64;
    c.scale = ScalePolicy::none();
    c.lr = lr;
    c.runs = 3;
    c.reached = reached;
    c.median_steps = steps;
    c.mean_final_accuracy = accuracy;
    return c;
  };
  const double t = 0.9;
  EXPECT_EQ(best_rates({cell(0.01, 200, 1), cell(0.003, 120, 1), cell(0.001, 160, 1)}, t).front().lr, 0.003);
  // Reaching 90 % fastest and then collapsing loses to a slower rate that keeps it.
  EXPECT_EQ(best_rates({cell(0.1, 60, 0.36), cell(0.03, 120, 1)}, t).front().lr, 0.03);
  EXPECT_EQ(best_rates({cell(0.01, 320, 0.5, 0), cell(0.003, 320, 0.7, 0)}, t).front().lr, 0.003);  // both censored
  EXPECT_EQ(best_rates({cell(0.01, 160, 0.95, 3), cell(0.003, 140, 0.92, 2)}, t).front().lr, 0.01);  // more runs
  EXPECT_EQ(best_rates({cell(0.01, 120, 1), cell(0.003, 120, 1)}, t).front().lr, 0.003);
  CellSummary other = cell(0.1, 100, 1);
  other.d_k = 256;
  const auto best = best_rates({cell(0.01, 200, 1), other}, t);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[1].d_k, 256);
  EXPECT_EQ(best[1].scale, "none");
}

// The mechanism beside the outcome: why a slow or failing cell fails.
TEST(Study, DiagnosisNamesTheMechanism) {
  CellSummary base;
  base.median_steps = 100;
  base.mean_grad_qk_first = 1.0;
  CellSummary c = base;
  EXPECT_EQ(diagnose(c, base), Diagnosis::learns);
  c.median_censored = true;
  c.median_steps = 320;
  c.mean_max_prob_start = 0.95;
  EXPECT_EQ(diagnose(c, base), Diagnosis::saturated_at_init);
  c.mean_max_prob_start = 0.3;
  c.mean_grad_qk_first = 0.05;
  EXPECT_EQ(diagnose(c, base), Diagnosis::small_gradient);
  c.mean_grad_qk_first = 2.0;
  c.mean_max_prob_end = 0.999;
  EXPECT_EQ(diagnose(c, base), Diagnosis::saturates_in_training);
  c.mean_max_prob_end = 0.5;
  EXPECT_EQ(diagnose(c, base), Diagnosis::other);
  c.median_censored = false;
  c.median_steps = 140;  // slower than the baseline but within 1.5×
  EXPECT_EQ(diagnose(c, base), Diagnosis::learns);
}

// The report's quick study runs every cell at a rate the full sweep chose (none at a default).
TEST(Study, QuickStudyHasATunedRateForEveryCell) {
  const StudyConfig q = quick_study();
  for (const auto& task : q.tasks)
    for (InitMode init : q.inits)
      for (OptimizerKind opt : q.optimizers)
        for (int64_t d : q.d_ks)
          for (const Scaling& sc : q.scales) {
            bool found = false;
            for (const auto& t : q.tuned)
              found = found || (t.task == task.kind && t.init == init && t.optimizer == opt && t.d_k == d &&
                                t.scale == sc.name());
            EXPECT_TRUE(found) << to_string(opt) << " d_k " << d << " " << sc.name();
          }
  const auto grid_adam = tuning_grid(OptimizerKind::adam), grid_sgd = tuning_grid(OptimizerKind::sgd);
  for (const auto& t : cached_rates()) {
    const auto& grid = t.optimizer == OptimizerKind::adam ? grid_adam : grid_sgd;
    EXPECT_NE(std::find(grid.begin(), grid.end(), t.lr), grid.end()) << t.lr;
  }
}

TEST(Study, ExpandCoversTheSweepInOrder) {
  StudyConfig c;
  c.seeds = 3;
  const auto runs = expand(c);
  ASSERT_EQ(runs.size(), 4u * 4 * 2 * 3);
  EXPECT_EQ(runs[0].model.d_k, 16);
  EXPECT_EQ(runs[0].model.scale, ScalePolicy::none());
  EXPECT_EQ(runs[0].seed, 1u);
  EXPECT_EQ(runs[2].seed, 3u);
  EXPECT_EQ(runs[3].model.scale, ScalePolicy::inv_sqrt_d());
  EXPECT_EQ(runs.back().optimizer, OptimizerKind::sgd);
  c.seeds = 0;
  EXPECT_THROW(expand(c), Error);
}

TEST(Study, CellsCensorRunsThatNeverReached) {
  const auto cells = summarise(fake_study(-1, 0.2, 100));
  ASSERT_EQ(cells.size(), 4u);
  const auto& none256 = cells[2];
  EXPECT_EQ(none256.d_k, 256);
  EXPECT_EQ(none256.scale, ScalePolicy::none());
  EXPECT_EQ(none256.reached, 0);
  EXPECT_TRUE(none256.median_censored);
  EXPECT_EQ(none256.median_steps, 420);
  EXPECT_NEAR(none256.mean_final_accuracy, 0.2, 1e-12);
  EXPECT_EQ(cells[3].median_steps, 100);
  EXPECT_FALSE(cells[3].median_censored);
}

TEST(Verdict, ConfirmedWhenUnscaledNeverLearns) {
  const auto v = verdicts(fake_study(-1, 0.2, 100));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].outcome, lab::Outcome::confirmed);
  EXPECT_NE(v[0].measured_text.find("0/3"), std::string::npos) << v[0].measured_text;
}

TEST(Verdict, ConfirmedWhenUnscaledIsMuchSlower) { EXPECT_EQ(verdicts(fake_study(300, 1.0, 100))[0].outcome, lab::Outcome::confirmed); }

TEST(Verdict, RefutedWhenUnscaledIsAsFast) { EXPECT_EQ(verdicts(fake_study(110, 1.0, 100))[0].outcome, lab::Outcome::refuted); }

TEST(Verdict, InconclusiveInBetween) { EXPECT_EQ(verdicts(fake_study(130, 1.0, 100))[0].outcome, lab::Outcome::inconclusive); }

TEST(Verdict, InconclusiveWhenTheBaselineDoesNotLearn) {
  EXPECT_EQ(verdicts(fake_study(-1, 0.2, -1))[0].outcome, lab::Outcome::inconclusive);
}

TEST(Study, CsvTablesHaveOneRowPerRunPointAndCell) {
  const StudyResult s = fake_study(-1, 0.2, 100);
  auto lines = [](const std::string& t) { return std::count(t.begin(), t.end(), '\n'); };
  EXPECT_EQ(lines(runs_csv(s)), 1 + 12);
  EXPECT_EQ(lines(curves_csv(s)), 1 + 24);
  EXPECT_EQ(lines(cells_csv(summarise(s))), 1 + 4);
}

TEST(Study, RunsTinySweepOnThreads) {
  StudyConfig c;
  c.d_ks = {8};
  c.scales = {ScalePolicy::inv_sqrt_d(), ScalePolicy::none()};
  c.optimizers = {OptimizerKind::adam};
  c.seeds = 2;
  c.base.steps = 10;
  c.base.eval_every = 5;
  c.base.eval_examples = 32;
  c.base.warmup = 2;
  c.threads = 2;
  int64_t calls = 0;
  // OpenBLAS's thread count is the program's to set: the study leaves it alone.
  const int blas_threads = attnlab::blas::threads();
  const StudyResult r = run_study(c, [&](const StudyProgress& p) {
    ++calls;
    EXPECT_EQ(p.total, 4);
    EXPECT_GE(p.eta_seconds, 0.0);
    EXPECT_EQ(attnlab::blas::threads(), blas_threads);
  });
  EXPECT_EQ(attnlab::blas::threads(), blas_threads);
  EXPECT_EQ(calls, 4);
  ASSERT_EQ(r.runs.size(), 4u);
  EXPECT_EQ(r.runs[1].config.seed, 2u);
  EXPECT_EQ(r.runs[2].config.model.scale, ScalePolicy::none());
  EXPECT_EQ(r.runs[3].curve.back().step, 10);

  // The same study on one thread: the same numbers, bit for bit (seconds aside).
  c.threads = 1;
  const StudyResult one = run_study(c);
  ASSERT_EQ(one.runs.size(), r.runs.size());
  for (size_t i = 0; i < r.runs.size(); ++i) {
    ASSERT_EQ(one.runs[i].curve.size(), r.runs[i].curve.size());
    for (size_t k = 0; k < r.runs[i].curve.size(); ++k) {
      EXPECT_EQ(one.runs[i].curve[k].eval_loss, r.runs[i].curve[k].eval_loss);
      EXPECT_EQ(one.runs[i].curve[k].entropy, r.runs[i].curve[k].entropy);
    }
  }
  EXPECT_EQ(curves_csv(one), curves_csv(r));
  EXPECT_EQ(cells_csv(summarise(one)), cells_csv(summarise(r)));
}

TEST(Study, ProgressErrorsReachTheCaller) {
  StudyConfig c;
  c.d_ks = {8};
  c.scales = {ScalePolicy::inv_sqrt_d()};
  c.optimizers = {OptimizerKind::adam};
  c.seeds = 3;
  c.base.steps = 2;
  c.base.eval_every = 1;
  c.base.eval_examples = 8;
  c.base.warmup = 0;
  c.threads = 2;
  EXPECT_THROW(run_study(c, [](const StudyProgress&) { throw Error("stop"); }), Error);
}

}  // namespace
}  // namespace attnlab::train
