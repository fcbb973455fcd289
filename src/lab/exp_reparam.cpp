// Experiment `reparam` (C19): Su Jianlin's point (kexue.fm/archives/8620, which article 003
// cites) that the 1/√d_k scale is a smaller initialisation of W_q and W_k in disguise.
//
// The training study's model (attnlab/train.hpp) on associative recall, four arms at one
// head width and one learning rate: 1/√d_k with the unit init (W_q, W_k ~ N(0, 1/D): q, k of
// unit-variance components), no scale with the same init, no scale with W_q, W_k drawn
// d_k^(−1/4) smaller (train::InitMode::quarter), and that arm again with W_q's and W_k's
// learning rate matched (below), several seeds each; held-out accuracy along training, and
// steps to 90 %, judged by C8's rule (fewer seeds reaching it, or 1.5× the steps, is worse).
//
// The algebra. With the same normal draws, W' = d_k^(−1/4)·W gives q'·k' = q·k/√d_k: the
// unscaled logits at initialisation are the scaled ones exactly, so the forward is the same
// function. Training is not: ∂L/∂W'_q = d_k^(1/4)·∂L/∂W_q while W' is d_k^(1/4) smaller, so a
// step of SGD changes the logits √d_k times as much, and a step of Adam (which normalises the
// gradient's size away) d_k^(1/4) times as much, as the same step on the scaled model. The
// first Adam step measures that (train::trace_logits, the logits' change after each step).
//
// The matched rate. Write c = d_k^(−1/4), W' = c·W, and G = ∂L/∂S at initialisation (the same for
// both models, whose logits S are equal there). The scaled model's logits are c²·(XW_q)(XW_k)ᵀ, so
// ∂L/∂W_q = c²·XᵀGXW_k; the stand-in's are (XW'_q)(XW'_k)ᵀ, so ∂L/∂W'_q = c·XᵀGXW_k. A step δW
// changes the scaled logits by c²·(XδW_q)(XW_k)ᵀ and the stand-in's by c·(XδW'_q)(XW_k)ᵀ.
//   Adam: |δW| ≈ lr whatever the gradient's size, so the stand-in's logits move c²·lr'/(c·lr)·… = lr'/(c·lr)
//   times as far: equal when lr' = c·lr = d_k^(−1/4)·lr.
//   SGD: δW = −lr·∂L/∂W, so the scaled logits move by lr·c⁴(…) and the stand-in's by lr'·c²(…):
//   equal when lr' = c²·lr = lr/√d_k.
// With that rate on W_q and W_k alone (train::RunConfig::qk_lr_scale; every other weight keeps lr),
// W'/c follows the scaled model's W step for step (Adam exactly up to its ε), so the stand-in is the
// scaled model reparametrised: the equivalence Su describes, now also under the optimiser.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/train.hpp"
#include "lab/claims_data.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct ReparamConfig {
  bool full = false;
  int64_t d_k = 256;
  int64_t d_model = 32;
  double lr = 3e-3;
  std::string optimizer = "adam";
  std::string small_init = "quarter";  // the third arm's init (unit: the breaking configuration)
  int64_t seeds = 0;                   // 0: 5, full 10
  int64_t steps = 0;                   // 0: 300, full 600
  int64_t eval_every = 0;              // 0: 10, full 5
  int64_t eval_examples = 256;
  double threshold = 0.9;
  int64_t trace_steps = 10;            // Adam steps traced from initialisation (the logits' change)
  void bind(Params& p) {
    p.add("full", full, "the real study (10 seeds, 600 steps, an evaluation every 5 steps)");
    using namespace rules;
    p.add("d_k", d_k, "head width", positive());
    p.add("d_model", d_model, "residual width", positive());
    p.add("lr", lr, "peak learning rate, the same for the three arms", positive());
    p.add("optimizer", optimizer, "adam or sgd", util::optimizer_rule());
    p.add("small_init", small_init, "init of the unscaled arm that stands in for the scale: quarter (W_q, W_k d_k^(−1/4) "
                                    "smaller), small (d_k^(−1/2)) or unit (the breaking configuration)");
    p.add("seeds", seeds, "seeds per arm (0: 5, full 10)", at_least(0));
    p.add("steps", steps, "optimiser steps per run (0: 300, full 600)", at_least(0));
    p.add("eval_every", eval_every, "steps between evaluations (0: 10, full 5)", at_least(0));
    p.add("eval_examples", eval_examples, "held-out examples per evaluation", positive());
    p.add("threshold", threshold, "held-out accuracy counted as learnt", above(0) & at_most(1));
    p.add("trace_steps", trace_steps, "optimiser steps traced for the logits' change (the first step is judged)",
          positive());
  }
};

struct Resolved {
  int64_t seeds, steps, eval_every;
  train::OptimizerKind optimizer;
  train::InitMode small_init;
};

Resolved resolve(const ReparamConfig& c) {
  Resolved r{c.seeds ? c.seeds : (c.full ? 10 : 5), c.steps ? c.steps : (c.full ? 600 : 300),
             c.eval_every ? c.eval_every : (c.full ? 5 : 10), train::OptimizerKind::adam, train::InitMode::quarter};
  r.optimizer = train::parse_optimizer(c.optimizer);  // checked by optimizer_rule
  try {
    r.small_init = train::parse_init_mode(c.small_init);
  } catch (const Error& e) {
    throw Error(std::string("small_init: ") + e.what());
  }
  return r;
}

// The four arms, in the order of the tables and figures.
struct Arm {
  const char* label;
  ScalePolicy scale;
  bool stand_in;     // the unscaled arm with the smaller init
  bool matched_rate;  // ... and W_q's, W_k's learning rate matched to the scale (the derivation above)
};
constexpr size_t kArmCount = 4;
const Arm kArms[kArmCount] = {{"1/√d_k", ScalePolicy::inv_sqrt_d(), false, false},
                              {"no scale", ScalePolicy::none(), false, false},
                              {"no scale, smaller W_q, W_k", ScalePolicy::none(), true, false},
                              {"no scale, smaller W_q, W_k, matched rate", ScalePolicy::none(), true, true}};
const char* const kArmColours[kArmCount] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7"};

// The factor on W_q's and W_k's learning rate that makes the stand-in's first step move the logits as far
// as the scaled model's: d_k^(−1/4) under Adam, d_k^(−1/2) under SGD (the derivation above).
double matched_rate_factor(int64_t d_k, train::OptimizerKind optimizer) {
  return std::pow(static_cast<double>(d_k), optimizer == train::OptimizerKind::adam ? -0.25 : -0.5);
}

struct ArmSummary {
  std::vector<double> steps;        // per seed; a run that never reached the threshold counts steps + eval_every
  int reached = 0;
  double median = 0, lo = 0, hi = 0;  // median and min..max of `steps`
  double final_accuracy = 0;          // mean over seeds
  std::vector<double> x, acc_median, acc_lo, acc_hi;  // held-out accuracy along training over seeds
};

struct Measured {
  Table runs{"reparam_runs", {"arm", "seed", "steps_to_threshold", "final_accuracy", "loss_init", "entropy_init"}};
  Table curves{"reparam_curves", {"arm", "seed", "step", "eval_accuracy", "eval_loss", "entropy", "max_prob"}};
  Table trace{"reparam_trace", {"arm", "step", "rms_logit", "rms_change"}};
  ArmSummary arms[kArmCount];
  double init_gap = 0;                  // largest relative difference at step 0 between the scaled and the stand-in arm
  train::LogitTrace traces[kArmCount];  // the first steps, seed 1 of each arm
};

train::RunConfig run_config(const ReparamConfig& c, const Resolved& r, const Arm& arm, train::InitMode small_init) {
  train::RunConfig rc;
  rc.task.kind = train::TaskKind::associative_recall;
  rc.model.d_model = c.d_model;
  rc.model.d_k = c.d_k;
  rc.model.scale = arm.scale;
  rc.model.init = arm.stand_in ? small_init : train::InitMode::unit;
  rc.optimizer = r.optimizer;
  rc.lr = c.lr;
  if (arm.matched_rate) rc.qk_lr_scale = matched_rate_factor(c.d_k, r.optimizer);
  rc.steps = r.steps;
  rc.warmup = std::max<int64_t>(1, r.steps / 15);
  rc.eval_every = r.eval_every;
  rc.eval_examples = c.eval_examples;
  rc.threshold = c.threshold;
  return rc;
}

Measured measure(const ReparamConfig& c, const Resolved& r, RunContext& ctx) {
  const auto ns = static_cast<size_t>(r.seeds);
  constexpr size_t A = kArmCount;
  std::vector<train::RunResult> runs(A * ns);
  Measured m;
  ctx.report(fmt::format("{} arms × {} seeds, d_k = {}, {} at {:g}, {} steps", A, ns, c.d_k, c.optimizer, c.lr, r.steps));
  // The runs, then the traces (indices A·ns … A·ns + A − 1), on one pool of threads.
  util::parallel_for(static_cast<int64_t>(A * ns + A), ctx.threads, [&](int64_t i) {
    const auto u = static_cast<size_t>(i);
    const size_t arm = u < A * ns ? u / ns : u - A * ns;
    train::RunConfig rc = run_config(c, r, kArms[arm], r.small_init);
    if (u < A * ns) {
      rc.seed = ctx.seed * 1000 + u % ns + 1;  // the same seed in every arm: the same normal draws
      runs[u] = train::train_run(rc);
    } else {
      rc.seed = ctx.seed * 1000 + 1;
      m.traces[arm] = train::trace_logits(rc, c.trace_steps);
    }
  });
  for (size_t a = 0; a < A; ++a) {
    ArmSummary& s = m.arms[a];
    std::vector<std::vector<double>> acc;  // [evaluation][seed]
    for (size_t seed = 0; seed < ns; ++seed) {
      const auto& run = runs[a * ns + seed];
      const bool reached = run.steps_to_threshold >= 0;
      s.reached += reached;
      s.steps.push_back(reached ? static_cast<double>(run.steps_to_threshold) : static_cast<double>(r.steps + r.eval_every));
      s.final_accuracy += run.final_accuracy / static_cast<double>(ns);
      m.runs.add_row({static_cast<double>(a), static_cast<double>(seed), reached ? s.steps.back() : NAN, run.final_accuracy,
                      run.curve.front().eval_loss, run.curve.front().entropy});
      for (size_t e = 0; e < run.curve.size(); ++e) {
        const auto& p = run.curve[e];
        if (acc.size() <= e) acc.emplace_back(), s.x.push_back(static_cast<double>(p.step));
        acc[e].push_back(p.eval_accuracy);
        m.curves.add_row({static_cast<double>(a), static_cast<double>(seed), static_cast<double>(p.step), p.eval_accuracy,
                          p.eval_loss, p.entropy, p.max_prob});
      }
    }
    s.median = util::median(s.steps);
    s.lo = *std::min_element(s.steps.begin(), s.steps.end());
    s.hi = *std::max_element(s.steps.begin(), s.steps.end());
    for (const auto& at : acc) {
      s.acc_median.push_back(util::median(at));
      s.acc_lo.push_back(*std::min_element(at.begin(), at.end()));
      s.acc_hi.push_back(*std::max_element(at.begin(), at.end()));
    }
    const auto& t = m.traces[a];
    for (size_t step = 0; step < t.rms.size(); ++step)
      m.trace.add_row({static_cast<double>(a), static_cast<double>(step), t.rms[step], t.change[step]});
  }
  // At step 0 the stand-in's forward is the scaled one's (float rounding apart): loss and entropy per seed.
  for (size_t seed = 0; seed < ns; ++seed) {
    const auto& p = runs[seed].curve.front();
    const auto& q = runs[2 * ns + seed].curve.front();
    m.init_gap = std::max({m.init_gap, std::abs(p.eval_loss - q.eval_loss) / std::abs(p.eval_loss),
                           std::abs(p.entropy - q.entropy) / std::max(std::abs(p.entropy), 1e-12)});
  }
  return m;
}

const char* optimizer_name(const ReparamConfig& c) { return c.optimizer == "sgd" ? "SGD" : "Adam"; }

Figure figure_reparam(const ReparamConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  Figure f;
  f.name = "reparam_curves";
  words.fill(f, "figure",
             {{"d_k", c.d_k},
              {"optimizer", optimizer_name(c)},
              {"lr", c.lr},
              {"seeds", r.seeds},
              {"percent", 100 * c.threshold},
              {"steps", r.steps},
              {"rate_factor", matched_rate_factor(c.d_k, r.optimizer)},
              {"trace_steps", c.trace_steps}});
  Panel pa = util::panel(words("figure.panel_accuracy"), "step", "accuracy", false, false);
  Panel pt = util::panel(words("figure.panel_change"), "step", "RMS of S_t − S_0", false, true);
  for (size_t a = 0; a < kArmCount; ++a) {
    const ArmSummary& s = m.arms[a];
    pa.series.push_back(util::band("", s.x, s.acc_lo, s.acc_hi, kArmColours[a]));
  }
  for (size_t a = 0; a < kArmCount; ++a)
    pa.series.push_back(util::series(kArms[a].label, Style::lines, m.arms[a].x, m.arms[a].acc_median, kArmColours[a]));
  pa.series.push_back(util::series("", Style::theory, {0, static_cast<double>(r.steps)}, {c.threshold, c.threshold}, "#000000"));
  pa.y_min = 0;
  pa.y_max = 1.02;
  pa.legend_position = "below";
  for (size_t a = 0; a < kArmCount; ++a) {
    std::vector<double> x, y;
    for (size_t step = 1; step < m.traces[a].change.size(); ++step)
      x.push_back(static_cast<double>(step)), y.push_back(m.traces[a].change[step]);
    pt.series.push_back(util::series(kArms[a].label, Style::linespoints, x, y, kArmColours[a]));
  }
  pt.y_min = 0.01;  // room for the legend below the curves
  pt.legend_position = "below";
  f.panels = {pa, pt};
  util::stack_panels(f);
  return f;
}

std::string steps_text(const ArmSummary& s, int64_t seeds, int64_t steps, const Words& words) {
  const char* key = 2 * s.reached < seeds ? "steps.few" : s.reached == seeds ? "steps.all" : "steps.most";
  return words(
      key,
      {{"reached", s.reached}, {"seeds", seeds}, {"steps", steps}, {"median", s.median}, {"lo", s.lo}, {"hi", s.hi}});
}

// C8's rule for "learns worse" (claims.json's C8 thresholds): fewer seeds reaching the threshold, at least
// slower_steps_ratio × the median steps, or a mean final accuracy more than final_accuracy_margin lower.
// 4 of 5 seeds against 5 of 5 is worse.
bool worse(const ArmSummary& a, const ArmSummary& b) {
  return a.reached < b.reached || a.median >= claim_threshold("C8", "slower_steps_ratio") * b.median ||
         a.final_accuracy < b.final_accuracy - claim_threshold("C8", "final_accuracy_margin");
}

// The main check: the stand-in arm (same learning rate) learns like the scaled one, the plain unscaled one does not.
Verdict verdict_c19(const ReparamConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const ArmSummary &scaled = m.arms[0], &plain = m.arms[1], &stand_in = m.arms[2];
  const bool scaled_learns = 2 * scaled.reached > r.seeds;
  Verdict v = make_verdict("C19");
  v.theory = scaled.median;
  v.measured = stand_in.median;
  v.tolerance = claim_threshold("C8", "slower_steps_ratio");
  v.outcome = !scaled_learns || !worse(plain, scaled) ? Outcome::inconclusive
              : worse(stand_in, scaled)               ? Outcome::refuted
                                                      : Outcome::confirmed;
  v.figure = "reparam_curves";
  words.fill(v, "c19",
             {{"percent", 100 * c.threshold},
              {"d_k", c.d_k},
              {"scaled", steps_text(scaled, r.seeds, r.steps, words)},
              {"plain", steps_text(plain, r.seeds, r.steps, words)},
              {"stand_in", steps_text(stand_in, r.seeds, r.steps, words)},
              {"slower", claim_threshold("C8", "slower_steps_ratio")},
              {"margin", claim_threshold("C8", "final_accuracy_margin")},
              {"optimizer", optimizer_name(c)},
              {"lr", c.lr},
              {"scaled_median", scaled.median},
              {"factor", std::pow(static_cast<double>(c.d_k), -0.25)},
              {"conclusion", words(v.outcome == Outcome::confirmed ? "c19.confirmed"
                                   : v.outcome == Outcome::refuted ? "c19.refuted"
                                                                   : "c19.inconclusive")}});
  return v;
}

// Beside it: the stand-in with W_q's and W_k's learning rate matched to the scale learns like the scaled arm,
// and its first step moves the logits as far.
Verdict verdict_matched(const ReparamConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const ArmSummary &scaled = m.arms[0], &matched = m.arms[3];
  const double step1 = m.traces[0].change.size() > 1 ? m.traces[0].change[1] : NAN;
  const double step1_m = m.traces[3].change.size() > 1 ? m.traces[3].change[1] : NAN;
  const bool adam = r.optimizer == train::OptimizerKind::adam;
  Verdict v = make_verdict("C19");
  v.check = "matched_rate";
  v.title = words("matched.title");
  v.statement = words("matched.statement", {{"factor", words(adam ? "matched.factor_adam" : "matched.factor_sgd")}});
  v.theory = scaled.median;
  v.measured = matched.median;
  v.tolerance = claim_threshold("C8", "slower_steps_ratio");
  v.outcome = 2 * scaled.reached > r.seeds ? util::outcome_of(!worse(matched, scaled)) : Outcome::inconclusive;
  v.figure = "reparam_curves";
  words.fill(v, "matched",
             {{"percent", 100 * c.threshold},
              {"d_k", c.d_k},
              {"scaled", steps_text(scaled, r.seeds, r.steps, words)},
              {"matched", steps_text(matched, r.seeds, r.steps, words)},
              {"rate_factor", matched_rate_factor(c.d_k, r.optimizer)},
              {"qk_lr", c.lr * matched_rate_factor(c.d_k, r.optimizer)},
              {"lr", c.lr},
              {"optimizer", optimizer_name(c)},
              {"slower", claim_threshold("C8", "slower_steps_ratio")},
              {"margin", claim_threshold("C8", "final_accuracy_margin")},
              {"ratio", step1_m / step1}});
  return v;
}

// Beside it: the algebra. Exact at initialisation; the first Adam step differs by d_k^(1/4).
Verdict verdict_algebra(const ReparamConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const double rms0 = m.traces[0].rms.empty() ? NAN : m.traces[0].rms[0];
  const double rms0_q = m.traces[2].rms.empty() ? NAN : m.traces[2].rms[0];
  const double step1 = m.traces[0].change.size() > 1 ? m.traces[0].change[1] : NAN;
  const double step1_q = m.traces[2].change.size() > 1 ? m.traces[2].change[1] : NAN;
  const double ratio = step1_q / step1, dk = static_cast<double>(c.d_k);
  const bool adam = r.optimizer == train::OptimizerKind::adam;
  const double expected = adam ? std::pow(dk, 0.25) : std::sqrt(dk);
  const double init_gap = std::max(m.init_gap, std::abs(rms0 - rms0_q) / rms0);
  const double init_allowed = claim_threshold("C19", "init_agreement");
  const double ratio_allowed = claim_threshold("C19", "update_ratio_tolerance");
  const bool exact_at_init = init_gap <= init_allowed;
  const bool update_ratio = std::abs(ratio / expected - 1) <= ratio_allowed;
  Verdict v = make_verdict("C19");
  v.check = "algebra";
  v.title = words("algebra.title");
  v.statement = words("algebra.statement", {{"optimizer", adam ? "Adam" : "SGD"},
                                            {"factor", words(adam ? "algebra.factor_adam" : "algebra.factor_sgd")}});
  v.theory = expected;
  v.measured = ratio;
  v.tolerance = ratio_allowed;
  v.outcome = util::outcome_of(exact_at_init && update_ratio);
  v.figure = "reparam_curves";
  words.fill(
      v, "algebra",
      {{"expected", expected},
       {"reason", words(adam ? "algebra.reason_adam" : "algebra.reason_sgd")},
       {"rms0", rms0},
       {"rms0_small", rms0_q},
       {"init_gap", init_gap},
       {"step1", step1},
       {"step1_small", step1_q},
       {"ratio", ratio},
       {"init_allowed", util::pretty(init_allowed)},
       {"ratio_percent", 100 * ratio_allowed},
       {"agreement", init_gap == 0 ? words("algebra.exactly") : words("algebra.to_within", {{"init_gap", init_gap}})},
       {"optimizer", adam ? "Adam" : "SGD"},
       {"consequence", words(adam ? "algebra.consequence_adam" : "algebra.consequence_sgd")}});
  return v;
}

Result run_reparam(const ReparamConfig& c, RunContext& ctx) {
  const Resolved r = resolve(c);
  const Measured m = measure(c, r, ctx);
  Result res;
  const Words words("reparam");
  res.setup =
      words("setup", {{"d_model", c.d_model},
                      {"d_k", c.d_k},
                      {"small_init", r.small_init == train::InitMode::quarter ? words("setup.quarter") : c.small_init},
                      {"small_init_name", train::to_string(r.small_init)},
                      {"optimizer_long", c.optimizer == "sgd" ? "SGD with momentum" : "Adam"},
                      {"lr", c.lr},
                      {"rate_factor", matched_rate_factor(c.d_k, r.optimizer)},
                      {"warmup", std::max<int64_t>(1, r.steps / 15)},
                      {"steps", r.steps},
                      {"seeds", r.seeds},
                      {"eval_examples", c.eval_examples},
                      {"eval_every", r.eval_every}});
  res.config = {{"seeds", std::to_string(r.seeds)}, {"steps", std::to_string(r.steps)},
                {"eval_every", std::to_string(r.eval_every)}};
  res.tables = {m.runs, m.curves, m.trace};
  res.notes.push_back(words("note"));
  res.figures = {figure_reparam(c, r, m, words)};
  res.verdicts = {verdict_c19(c, r, m, words), verdict_matched(c, r, m, words), verdict_algebra(c, r, m, words)};
  return res;
}

}  // namespace

Experiment reparam_experiment() {
  return make_experiment<ReparamConfig>(
      "reparam", "Su Jianlin's equivalence: unscaled attention with W_q, W_k initialised d_k^(−1/4) smaller against 1/√d_k",
      {"C19"}, run_reparam, {{"seeds", "3"}, {"steps", "200"}, {"eval_examples", "128"}});
}

}  // namespace attnlab::lab
