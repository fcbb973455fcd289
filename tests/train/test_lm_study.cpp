// The language-model study's bookkeeping and C8's rule on it, with a stand-in trainer that
// writes made-up curves (no model is trained here: test_lm_experiment.cpp trains one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/error.hpp"
#include "attnlab/lab.hpp"
#include "attnlab/lm_study.hpp"

namespace attnlab::train::lm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A corpus of two characters: "ab" repeated, so the bigram model predicts perfectly but for
// the add-one smoothing.
Corpus two_letters() {
  Corpus c;
  c.name = "ab";
  c.alphabet = "ab";
  for (int i = 0; i < 1000; ++i) c.train.push_back(static_cast<uint8_t>(i % 2));
  for (int i = 0; i < 100; ++i) c.validation.push_back(static_cast<uint8_t>(i % 2));
  return c;
}

// What a made-up run does: its final loss (NaN = diverged) and the step it first gets within
// 0.01 of it (the curve falls linearly from 6 to `final` by then, and stays).
struct Behaviour {
  double final_bpc;
  int64_t settles_at;
};
using Script = std::function<Behaviour(const LmRunConfig&)>;

LmTrainer scripted(const Script& script) {
  return [script](const LmRunConfig& c, const Corpus&) {
    const Behaviour b = script(c);
    LmRunResult r;
    r.config = c;
    for (int64_t t = 0; t <= c.steps; t += c.eval_every) {
      LmCurvePoint p;
      p.step = t;
      if (std::isnan(b.final_bpc) && t > b.settles_at) {
        r.diverged = true;
        break;
      }
      const double f = std::isnan(b.final_bpc) ? 5.0 : b.final_bpc;
      p.val_bpc = t >= b.settles_at ? f : 6.0 - (6.0 - f) * static_cast<double>(t) / static_cast<double>(b.settles_at);
      p.entropy = {1.0, 2.0};
      p.max_prob = {0.5, 0.25};
      p.grad_norm_q = t == 0 ? std::nan("") : 0.1;
      p.grad_norm_k = t == 0 ? std::nan("") : 0.2;
      r.curve.push_back(p);
    }
    r.final_val_bpc = r.diverged ? std::nan("") : r.curve.back().val_bpc;
    return r;
  };
}

LmStudyConfig two_arms(int64_t seeds = 3) {
  LmStudyConfig c;
  c.groups = {{LmInit::unit, LmOptimizer::adamw, {Arm::inv_sqrt_d(), Arm::none()}}};
  c.d_ks = {16, 256};
  c.seeds = seeds;
  c.base.steps = 300;
  c.base.eval_every = 25;
  return c;
}

// The seeds differ by a little, so that ranges are ranges.
double jitter(const LmRunConfig& c) { return 0.01 * static_cast<double>(c.seed - 1); }
bool unscaled(const LmRunConfig& c) { return c.model.scale == Scaling(ScalePolicy::none()); }

std::vector<lab::Verdict> judge(const LmStudyConfig& c, const Script& script) {
  const Corpus corpus = two_letters();
  const LmStudyResult s = run_lm_study(c, corpus, scripted(script));
  return verdicts(s, 3.0);  // a bigram baseline of 3 bits
}

TEST(LmStudy, ArmsNameThemselvesAndScaleAtEachDk) {
  for (const Arm& a : {Arm::inv_sqrt_d(), Arm::none(), Arm::inv_d(), Arm::alpha_sqrt(2), Arm::alpha_sqrt(0.5),
                       Arm::qk_norm()})
    EXPECT_EQ(Arm::parse(a.name()), a) << a.name();
  EXPECT_EQ(Arm::alpha_sqrt(2).name(), "alpha2");
  EXPECT_EQ(Arm::alpha_sqrt(4).label(), "4/√d_k");
  EXPECT_DOUBLE_EQ(Arm::alpha_sqrt(2).at(64).policy.parameter(), 0.25);
  EXPECT_TRUE(Arm::qk_norm().at(16).qk_norm);
  for (const char* bad : {"alpha", "alpha0", "alpha-1", "alphax", "sqrt", ""})
    EXPECT_THROW(Arm::parse(bad), Error) << bad;
}

TEST(LmStudy, SweepOrderRatesAndCosts) {
  LmStudyConfig c = two_arms(2);
  c.groups.push_back({LmInit::gpt2, LmOptimizer::sgd, {Arm::none()}});
  const auto runs = expand(c);
  const auto where = places(c);
  ASSERT_EQ(runs.size(), (2 * 2 + 2) * 2u);  // (AdamW: 2 d_k × 2 arms; SGD: 2 d_k × 1 arm) × 2 seeds
  ASSERT_EQ(where.size(), runs.size());
  EXPECT_EQ(runs[0].model.d_k, 16);
  EXPECT_EQ(runs[1].seed, 2u);  // the seed is the innermost axis
  EXPECT_EQ(where[2].arm, Arm::none());
  EXPECT_EQ(runs.back().optimizer, LmOptimizer::sgd);
  EXPECT_EQ(runs.back().lr, default_lm_lr(LmOptimizer::sgd));
  // A tuned rate applies to its cell only; the tuning study crosses every cell with the grid.
  c.tuned = {{LmInit::unit, LmOptimizer::adamw, 256, "none", 0.01}};
  for (const auto& r : expand(c))
    EXPECT_EQ(r.lr, r.model.d_k == 256 && r.model.init == LmInit::unit && r.model.scale == Scaling(ScalePolicy::none())
                        ? 0.01
                        : default_lm_lr(r.optimizer));
  const auto tuning = expand(lm_tuning_study(c, 1, 501));
  EXPECT_EQ(tuning.size(), 4 * lm_tuning_grid(LmOptimizer::adamw).size() + 2 * lm_tuning_grid(LmOptimizer::sgd).size());
  EXPECT_EQ(tuning.front().seed, 501u);
  // d_k = 256 costs more than 16; cost grows with steps.
  LmRunConfig small = runs[0], big = runs[0];
  big.model.d_k = 256;
  EXPECT_GT(run_cost(big), 2 * run_cost(small));
  c.seeds = 0;
  EXPECT_THROW(expand(c), Error);
}

TEST(LmStudy, SameResultOnAnyThreadCountAndOnlyThePickedRuns) {
  const Corpus corpus = two_letters();
  LmStudyConfig c = two_arms(2);
  const auto trainer = scripted([](const LmRunConfig& r) { return Behaviour{2.0 + jitter(r), 100}; });
  c.threads = 1;
  const auto one = run_lm_study(c, corpus, trainer);
  c.threads = 2;
  const auto two = run_lm_study(c, corpus, trainer);
  ASSERT_EQ(one.runs.size(), two.runs.size());
  for (size_t i = 0; i < one.runs.size(); ++i) {
    EXPECT_EQ(one.runs[i].final_val_bpc, two.runs[i].final_val_bpc);
    EXPECT_EQ(one.runs[i].config.model.vocab, 2);  // the corpus's alphabet
  }
  const std::vector<int64_t> only{1, 3};
  const auto part = run_lm_study(c, corpus, trainer, {}, &only);
  EXPECT_TRUE(part.runs[0].curve.empty());
  EXPECT_FALSE(part.runs[1].curve.empty());
  const std::vector<int64_t> outside{99};
  EXPECT_THROW(run_lm_study(c, corpus, trainer, {}, &outside), Error);
}

TEST(LmStudy, BigramBaselineAndStepsToALoss) {
  // "abab…": after a, b follows every time; add-one smoothing over 2 letters gives
  // P = (500 + 1)/(500 + 2) or so, a small loss.
  const double bpc = bigram_bpc(two_letters());
  EXPECT_GT(bpc, 0);
  EXPECT_LT(bpc, 0.01);
  Corpus empty;
  EXPECT_THROW(bigram_bpc(empty), Error);
  const LmRunResult r = scripted([](const LmRunConfig&) { return Behaviour{2.0, 100}; })(two_arms().base, two_letters());
  EXPECT_EQ(steps_to(r, 2.0), 100);
  EXPECT_EQ(steps_to(r, 6.0), 0);
  EXPECT_EQ(steps_to(r, 1.0), -1);
}

TEST(LmStudy, CellsCountDivergedRunsAsWorstAndMeasureStepsToTheScaledLoss) {
  const Corpus corpus = two_letters();
  LmStudyConfig c = two_arms(3);
  c.d_ks = {64};
  // 1/√d_k ends at 2.0 by step 100; unscaled: one seed diverges, the others end at 2.5 by 200.
  const auto s = run_lm_study(c, corpus, scripted([](const LmRunConfig& r) {
    if (!unscaled(r)) return Behaviour{2.0, 100};
    return r.seed == 2 ? Behaviour{std::nan(""), 50} : Behaviour{2.5, 200};
  }));
  const auto cells = summarise(s, 3.0);
  ASSERT_EQ(cells.size(), 2u);
  const LmCell &sqrt = cells[0], &none = cells[1];
  EXPECT_EQ(sqrt.learnt, 3);
  EXPECT_EQ(none.learnt, 2);
  EXPECT_EQ(none.diverged, 1);
  EXPECT_EQ(none.max_final, kInf);
  EXPECT_DOUBLE_EQ(none.median_final, 2.5);
  EXPECT_DOUBLE_EQ(sqrt.threshold, 2.1);  // 2.0 + lm_threshold_margin_bpc
  EXPECT_DOUBLE_EQ(sqrt.median_steps, 100);
  // Unscaled never gets below 2.1: censored at the budget + one evaluation.
  EXPECT_DOUBLE_EQ(none.median_steps, 325);
  EXPECT_TRUE(none.steps_censored);
  EXPECT_DOUBLE_EQ(sqrt.entropy_init, 1.5);  // mean over layers
  EXPECT_DOUBLE_EQ(sqrt.grad_k_first, 0.2);
}

TEST(LmStudy, BestRateIsTheLowestFinalLossAndNeverADivergedOne) {
  const Corpus corpus = two_letters();
  LmStudyConfig c = two_arms(1);
  c.d_ks = {16};
  c.adamw_lrs = {1e-3, 3e-3, 1e-2};
  const auto s = run_lm_study(c, corpus, scripted([](const LmRunConfig& r) {
    if (r.lr == 1e-2) return Behaviour{std::nan(""), 50};  // the largest rate diverges
    return Behaviour{r.lr == 3e-3 ? 2.0 : 2.2, 100};
  }));
  const auto best = best_rates(summarise(s, 3.0));
  ASSERT_EQ(best.size(), 2u);
  for (const auto& b : best) EXPECT_EQ(b.lr, 3e-3) << b.arm;
}

TEST(LmStudy, EveryCellOfTheFullStudyHasOneCachedRateOnTheTuningGrid) {
  // The cached rates are the full study's choices: a cell without one would silently run at
  // the default rate, and a rate off the grid could not have been chosen by the tuning.
  const LmStudyConfig full = full_lm_study();
  size_t cells = 0;
  for (const LmGroup& g : full.groups)
    for (int64_t d_k : full.d_ks)
      for (const Arm& arm : g.arms) {
        ++cells;
        int found = 0;
        for (const LmTunedRate& t : lm_cached_rates())
          if (t.init == g.init && t.optimizer == g.optimizer && t.d_k == d_k && t.arm == arm.name()) {
            ++found;
            const auto grid = lm_tuning_grid(g.optimizer);
            EXPECT_NE(std::find(grid.begin(), grid.end(), t.lr), grid.end()) << arm.name() << " d_k " << d_k;
          }
        EXPECT_EQ(found, 1) << to_string(g.init) << " " << to_string(g.optimizer) << " d_k " << d_k << " " << arm.name();
      }
  EXPECT_EQ(lm_cached_rates().size(), cells);
}

// ---- C8's rule on the language model -----------------------------------------------------

TEST(LmVerdict, SlowerUnscaledConfirmsPerDk) {
  // Unscaled reaches the scaled loss only at step 250 at d_k 256 (as fast at 16).
  const auto v = judge(two_arms(), [](const LmRunConfig& r) {
    if (unscaled(r) && r.model.d_k == 256) return Behaviour{2.05 + jitter(r), 250};
    return Behaviour{2.0 + jitter(r), 100};
  });
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].outcome, lab::Outcome::confirmed) << v[0].measured_text;
  EXPECT_FALSE(v[0].supplementary);
  ASSERT_EQ(v[0].ranges.size(), 2u);
  EXPECT_EQ(v[0].ranges[0].outcome, lab::Outcome::refuted);  // d_k 16: as fast
  EXPECT_EQ(v[0].ranges[1].outcome, lab::Outcome::confirmed);
  EXPECT_NE(v[0].method.find("300 steps"), std::string::npos) << v[0].method;  // the budget is stated
}

TEST(LmVerdict, DivergedOrStuckUnscaledRunsConfirm) {
  const auto diverged = judge(two_arms(), [](const LmRunConfig& r) {
    if (unscaled(r) && r.seed == 1) return Behaviour{std::nan(""), 50};
    return Behaviour{2.0 + jitter(r), 100};
  });
  EXPECT_EQ(diverged[0].outcome, lab::Outcome::confirmed) << diverged[0].measured_text;
  // Ending above the bigram baseline (3 bits) is not learning.
  const auto stuck = judge(two_arms(), [](const LmRunConfig& r) {
    return unscaled(r) ? Behaviour{3.2 + jitter(r), 100} : Behaviour{2.0 + jitter(r), 100};
  });
  EXPECT_EQ(stuck[0].outcome, lab::Outcome::confirmed) << stuck[0].measured_text;
}

// Breaking configuration: the unscaled arm learns as fast, so the claim must not be confirmed.
TEST(LmVerdict, UnscaledAsFastRefutes) {
  const auto v = judge(two_arms(), [](const LmRunConfig& r) { return Behaviour{2.0 + jitter(r), 100}; });
  EXPECT_EQ(v[0].outcome, lab::Outcome::refuted) << v[0].measured_text;
  // Slower by 1.25× and worse by less than the margin: between the margins.
  const auto close = judge(two_arms(), [](const LmRunConfig& r) {
    return unscaled(r) ? Behaviour{2.03 + jitter(r), 115} : Behaviour{2.0 + jitter(r), 100};
  });
  EXPECT_EQ(close[0].outcome, lab::Outcome::inconclusive) << close[0].measured_text;
}

// Breaking configuration: the scaled arm fails too, so nothing can be said.
TEST(LmVerdict, ScaledArmFailingIsInconclusive) {
  const auto v = judge(two_arms(), [](const LmRunConfig& r) {
    return unscaled(r) ? Behaviour{std::nan(""), 50} : Behaviour{3.5 + jitter(r), 100};
  });
  EXPECT_EQ(v[0].outcome, lab::Outcome::inconclusive) << v[0].measured_text;
  EXPECT_NE(v[0].measured_text.find("Nothing can be said"), std::string::npos) << v[0].measured_text;
}

TEST(LmVerdict, TooFewSeedsAndAWorseLossWithinTheSeedsSpreadAreInconclusive) {
  const auto two_seeds = judge(two_arms(2), [](const LmRunConfig& r) {
    return unscaled(r) ? Behaviour{3.2, 100} : Behaviour{2.0, 100};
  });
  EXPECT_EQ(two_seeds[0].outcome, lab::Outcome::inconclusive);
  // Median 0.1 worse, but one unscaled seed ends below the worst scaled one: not "beyond the spread".
  const auto overlapping = judge(two_arms(), [](const LmRunConfig& r) {
    if (!unscaled(r)) return Behaviour{r.seed == 3 ? 2.3 : 2.0, 100};
    return Behaviour{r.seed == 1 ? 2.05 : 2.1, 110};
  });
  EXPECT_EQ(overlapping[0].outcome, lab::Outcome::inconclusive) << overlapping[0].measured_text;
}

TEST(LmVerdict, SgdBesideTheMainChecks) {
  LmStudyConfig c = two_arms();
  c.groups.push_back({LmInit::gpt2, LmOptimizer::sgd, {Arm::inv_sqrt_d(), Arm::none()}});
  const auto v = judge(c, [](const LmRunConfig& r) { return Behaviour{2.0 + jitter(r), 100}; });
  ASSERT_EQ(v.size(), 2u);
  // Each group's check is named by its optimiser and init; claims.json makes AdamW on the unit init C8's main one.
  EXPECT_EQ(v[0].check, "lm_unit");
  EXPECT_EQ(v[1].check, "lm_sgd_gpt2");
  EXPECT_EQ(lab::claim("C8").main_check, v[0].check);
  EXPECT_NE(v[1].title.find("SGD"), std::string::npos) << v[1].title;
}

}  // namespace
}  // namespace attnlab::train::lm
