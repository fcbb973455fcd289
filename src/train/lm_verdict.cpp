// C8's rule on the language-model study (docs/lm.md, "The rule"): per group (init, optimiser),
// no scale against 1/√d_k at every d_k, the outcome at the largest d_k the verdict's. The
// numbers are C8's lm_* thresholds in src/lab/claims.json, written before any run; the
// sentences are the "c8.*" of src/lab/words/lm.json.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/lm_study.hpp"
#include "lab/claims_data.hpp"
#include "lab/words.hpp"

namespace attnlab::train::lm {
namespace {

struct Rule {
  double min_seeds = lab::claim_threshold("C8", "lm_min_seeds");
  double baseline_learnt_share = lab::claim_threshold("C8", "lm_baseline_learnt_share");
  double slower_steps_ratio = lab::claim_threshold("C8", "lm_slower_steps_ratio");
  double as_fast_steps_ratio = lab::claim_threshold("C8", "lm_as_fast_steps_ratio");
  double final_margin = lab::claim_threshold("C8", "lm_final_margin_bpc");
  double threshold_margin = lab::claim_threshold("C8", "lm_threshold_margin_bpc");
};

lab::Outcome outcome_of(Comparison c) {
  switch (c) {
    case Comparison::slower: return lab::Outcome::confirmed;
    case Comparison::as_fast: return lab::Outcome::refuted;
    default: return lab::Outcome::inconclusive;
  }
}

// A loss for the words: "2.31" or "diverged".
std::string bpc(double x) { return std::isfinite(x) ? fmt::format("{:.2f}", x) : std::string("diverged"); }
// Steps for the words: "180", or ">300" when most runs never reached the threshold.
std::string steps(const LmCell& c, int64_t budget) {
  return c.steps_censored ? fmt::format(">{}", budget) : fmt::format("{:.0f}", c.median_steps);
}

// One comparison in words: the cells' numbers, every c8.* template filled from them.
std::string say(const lab::Words& words, const char* key, const LmCell& none, const LmCell& sqrt, int64_t budget,
                const Rule& rule) {
  return words(key, {{"d_k", none.d_k},
                     {"budget", budget},
                     {"none_final", bpc(none.median_final)},
                     {"none_lo", bpc(none.min_final)},
                     {"none_hi", bpc(none.max_final)},
                     {"sqrt_final", bpc(sqrt.median_final)},
                     {"sqrt_lo", bpc(sqrt.min_final)},
                     {"sqrt_hi", bpc(sqrt.max_final)},
                     {"none_learnt", none.learnt},
                     {"none_runs", none.runs},
                     {"none_diverged", none.diverged},
                     {"sqrt_learnt", sqrt.learnt},
                     {"sqrt_runs", sqrt.runs},
                     {"threshold", bpc(none.threshold)},
                     {"none_steps", steps(none, budget)},
                     {"sqrt_steps", steps(sqrt, budget)},
                     {"none_max_prob", none.max_prob_init},
                     {"sqrt_max_prob", sqrt.max_prob_init},
                     {"min_seeds", static_cast<int64_t>(rule.min_seeds)},
                     {"slower_steps_ratio", rule.slower_steps_ratio},
                     {"final_margin", rule.final_margin}});
}

const char* comparison_key(Comparison c) {
  switch (c) {
    case Comparison::baseline_fails: return "c8.baseline_fails";
    case Comparison::too_few_seeds: return "c8.too_few_seeds";
    case Comparison::slower: return "c8.slower";
    case Comparison::as_fast: return "c8.as_fast";
    case Comparison::within_margin: return "c8.within_margin";
  }
  return "c8.within_margin";
}

}  // namespace

const char* to_string(Comparison c) {
  switch (c) {
    case Comparison::baseline_fails: return "baseline fails";
    case Comparison::too_few_seeds: return "too few seeds";
    case Comparison::slower: return "slower";
    case Comparison::as_fast: return "as fast";
    case Comparison::within_margin: return "within the margin";
  }
  return "?";
}

Comparison compare(const LmCell& arm, const LmCell& base) {
  const Rule rule;
  if (static_cast<double>(std::min(arm.runs, base.runs)) < rule.min_seeds) return Comparison::too_few_seeds;
  if (static_cast<double>(base.learnt) < rule.baseline_learnt_share * static_cast<double>(base.runs))
    return Comparison::baseline_fails;
  // Slower: fewer runs learn, or the baseline's loss takes much longer to reach, or the final
  // loss is worse by more than the margin with every seed of the arm above every seed of 1/√d_k.
  const bool fewer_learn = arm.learnt < base.learnt;
  const bool slower_steps = arm.median_steps >= rule.slower_steps_ratio * base.median_steps;
  const bool worse_final = arm.median_final > base.median_final + rule.final_margin && arm.min_final > base.max_final;
  if (fewer_learn || slower_steps || worse_final) return Comparison::slower;
  const bool as_fast_steps = arm.median_steps <= rule.as_fast_steps_ratio * base.median_steps;
  const bool close_final = arm.median_final <= base.median_final + rule.final_margin;
  if (as_fast_steps && close_final) return Comparison::as_fast;
  return Comparison::within_margin;
}

std::vector<lab::Verdict> verdicts(const LmStudyResult& study, double bigram) {
  const LmStudyConfig& c = study.config;
  std::vector<lab::Verdict> out;
  if (c.d_ks.empty()) return out;
  const Rule rule;
  const lab::Words words("lm");
  const std::vector<LmCell> cells = summarise(study, bigram);
  const int64_t d_max = *std::max_element(c.d_ks.begin(), c.d_ks.end());
  const int64_t budget = c.base.steps;
  auto find = [&](size_t group, int64_t d_k, const Arm& arm) -> const LmCell* {
    for (const auto& cell : cells)
      if (cell.group == group && cell.d_k == d_k && cell.arm == arm) return &cell;
    return nullptr;
  };
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const LmGroup& g = c.groups[gi];
    const auto& m = c.base.model;
    lab::Verdict v = lab::make_verdict("C8");
    v.supplementary = !g.main;
    const std::string optimizer = words(g.optimizer == LmOptimizer::adamw ? "optimizer.adamw" : "optimizer.sgd");
    v.title += words("c8.title", {{"init", to_string(g.init)}, {"optimizer", optimizer}});
    words.fill(v, "c8",
               {{"d_k", d_max},
                {"init", to_string(g.init)},
                {"optimizer", optimizer},
                {"layers", m.n_layers},
                {"heads", m.n_heads},
                {"d_model", m.d_model},
                {"context", m.context},
                {"budget", budget},
                {"batch", c.base.batch},
                {"seeds", c.seeds},
                {"bigram", bigram},
                {"min_seeds", static_cast<int64_t>(rule.min_seeds)},
                {"baseline_learnt_percent", 100 * rule.baseline_learnt_share},
                {"slower_steps_ratio", rule.slower_steps_ratio},
                {"as_fast_steps_ratio", rule.as_fast_steps_ratio},
                {"final_margin", rule.final_margin},
                {"threshold_margin", rule.threshold_margin}});
    v.tolerance = rule.slower_steps_ratio;
    const LmCell* none = find(gi, d_max, Arm::none());
    const LmCell* sqrt = find(gi, d_max, Arm::inv_sqrt_d());
    if (none == nullptr || sqrt == nullptr) {
      v.outcome = lab::Outcome::inconclusive;
      v.measured_text = words("c8.missing_cells");
      out.push_back(std::move(v));
      continue;
    }
    v.measured = none->median_steps / sqrt->median_steps;
    const Comparison verdict = compare(*none, *sqrt);
    v.outcome = outcome_of(verdict);
    v.measured_text = say(words, comparison_key(verdict), *none, *sqrt, budget, rule);
    // The same rule at every d_k: where does the outcome change?
    v.range_variable = "d_k";
    std::string trend;
    for (int64_t d : c.d_ks) {
      const LmCell* n = find(gi, d, Arm::none());
      const LmCell* s = find(gi, d, Arm::inv_sqrt_d());
      if (n == nullptr || s == nullptr) continue;
      const Comparison at = compare(*n, *s);
      const std::string text = say(words, "c8.range", *n, *s, budget, rule) +
                               words("c8.range_outcome", {{"comparison", to_string(at)}});
      trend += (trend.empty() ? "" : "; ") + text;
      const lab::Outcome o = outcome_of(at);
      const double x = static_cast<double>(d);
      if (!v.ranges.empty() && v.ranges.back().outcome == o) {
        v.ranges.back().to = x;
        v.ranges.back().text += "; " + text;
      } else {
        v.ranges.push_back({x, x, o, text});
      }
    }
    v.plain = words("c8.finding", {{"init", to_string(g.init)},
                                   {"optimizer", optimizer},
                                   {"budget", budget},
                                   {"seeds", c.seeds},
                                   {"trend", trend},
                                   {"bigram", bigram}});
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace attnlab::train::lm
