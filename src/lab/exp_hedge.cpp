// Experiment `hedge` (C20): Vaswani et al.'s own hedge (§3.2.1 and footnote 4 of "Attention Is
// All You Need"): "While for small values of d_k the two mechanisms perform similarly, additive
// attention outperforms dot product attention without scaling for larger values of d_k" (after
// Britz et al. 2017), which is why they scale by 1/√d_k.
//
// The training study's model (attnlab/train.hpp) on associative recall with four scores: additive
// aᵀ tanh(q_i + k_j) with its usual a ~ N(0, 1/d_k) (train::Scaling::additive_score), the same with
// a ~ N(0, 1) (no 1/√d_k hidden in its init: the score then spreads as √d_k, like an unscaled dot
// product), unscaled q·k, and q·k/√d_k; d_k from 16 to 1024, Adam, the same step budget for all.
// Each (score, d_k) runs at its own learning rate, chosen on three held-out tuning seeds (never the
// reported ones) from a grid: `--full` tunes and then reports ten fresh seeds; the default reports
// five seeds at the rates `--full` chose (cached below), as the training study does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/train.hpp"
#include "lab/claims_data.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/study_across.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct HedgeConfig {
  bool full = false;
  std::vector<int64_t> dims{16, 64, 256, 1024};
  std::vector<double> rates{3e-4, 1e-3, 3e-3, 1e-2, 3e-2};  // the tuning grid
  std::string rate_choice = "cached";  // or tuned (always under --full)
  std::vector<std::string> scores{"additive", "additive_unit", "none", "inv_sqrt_d"};
  int64_t seeds = 0;         // 0: 5, full 10
  int64_t tuning_seeds = 3;  // held out: the rates are chosen on these, never on the reported seeds
  int64_t steps = 300;       // the same for tuning and report, so that the cached rates fit the default
  int64_t d_model = 32;
  double threshold = 0.9;
  double slower = 1.5;  // "learns worse": ≥ this × the median steps, fewer seeds reaching it, or 0.1 lower accuracy
  void bind(Params& p) {
    p.add("full", full, "the real study: rates tuned on held-out seeds in this run, then 10 reported seeds");
    using namespace rules;
    p.add("dims", dims, "head widths d_k (the smallest is where Vaswani's “similar for small d_k” is tested)",
          at_least_items(2) & each(positive()) & increasing());
    p.add("rates", rates, "Adam's peak rates tried per score and d_k when the rates are tuned", non_empty() & each(positive()));
    p.add("rate_choice", rate_choice,
          "cached (the rates run hedge --full chose on its tuning seeds) or tuned (chosen on the tuning seeds in this "
          "run; always under --full)",
          one_of({"cached", "tuned"}));
    p.add("scores", scores,
          "attention scores: additive, additive without its hidden 1/√d_k (additive_unit), then the unscaled and the "
          "scaled dot product",
          each(util::scaling_rule()));
    p.add("seeds", seeds, "reported seeds per cell (0: 5, full 10)", at_least(0));
    p.add("tuning_seeds", tuning_seeds, "held-out seeds per cell and rate on which the rates are chosen", positive());
    p.add("steps", steps, "optimiser steps per run, the same for every score", positive());
    p.add("d_model", d_model, "residual width", positive());
    p.add("threshold", threshold, "held-out accuracy counted as learnt", above(0) & at_most(1));
    p.add("slower", slower, "a score learns worse when it needs at least this × the other's median steps", positive());
    p.check({"scores"}, "four: additive, additive without its hidden scale, then the unscaled and the scaled dot product",
            [this] { return scores.size() == 4; });
  }
};

// The scores' places in HedgeConfig::scores.
enum Score : size_t { kAdditive = 0, kAdditiveUnit = 1, kUnscaled = 2, kScaled = 3, kScores = 4 };

struct Resolved {
  std::vector<train::Scaling> scores;
  int64_t seeds;
  bool tuned;  // rates chosen in this run (else cached)
};

Resolved resolve(const HedgeConfig& c) {
  Resolved r{{}, c.seeds ? c.seeds : (c.full ? 10 : 5), c.full || c.rate_choice == "tuned"};
  for (const auto& s : c.scores) r.scores.push_back(train::Scaling::parse(s));  // checked by scaling_rule
  return r;
}

// Chosen by `attnlab run hedge --full` (seed 0: tuning seeds 501–503, the grid 3e-4 … 3e-2, 300 steps);
// its hedge_tuning.csv holds every cell. A cell without an entry runs at kFallbackRate.
const std::vector<train::TunedRate>& cached_rates() {
  using train::InitMode, train::OptimizerKind, train::TaskKind;
  static const std::vector<train::TunedRate> rates{
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "additive", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "additive", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "additive", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "additive", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "additive_unit", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "additive_unit", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "additive_unit", 0.003},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "additive_unit", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "none", 0.003},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "inv_sqrt_d", 0.01},
  };
  return rates;
}
constexpr double kFallbackRate = 3e-3;

std::string score_label(const train::Scaling& s) {
  if (s.additive) return s.additive_unit_a ? "additive, a ~ N(0, 1)" : "additive aᵀtanh(q + k)";
  return "dot product, " + util::policy_label(s.policy);
}
const char* const kColours[kScores] = {"#009E73", "#E69F00", "#D55E00", "#0072B2"};

struct Measured {
  Table cells{"hedge_tuning", {"score", "d_k", "lr", "runs", "reached", "median_steps", "mean_final_accuracy",
                               "max_prob_init"}};
  Table best{"hedge_best", {"score", "d_k", "lr", "reached", "median_steps", "mean_final_accuracy"}};
  std::vector<std::vector<train::CellSummary>> best_cells;  // [score][d_k], each at its chosen rate
  std::vector<const train::RunResult*> curves_runs[kScores];  // the runs at the largest d_k, per score
  train::StudyResult study;                                   // the reported runs
  size_t fallback_cells = 0;                                  // cells without a cached rate
};

train::StudyConfig base_study(const HedgeConfig& c, const Resolved& r, uint64_t seed) {
  train::StudyConfig s;
  s.d_ks = c.dims;
  s.scales = r.scores;
  s.optimizers = {train::OptimizerKind::adam};
  s.inits = {train::InitMode::unit};
  s.seeds = r.seeds;
  s.first_seed = 1 + 1000 * seed;
  s.base.model.d_model = c.d_model;
  s.base.steps = c.steps;
  s.base.warmup = std::max<int64_t>(1, c.steps / 15);
  s.base.eval_every = std::max<int64_t>(1, c.steps / 15);  // every 20 steps at 300, as the training study
  s.base.threshold = c.threshold;
  s.adam_lr = kFallbackRate;
  return s;
}

Measured measure(const HedgeConfig& c, const Resolved& r, RunContext& ctx) {
  Measured m;
  train::StudyConfig eval = base_study(c, r, ctx.seed);
  eval.threads = ctx.threads > 0 ? ctx.threads : 2;
  auto progress = [&](const train::StudyProgress& p) {
    if (c.full || p.done == p.total)
      ctx.report(fmt::format("{}/{} runs, {:.0f} s, about {:.0f} s left", p.done, p.total, p.elapsed_seconds, p.eta_seconds));
  };
  auto score_index = [&](const train::Scaling& s) {
    return static_cast<double>(std::find(r.scores.begin(), r.scores.end(), s) - r.scores.begin());
  };
  if (r.tuned) {
    // Rates chosen on held-out seeds, reported on fresh ones.
    train::StudyConfig tune = eval;
    tune.seeds = c.tuning_seeds;
    tune.first_seed = 501 + 1000 * ctx.seed;
    tune.adam_lrs = c.rates;
    ctx.report(fmt::format("tuning: {} scores × {} d_k × {} rates × {} seeds", r.scores.size(), c.dims.size(),
                           c.rates.size(), c.tuning_seeds));
    const auto tuning = train::summarise(study_across(tune, ctx, progress));
    eval.tuned = train::best_rates(tuning, c.threshold);
    for (const auto& cell : tuning)
      m.cells.add_row({score_index(cell.scale), static_cast<double>(cell.d_k), cell.lr, static_cast<double>(cell.runs),
                       static_cast<double>(cell.reached), cell.median_steps, cell.mean_final_accuracy,
                       cell.mean_max_prob_start});
  } else {
    eval.tuned = cached_rates();
  }
  for (int64_t d : c.dims)
    for (const auto& s : r.scores)
      m.fallback_cells += std::none_of(eval.tuned.begin(), eval.tuned.end(), [&](const train::TunedRate& t) {
        return t.d_k == d && t.scale == s.name();
      });
  ctx.report(fmt::format("{} scores × d_k {} × {} seeds, {} steps", r.scores.size(), fmt::join(c.dims, ","), r.seeds, c.steps));
  m.study = study_across(eval, ctx, progress);
  const auto summaries = train::summarise(m.study);
  m.best_cells.assign(kScores, std::vector<train::CellSummary>(c.dims.size()));
  for (size_t si = 0; si < kScores; ++si)
    for (size_t di = 0; di < c.dims.size(); ++di) {
      for (const auto& cell : summaries)
        if (cell.d_k == c.dims[di] && cell.scale == r.scores[si]) m.best_cells[si][di] = cell;
      const auto& b = m.best_cells[si][di];
      m.best.add_row({static_cast<double>(si), static_cast<double>(c.dims[di]), b.lr, static_cast<double>(b.reached),
                      b.median_steps, b.mean_final_accuracy});
    }
  for (const auto& run : m.study.runs)
    for (size_t si = 0; si < kScores; ++si)
      if (run.config.model.d_k == c.dims.back() && run.config.model.scale == r.scores[si]) m.curves_runs[si].push_back(&run);
  return m;
}

// The rates tried, as the words list them.
std::string rates_text(const HedgeConfig& c) { return fmt::format("{}", fmt::join(c.rates, ", ")); }

// How the rates were chosen, in words.
std::string chosen_text(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const WordArgs args{{"rates", rates_text(c)}, {"tuning_seeds", c.tuning_seeds}, {"fallback", m.fallback_cells},
                      {"fallback_rate", kFallbackRate}};
  return words(r.tuned ? "chosen.tuned" : m.fallback_cells == 0 ? "chosen.cached" : "chosen.cached_some", args);
}

Figure figure_hedge(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  Figure f;
  f.name = "hedge";
  const int64_t censored = c.steps + std::max<int64_t>(1, c.steps / 15);
  words.fill(f, "figure",
             {{"steps", c.steps},
              {"chosen", chosen_text(c, r, m, words)},
              {"seeds", r.seeds},
              {"percent", 100 * c.threshold},
              {"censored", censored},
              {"d_k", c.dims.back()}});
  Panel ps = util::panel(words("figure.panel_steps"), "d_k", "steps", true, false);
  Panel pc =
      util::panel(words("figure.panel_curves", {{"d_k", c.dims.back()}}), "step", "held-out accuracy", false, false);
  const auto xs = util::to_double(c.dims);
  for (size_t si = 0; si < kScores; ++si) {
    std::vector<double> med, lo, hi;
    for (size_t di = 0; di < c.dims.size(); ++di) {
      std::vector<double> steps;
      for (const auto& run : m.study.runs)
        if (run.config.model.d_k == c.dims[di] && run.config.model.scale == r.scores[si])
          steps.push_back(run.steps_to_threshold >= 0 ? static_cast<double>(run.steps_to_threshold) : static_cast<double>(censored));
      med.push_back(steps.empty() ? NAN : util::median(steps));
      lo.push_back(steps.empty() ? NAN : *std::min_element(steps.begin(), steps.end()));
      hi.push_back(steps.empty() ? NAN : *std::max_element(steps.begin(), steps.end()));
    }
    ps.series.push_back(util::band("", xs, lo, hi, kColours[si]));
    ps.series.push_back(util::series(score_label(r.scores[si]), Style::linespoints, xs, med, kColours[si]));
    // Learning curves at the largest d_k.
    std::vector<double> x, acc_med, acc_lo, acc_hi;
    const auto& runs = m.curves_runs[si];
    for (size_t e = 0; !runs.empty() && e < runs.front()->curve.size(); ++e) {
      std::vector<double> at;
      for (const auto* run : runs)
        if (e < run->curve.size()) at.push_back(run->curve[e].eval_accuracy);
      x.push_back(static_cast<double>(runs.front()->curve[e].step));
      acc_med.push_back(util::median(at));
      acc_lo.push_back(*std::min_element(at.begin(), at.end()));
      acc_hi.push_back(*std::max_element(at.begin(), at.end()));
    }
    pc.series.push_back(util::band("", x, acc_lo, acc_hi, kColours[si]));
    pc.series.push_back(util::series("", Style::lines, x, acc_med, kColours[si]));
  }
  ps.series.push_back(util::series("", Style::theory, {xs.front(), xs.back()}, {static_cast<double>(c.steps), static_cast<double>(c.steps)}, "#000000"));
  ps.x_tics = xs;
  ps.y_min = 0;
  ps.y_max = static_cast<double>(censored) * 1.45;  // room for the legend above the budget line
  ps.legend_position = "below";
  pc.y_min = 0;
  pc.y_max = 1.02;
  pc.legend_position = "below";
  f.panels = {ps, pc};
  util::stack_panels(f);
  return f;
}

// a learns worse than b: fewer seeds reach the threshold, ≥ `slower` × the median steps, or 0.1 lower accuracy.
bool worse(const train::CellSummary& a, const train::CellSummary& b, double slower) {
  return a.reached < b.reached || a.median_steps >= slower * b.median_steps ||
         a.mean_final_accuracy <= b.mean_final_accuracy - 0.1;
}

// A cell's median steps to the threshold; `over_key` words a median beyond the budget.
std::string median_text(const train::CellSummary& c, int64_t steps, const char* over_key, const Words& words) {
  return c.median_censored ? words(over_key, {{"steps", steps}}) : words("median", {{"median", c.median_steps}});
}

std::string cell_text(const train::CellSummary& c, int64_t steps, const Words& words) {
  return words("cell", {{"reached", c.reached},
                        {"runs", c.runs},
                        {"median", median_text(c, steps, "cell.median_over", words)},
                        {"accuracy", c.mean_final_accuracy},
                        {"lr", c.lr}});
}

Verdict verdict_beats_unscaled(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const auto& add = m.best_cells[kAdditive];
  const auto& none = m.best_cells[kUnscaled];
  const size_t last = c.dims.size() - 1;
  const bool additive_learns = 3 * add[last].reached >= 2 * add[last].runs;
  Verdict v = make_verdict("C20");
  v.theory = c.slower;
  v.measured = none[last].median_steps / add[last].median_steps;
  v.tolerance = c.slower;
  v.outcome = !additive_learns ? Outcome::inconclusive : util::outcome_of(worse(none[last], add[last], c.slower));
  v.figure = "hedge";
  v.range_variable = "d_k";
  for (size_t di = 0; di < c.dims.size(); ++di) {
    const Outcome o = util::outcome_of(worse(none[di], add[di], c.slower));
    const std::string text = words("c20.range", {{"d_k", c.dims[di]},
                                                 {"additive", cell_text(add[di], c.steps, words)},
                                                 {"unscaled", cell_text(none[di], c.steps, words)}});
    const double x = static_cast<double>(c.dims[di]);
    if (!v.ranges.empty() && v.ranges.back().outcome == o)
      v.ranges.back().to = x, v.ranges.back().text += "; " + text;
    else
      v.ranges.push_back({x, x, o, text});
  }
  const char* conclusion = v.outcome == Outcome::confirmed ? "c20.confirmed"
                           : v.outcome == Outcome::refuted ? "c20.refuted"
                                                           : "c20.inconclusive";
  words.fill(v, "c20",
             {{"d_k", c.dims.back()},
              {"additive", cell_text(add[last], c.steps, words)},
              {"unscaled", cell_text(none[last], c.steps, words)},
              {"percent", 100 * c.threshold},
              {"chosen", chosen_text(c, r, m, words)},
              {"slower", c.slower},
              {"add_reached", add[last].reached},
              {"add_runs", add[last].runs},
              {"add_median", median_text(add[last], c.steps, "median.more_than", words)},
              {"none_reached", none[last].reached},
              {"none_median", median_text(none[last], c.steps, "median.more_than", words)},
              {"conclusion", words(conclusion)}});
  return v;
}

// What a check beside the claim says of score a against score b.
enum class Expect { worse, alike, not_worse };

// A check beside the claim: score `a` against `b` at the di-th d_k, by the rule `worse`.
Verdict verdict_compare(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words, const char* check,
                        Score a, Score b, size_t di, Expect expect) {
  const auto& ca = m.best_cells[a][di];
  const auto& cb = m.best_cells[b][di];
  Verdict v = make_verdict("C20");
  v.check = check;
  const std::string key = check;
  v.title = words(key + ".title", {{"d_k", c.dims[di]}});
  v.statement = words(key + ".statement", {{"d_k", c.dims[di]}});
  v.theory = c.slower;
  v.measured = ca.median_steps / cb.median_steps;
  v.tolerance = c.slower;
  const bool holds = expect == Expect::worse ? worse(ca, cb, c.slower)
                     : expect == Expect::alike ? !worse(ca, cb, c.slower) && !worse(cb, ca, c.slower)
                                               : !worse(ca, cb, c.slower);
  v.outcome = util::outcome_of(holds);
  v.figure = "hedge";
  const WordArgs args{{"d_k", c.dims[di]},
                      {"a", cell_text(ca, c.steps, words)},
                      {"b", cell_text(cb, c.steps, words)},
                      {"a_label", score_label(r.scores[a])},
                      {"b_label", score_label(r.scores[b])},
                      {"percent", 100 * c.threshold},
                      {"slower", c.slower},
                      {"conclusion", words(key + (holds ? ".holds" : ".fails"))}};
  words.fill(v, "compare", args);
  words.fill(v, key, args);
  return v;
}

Result run_hedge(const HedgeConfig& c, RunContext& ctx) {
  const Resolved r = resolve(c);
  const Measured m = measure(c, r, ctx);
  Result res;
  const Words words("hedge");
  res.setup = words("setup", {{"d_model", c.d_model},
                              {"dims", fmt::format("{}", fmt::join(c.dims, ", "))},
                              {"warmup", std::max<int64_t>(1, c.steps / 15)},
                              {"steps", c.steps},
                              {"chosen", chosen_text(c, r, m, words)},
                              {"seeds", r.seeds}});
  res.config = {{"seeds", std::to_string(r.seeds)}, {"rate_choice", r.tuned ? "tuned" : "cached"}};
  res.tables = {m.best};
  if (r.tuned) res.tables.push_back(m.cells);
  res.notes.push_back(words("note"));
  res.figures = {figure_hedge(c, r, m, words)};
  const size_t last = c.dims.size() - 1;
  // Vaswani's "similar for small d_k" at the smallest d_k; additive without its hidden 1/√d_k against the
  // unscaled dot product, and 1/√d_k against additive, at the largest.
  res.verdicts = {verdict_beats_unscaled(c, r, m, words),
                  verdict_compare(c, r, m, words, "small_similar", kUnscaled, kAdditive, 0, Expect::alike),
                  verdict_compare(c, r, m, words, "hidden_scale", kUnscaled, kAdditiveUnit, last, Expect::worse),
                  verdict_compare(c, r, m, words, "scale_closes", kScaled, kAdditive, last, Expect::not_worse)};
  return res;
}

}  // namespace

Experiment hedge_experiment() {
  return make_experiment<HedgeConfig>(
      "hedge",
      "Vaswani et al.'s hedge: additive attention (with and without the 1/√d_k hidden in its init) against unscaled and "
      "scaled dot products in training, d_k 16–1024, rates chosen on held-out seeds",
      {"C20"}, run_hedge, {{"dims", "16,256"}, {"seeds", "2"}, {"steps", "150"}});
}

}  // namespace attnlab::lab
