// C8's verdict rule (docs/training.md, "Verdict rule"): at the largest d_k of the
// sweep, unscaled attention against 1/√d_k, one lab verdict per (task, init, optimiser). Its
// thresholds are C8's in src/lab/claims.json; its sentences are the "c8.*" of src/lab/words/train.json.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "attnlab/train.hpp"
#include "lab/claims_data.hpp"
#include "lab/words.hpp"

namespace attnlab::train {
namespace {

// The median steps, or ">budget" when most runs never reached the threshold.
std::string fmt_steps(const CellSummary& c, int64_t budget) {
  return c.median_censored ? fmt::format(">{}", budget) : fmt::format("{:.0f}", c.median_steps);
}

// The rule's numbers, kept with the claim in the lab's catalogue (src/lab/claims.json): the lab's
// claims data reads only that file, so the training study depends on it without a cycle.
struct Rule {
  double baseline_reached_share = lab::claim_threshold("C8", "baseline_reached_share");
  double slower_steps_ratio = lab::claim_threshold("C8", "slower_steps_ratio");
  double final_accuracy_margin = lab::claim_threshold("C8", "final_accuracy_margin");
  double as_fast_steps_ratio = lab::claim_threshold("C8", "as_fast_steps_ratio");
};

// One comparison of unscaled attention against 1/√d_k (at one d_k), and the words around it: every
// C8 sentence of src/lab/words/train.json is filled from these.
struct Facts {
  const CellSummary* none;
  const CellSummary* sqrt;
  int64_t d_k, budget;
  double threshold;  // the accuracy counted as learnt, in %
  std::string optimizer_key, init, trend, numbers = {}, diagnosis = {}, mechanism = {}, optimizer = {};
};

std::string say(const lab::Words& words, const char* key, const Facts& f, const Rule& rule) {
  const CellSummary &none = *f.none, &sqrt = *f.sqrt;
  return words(key, {{"d_k", f.d_k},
                     {"steps", f.budget},
                     {"threshold", f.threshold},
                     {"optimizer_key", f.optimizer_key},
                     {"optimizer", f.optimizer},
                     {"init", f.init},
                     {"none_reached", none.reached},
                     {"none_runs", none.runs},
                     {"none_steps", fmt_steps(none, f.budget)},
                     {"sqrt_reached", sqrt.reached},
                     {"sqrt_runs", sqrt.runs},
                     {"sqrt_steps", fmt_steps(sqrt, f.budget)},
                     {"none_accuracy", none.mean_final_accuracy},
                     {"sqrt_accuracy", sqrt.mean_final_accuracy},
                     {"none_entropy", none.mean_entropy_start},
                     {"sqrt_entropy", sqrt.mean_entropy_start},
                     {"none_jacobian", none.mean_jacobian_start},
                     {"sqrt_jacobian", sqrt.mean_jacobian_start},
                     {"none_gradient", none.mean_grad_qk_first},
                     {"sqrt_gradient", sqrt.mean_grad_qk_first},
                     {"none_max_prob", none.mean_max_prob_start},
                     {"sqrt_max_prob", sqrt.mean_max_prob_start},
                     {"none_max_prob_end", none.mean_max_prob_end},
                     {"gradient_ratio", none.mean_grad_qk_first / sqrt.mean_grad_qk_first},
                     {"slower_steps_ratio", rule.slower_steps_ratio},
                     {"trend", f.trend},
                     {"numbers", f.numbers},
                     {"diagnosis", f.diagnosis},
                     {"mechanism", f.mechanism},
                     {"adam_note", f.optimizer_key == "adam" ? words("c8.as_fast_adam") : std::string()}});
}

// The outcome by the rule, and the numbers that decided it in one paragraph.
struct Decision {
  lab::Outcome outcome = lab::Outcome::inconclusive;
  std::string summary;
};

// The rule's outcome, and which of its cases decided it.
enum class Case { baseline_failed, slower, as_fast, within_margin };
Case rule_case(const Rule& rule, const CellSummary& none, const CellSummary& sqrt) {
  // The baseline must learn, else nothing can be said.
  if (sqrt.reached < rule.baseline_reached_share * sqrt.runs) return Case::baseline_failed;
  if (none.reached < sqrt.reached || none.median_steps >= rule.slower_steps_ratio * sqrt.median_steps ||
      none.mean_final_accuracy < sqrt.mean_final_accuracy - rule.final_accuracy_margin)
    return Case::slower;
  if (none.reached == none.runs && none.median_steps <= rule.as_fast_steps_ratio * sqrt.median_steps)
    return Case::as_fast;
  return Case::within_margin;
}

Decision decide(const Rule& rule, const lab::Words& words, Facts f) {
  f.numbers = say(words, "c8.numbers", f, rule);
  switch (rule_case(rule, *f.none, *f.sqrt)) {
    case Case::baseline_failed: return {lab::Outcome::inconclusive, say(words, "c8.baseline_failed", f, rule)};
    case Case::slower: return {lab::Outcome::confirmed, say(words, "c8.slower", f, rule)};
    case Case::as_fast: return {lab::Outcome::refuted, say(words, "c8.as_fast", f, rule)};
    case Case::within_margin: break;
  }
  return {lab::Outcome::inconclusive, say(words, "c8.within_margin", f, rule)};
}

// What the measurements say about why the unscaled cell failed or slowed (or that it did not).
std::string mechanism_words(const Rule& rule, const lab::Words& words, const Facts& f) {
  const char* why = nullptr;
  switch (diagnose(*f.none, *f.sqrt)) {
    case Diagnosis::learns:
      break;
    case Diagnosis::saturated_at_init:
      why = f.none->mean_grad_qk_first / f.sqrt->mean_grad_qk_first >= 1 ? "c8.saturated_larger_gradient"
                                                                         : "c8.saturated_smaller_gradient";
      break;
    case Diagnosis::saturates_in_training:
      why = "c8.saturates_in_training";
      break;
    case Diagnosis::small_gradient:
      why = "c8.small_gradient";
      break;
    case Diagnosis::other:
      why = "c8.other";
      break;
  }
  return say(words, "c8.state", f, rule) + (why ? say(words, why, f, rule) : std::string());
}

}  // namespace

std::vector<lab::Verdict> verdicts(const StudyResult& study) {
  const auto cells = summarise(study);
  const StudyConfig& config = study.config;
  std::vector<lab::Verdict> out;
  if (config.d_ks.empty()) return out;
  const Rule rule;
  const lab::Words words("train");
  const int64_t d_max = *std::max_element(config.d_ks.begin(), config.d_ks.end());
  const double threshold = 100 * config.base.threshold;
  auto find = [&](TaskKind t, InitMode i, OptimizerKind o, int64_t d, const Scaling& s) -> const CellSummary* {
    for (const auto& c : cells)
      if (c.task == t && c.init == i && c.optimizer == o && c.d_k == d && c.scale == s) return &c;
    return nullptr;
  };
  for (const auto& task : config.tasks)
    for (InitMode init : config.inits)
      for (OptimizerKind opt : config.optimizers) {
        // The headline: the sweep's first task and init (associative recall, unit init in
        // the presets); the other settings are shown but left out of C8's overall verdict.
        const bool headline = task.kind == config.tasks.front().kind && init == config.inits.front();
        const std::string optimizer = words(opt == OptimizerKind::adam ? "c8.optimizer_adam" : "c8.optimizer_sgd");
        lab::Verdict v = lab::make_verdict("C8");
        // The check's name: the optimiser for the headline setting, with the task and init for the
        // others (all side checks of C8: claims.json's main_check is the language models').
        v.check = headline ? to_string(opt) : fmt::format("{}_{}_{}", to_string(opt), to_string(task.kind), to_string(init));
        v.title += words("c8.title", {{"optimizer", optimizer},
                                      {"setting", headline ? std::string()
                                                           : words("c8.title_setting", {{"task", to_string(task.kind)},
                                                                                        {"init", to_string(init)}})}});
        words.fill(v, "c8",
                   {{"d_k", d_max},
                    {"threshold", threshold},
                    {"task", to_string(task.kind)},
                    {"init", to_string(init)},
                    {"optimizer_key", to_string(opt)},
                    {"seeds", config.seeds},
                    {"slower_steps_ratio", rule.slower_steps_ratio},
                    {"final_accuracy_margin", rule.final_accuracy_margin},
                    {"as_fast_steps_ratio", rule.as_fast_steps_ratio}});
        v.tolerance = rule.slower_steps_ratio;
        const CellSummary* none = find(task.kind, init, opt, d_max, ScalePolicy::none());
        const CellSummary* sqrt = find(task.kind, init, opt, d_max, ScalePolicy::inv_sqrt_d());
        v.measured = (none ? none->median_steps : lab::kNaN) / (sqrt ? sqrt->median_steps : lab::kNaN);
        if (none == nullptr || sqrt == nullptr) {
          v.outcome = lab::Outcome::inconclusive;
          v.measured_text = words("c8.missing_cells");
          out.push_back(std::move(v));
          continue;
        }
        // The trend of the unscaled runs over d_k, for the summary.
        std::string trend;
        for (int64_t d : config.d_ks)
          if (const CellSummary* c = find(task.kind, init, opt, d, ScalePolicy::none()))
            trend += fmt::format("{}{}: {} ({}/{})", trend.empty() ? "" : ", ", d, fmt_steps(*c, config.base.steps),
                                 c->reached, c->runs);
        Facts facts{none, sqrt, d_max, config.base.steps, threshold, to_string(opt), to_string(init), trend};
        Decision decision = decide(rule, words, facts);
        v.outcome = decision.outcome;
        v.measured_text = std::move(decision.summary);
        // The same rule at every d_k of the sweep: where does the outcome change?
        v.range_variable = "d_k";
        for (int64_t d : config.d_ks) {
          Facts at = facts;
          at.none = find(task.kind, init, opt, d, ScalePolicy::none());
          at.sqrt = find(task.kind, init, opt, d, ScalePolicy::inv_sqrt_d());
          if (at.none == nullptr || at.sqrt == nullptr) continue;
          at.d_k = d;
          at.diagnosis = to_string(diagnose(*at.none, *at.sqrt));
          const lab::Outcome o = decide(rule, words, at).outcome;
          const std::string text = say(words, "c8.range", at, rule);
          const double x = static_cast<double>(d);
          if (!v.ranges.empty() && v.ranges.back().outcome == o) {
            v.ranges.back().to = x;
            v.ranges.back().text += words("c8.range_next", {{"d_k", d}, {"text", text}});
          } else {
            v.ranges.push_back({x, x, o, words("c8.range_first", {{"d_k", d}, {"text", text}})});
          }
        }
        facts.optimizer = optimizer;
        facts.mechanism = mechanism_words(rule, words, facts);
        v.plain = say(words, "c8.finding", facts, rule);
        out.push_back(std::move(v));
      }
  return out;
}

lab::Outcome c8_outcome(const CellSummary& none, const CellSummary& sqrt) {
  switch (rule_case(Rule{}, none, sqrt)) {
    case Case::slower: return lab::Outcome::confirmed;
    case Case::as_fast: return lab::Outcome::refuted;
    default: return lab::Outcome::inconclusive;
  }
}

}  // namespace attnlab::train
