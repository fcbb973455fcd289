// Experiment `hedge` (C20): Vaswani et al.'s own hedge (§3.2.1 and footnote 4 of "Attention Is
// All You Need"): "additive attention outperforms dot product attention without scaling for
// larger values of d_k" (after Britz et al. 2017), which is why they scale by 1/√d_k.
//
// The training study's model (attnlab/train.hpp) on associative recall with three attention
// scores: additive aᵀ tanh(q_i + k_j) (train::Scaling::additive_score, no scale), unscaled q·k,
// and q·k/√d_k; d_k up to 1024, Adam, the same step budget for all. Each (score, d_k) runs at
// every rate of a small grid and is reported at its best (train::best_rates: learns and keeps
// it, then most seeds reaching 90 %, then fewest steps). The default budget picks the rate on
// the seeds it reports (a small grid, few seeds: the report's time); --full picks it on three
// other seeds and reports five fresh ones, as the training study's full sweep does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/train.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/study_across.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct HedgeConfig {
  bool full = false;
  // The report's budget; --full widens these when they are left at their defaults (validate).
  std::vector<int64_t> dims{64, 256, 1024};
  std::vector<double> rates{3e-3, 1e-2};
  std::vector<std::string> scores{"additive", "none", "inv_sqrt_d"};
  int64_t seeds = 0;            // 0: 3, full 5
  int64_t steps = 0;            // 0: 300, full 600
  int64_t d_model = 32;
  double threshold = 0.9;
  double slower = 1.5;          // "learns worse": ≥ this × the median steps, fewer seeds reaching it, or 0.1 lower accuracy
  void bind(Params& p) {
    p.add("full", full, "the real study: d_k 16–1024, 5 rates, rates chosen on 3 other seeds, 5 seeds, 600 steps");
    using namespace rules;
    p.add("dims", dims, "head widths d_k (full, if left at the default: 16,64,256,1024)",
          non_empty() & each(positive()) & increasing());
    p.add("rates", rates, "Adam's peak rates tried per score and d_k (full, if left at the default: 3e-4,1e-3,3e-3,1e-2,3e-2)",
          non_empty() & each(positive()));
    p.add("scores", scores, "attention scores: additive, then the unscaled and the scaled dot product (scale policies)",
          each(util::scaling_rule()));
    p.add("seeds", seeds, "seeds per cell (0: 3, full 5)", at_least(0));
    p.add("steps", steps, "optimiser steps per run, the same for every score (0: 300, full 600)", at_least(0));
    p.add("d_model", d_model, "residual width", positive());
    p.add("threshold", threshold, "held-out accuracy counted as learnt", above(0) & at_most(1));
    p.add("slower", slower, "a score learns worse when it needs at least this × the other's median steps", positive());
    p.check({"scores"}, "three: the additive score, then the unscaled and the scaled dot product",
            [this] { return scores.size() == 3; });
  }
};

struct Resolved {
  std::vector<int64_t> dims;
  std::vector<double> rates;
  std::vector<train::Scaling> scores;  // additive, unscaled, scaled
  int64_t seeds, steps;
};

Resolved resolve(const HedgeConfig& c) {
  const HedgeConfig defaults;
  const bool full_dims = c.full && c.dims == defaults.dims, full_rates = c.full && c.rates == defaults.rates;
  Resolved r{full_dims ? std::vector<int64_t>{16, 64, 256, 1024} : c.dims,
             full_rates ? std::vector<double>{3e-4, 1e-3, 3e-3, 1e-2, 3e-2} : c.rates,
             {}, c.seeds ? c.seeds : (c.full ? 5 : 3), c.steps ? c.steps : (c.full ? 600 : 300)};
  for (const auto& s : c.scores) r.scores.push_back(train::Scaling::parse(s));  // checked by scaling_rule
  return r;
}

std::string score_label(const train::Scaling& s) {
  return s.additive ? "additive aᵀtanh(q + k)" : "dot product, " + util::policy_label(s.policy);
}
const char* const kColours[3] = {"#009E73", "#D55E00", "#0072B2"};

struct Measured {
  Table cells{"hedge_cells", {"score", "d_k", "lr", "runs", "reached", "median_steps", "mean_final_accuracy",
                              "max_prob_init"}};
  Table best{"hedge_best", {"score", "d_k", "lr", "reached", "median_steps", "mean_final_accuracy"}};
  std::vector<std::vector<train::CellSummary>> best_cells;  // [score][d_k] at its best rate
  std::vector<const train::RunResult*> curves_runs[3];     // the best cell's runs at the largest d_k, per score
  train::StudyResult study;                                 // the reported runs
};

train::StudyConfig base_study(const HedgeConfig& c, const Resolved& r, uint64_t seed) {
  train::StudyConfig s;
  s.d_ks = r.dims;
  s.scales = r.scores;
  s.optimizers = {train::OptimizerKind::adam};
  s.inits = {train::InitMode::unit};
  s.seeds = r.seeds;
  s.first_seed = 1 + 1000 * seed;
  s.base.model.d_model = c.d_model;
  s.base.steps = r.steps;
  s.base.warmup = std::max<int64_t>(1, r.steps / 15);
  s.base.eval_every = std::max<int64_t>(1, r.steps / 15);  // every 20 steps at 300, as the training study
  s.base.threshold = c.threshold;
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
  std::vector<train::TunedRate> chosen;
  if (c.full) {
    // Rates chosen on three other seeds, reported on fresh ones.
    train::StudyConfig tune = eval;
    tune.seeds = 3;
    tune.first_seed = 501 + 1000 * ctx.seed;
    tune.adam_lrs = r.rates;
    ctx.report(fmt::format("tuning: {} scores × {} d_k × {} rates × 3 seeds", r.scores.size(), r.dims.size(), r.rates.size()));
    const auto tuning = study_across(tune, ctx, progress);
    chosen = train::best_rates(train::summarise(tuning), c.threshold);
    for (const auto& cell : train::summarise(tuning))
      m.cells.add_row({static_cast<double>(std::find(r.scores.begin(), r.scores.end(), cell.scale) - r.scores.begin()),
                       static_cast<double>(cell.d_k), cell.lr, static_cast<double>(cell.runs), static_cast<double>(cell.reached),
                       cell.median_steps, cell.mean_final_accuracy, cell.mean_max_prob_start});
    eval.tuned = chosen;
  } else {
    eval.adam_lrs = r.rates;
  }
  ctx.report(fmt::format("{} scores × d_k {} × {} seeds, {} steps", r.scores.size(), fmt::join(r.dims, ","), r.seeds, r.steps));
  m.study = study_across(eval, ctx, progress);
  const auto summaries = train::summarise(m.study);
  if (!c.full) {
    chosen = train::best_rates(summaries, c.threshold);
    for (const auto& cell : summaries)
      m.cells.add_row({static_cast<double>(std::find(r.scores.begin(), r.scores.end(), cell.scale) - r.scores.begin()),
                       static_cast<double>(cell.d_k), cell.lr, static_cast<double>(cell.runs), static_cast<double>(cell.reached),
                       cell.median_steps, cell.mean_final_accuracy, cell.mean_max_prob_start});
  }
  m.best_cells.assign(3, std::vector<train::CellSummary>(r.dims.size()));
  for (size_t si = 0; si < 3; ++si)
    for (size_t di = 0; di < r.dims.size(); ++di) {
      double lr = 0;
      for (const auto& t : chosen)
        if (t.d_k == r.dims[di] && t.scale == r.scores[si].name()) lr = t.lr;
      for (const auto& cell : summaries)
        if (cell.d_k == r.dims[di] && cell.scale == r.scores[si] && cell.lr == lr) m.best_cells[si][di] = cell;
      const auto& b = m.best_cells[si][di];
      m.best.add_row({static_cast<double>(si), static_cast<double>(r.dims[di]), b.lr, static_cast<double>(b.reached),
                      b.median_steps, b.mean_final_accuracy});
    }
  for (const auto& run : m.study.runs)
    for (size_t si = 0; si < 3; ++si)
      if (run.config.model.d_k == r.dims.back() && run.config.model.scale == r.scores[si] &&
          run.config.lr == m.best_cells[si].back().lr)
        m.curves_runs[si].push_back(&run);
  return m;
}

// The rates tried, as the words list them.
std::string rates_text(const Resolved& r) { return fmt::format("{}", fmt::join(r.rates, ", ")); }

Figure figure_hedge(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  Figure f;
  f.name = "hedge";
  const int64_t censored = r.steps + std::max<int64_t>(1, r.steps / 15);
  words.fill(f, "figure",
             {{"steps", r.steps},
              {"rates", rates_text(r)},
              {"seeds", r.seeds},
              {"percent", 100 * c.threshold},
              {"censored", censored},
              {"d_k", r.dims.back()}});
  Panel ps = util::panel(words("figure.panel_steps"), "d_k", "steps", true, false);
  Panel pc =
      util::panel(words("figure.panel_curves", {{"d_k", r.dims.back()}}), "step", "held-out accuracy", false, false);
  const auto xs = util::to_double(r.dims);
  for (size_t si = 0; si < 3; ++si) {
    std::vector<double> med, lo, hi;
    for (size_t di = 0; di < r.dims.size(); ++di) {
      std::vector<double> steps;
      for (const auto& run : m.study.runs)
        if (run.config.model.d_k == r.dims[di] && run.config.model.scale == r.scores[si] &&
            run.config.lr == m.best_cells[si][di].lr)
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
  ps.series.push_back(util::series("", Style::theory, {xs.front(), xs.back()}, {static_cast<double>(r.steps), static_cast<double>(r.steps)}, "#000000"));
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
  const auto& add = m.best_cells[0];
  const auto& none = m.best_cells[1];
  const size_t last = r.dims.size() - 1;
  const bool additive_learns = 3 * add[last].reached >= 2 * add[last].runs;
  Verdict v = make_verdict("C20");
  v.theory = c.slower;
  v.measured = none[last].median_steps / add[last].median_steps;
  v.tolerance = c.slower;
  v.outcome = !additive_learns ? Outcome::inconclusive : util::outcome_of(worse(none[last], add[last], c.slower));
  v.figure = "hedge";
  v.range_variable = "d_k";
  for (size_t di = 0; di < r.dims.size(); ++di) {
    const Outcome o = util::outcome_of(worse(none[di], add[di], c.slower));
    const std::string text = words("c20.range", {{"d_k", r.dims[di]},
                                                 {"additive", cell_text(add[di], r.steps, words)},
                                                 {"unscaled", cell_text(none[di], r.steps, words)}});
    const double x = static_cast<double>(r.dims[di]);
    if (!v.ranges.empty() && v.ranges.back().outcome == o)
      v.ranges.back().to = x, v.ranges.back().text += "; " + text;
    else
      v.ranges.push_back({x, x, o, text});
  }
  std::string small;
  if (r.dims.size() > 1)
    small = words(worse(none.front(), add.front(), c.slower) ? "c20.small_differ" : "c20.small_similar",
                  {{"d_k", r.dims.front()}});
  const char* conclusion = v.outcome == Outcome::confirmed ? "c20.confirmed"
                           : v.outcome == Outcome::refuted ? "c20.refuted"
                                                           : "c20.inconclusive";
  words.fill(v, "c20",
             {{"d_k", r.dims.back()},
              {"additive", cell_text(add[last], r.steps, words)},
              {"unscaled", cell_text(none[last], r.steps, words)},
              {"percent", 100 * c.threshold},
              {"rates", rates_text(r)},
              {"chosen", words(c.full ? "c20.chosen_full" : "c20.chosen_quick")},
              {"slower", c.slower},
              {"add_reached", add[last].reached},
              {"add_runs", add[last].runs},
              {"add_median", median_text(add[last], r.steps, "median.more_than", words)},
              {"none_reached", none[last].reached},
              {"none_median", median_text(none[last], r.steps, "median.more_than", words)},
              {"small", small},
              {"conclusion", words(conclusion)}});
  return v;
}

Verdict verdict_scale_closes(const HedgeConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const auto& add = m.best_cells[0].back();
  const auto& scaled = m.best_cells[2].back();
  Verdict v = make_verdict("C20");
  v.title = words("scale.title");
  v.theory = c.slower;
  v.measured = scaled.median_steps / add.median_steps;
  v.tolerance = c.slower;
  v.outcome = util::outcome_of(!worse(scaled, add, c.slower));
  v.figure = "hedge";
  words.fill(v, "scale",
             {{"d_k", r.dims.back()},
              {"scaled", cell_text(scaled, r.steps, words)},
              {"additive", cell_text(add, r.steps, words)},
              {"percent", 100 * c.threshold},
              {"slower", c.slower},
              {"scaled_reached", scaled.reached},
              {"scaled_runs", scaled.runs},
              {"scaled_median", median_text(scaled, r.steps, "median.more_than", words)},
              {"add_reached", add.reached},
              {"add_median", median_text(add, r.steps, "median.more_than", words)},
              {"conclusion", words(v.outcome == Outcome::confirmed ? "scale.confirmed" : "scale.not_confirmed")}});
  return v;
}

Result run_hedge(const HedgeConfig& c, RunContext& ctx) {
  const Resolved r = resolve(c);
  const Measured m = measure(c, r, ctx);
  Result res;
  const Words words("hedge");
  res.setup = words("setup", {{"d_model", c.d_model},
                              {"dims", fmt::format("{}", fmt::join(r.dims, ", "))},
                              {"warmup", std::max<int64_t>(1, r.steps / 15)},
                              {"steps", r.steps},
                              {"rates", rates_text(r)},
                              {"chosen", words(c.full ? "setup.chosen_full" : "setup.chosen_quick")},
                              {"seeds", r.seeds}});
  res.config = {{"dims", fmt::format("{}", fmt::join(r.dims, ","))}, {"rates", fmt::format("{}", fmt::join(r.rates, ","))},
                {"seeds", std::to_string(r.seeds)}, {"steps", std::to_string(r.steps)}};
  res.tables = {m.best, m.cells};
  res.notes.push_back(words("note"));
  res.figures = {figure_hedge(c, r, m, words)};
  res.verdicts = {verdict_beats_unscaled(c, r, m, words), verdict_scale_closes(c, r, m, words)};
  return res;
}

}  // namespace

Experiment hedge_experiment() {
  return make_experiment<HedgeConfig>(
      "hedge", "Vaswani et al.'s hedge: additive attention against unscaled and scaled dot products in training, d_k up to 1024",
      {"C20"}, run_hedge, {{"dims", "16,256"}, {"rates", "3e-3,1e-2"}, {"seeds", "2"}, {"steps", "150"}});
}

}  // namespace attnlab::lab
