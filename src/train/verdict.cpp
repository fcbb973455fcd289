// C8's verdict rule (docs/training.md, "Verdict rule"): at the largest d_k of the
// sweep, unscaled attention against 1/√d_k, one lab verdict per (task, init, optimiser).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "attnlab/train.hpp"
#include "lab/claims_data.hpp"

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

// The outcome by the rule, and the numbers that decided it in one paragraph.
struct Decision {
  lab::Outcome outcome = lab::Outcome::inconclusive;
  std::string summary;
};

Decision decide(const Rule& rule, const StudyResult& study, const CellSummary& none, const CellSummary& sqrt,
                int64_t d_max, OptimizerKind opt, InitMode init, const std::string& trend) {
  const std::string numbers = fmt::format(
      "At d_k = {}, {} with {} init: unscaled reached 90% in {}/{} runs (median steps {}), 1/√d_k in {}/{} "
      "(median {}); mean final accuracy {:.3f} vs {:.3f}. Attention entropy at init {:.3f} vs {:.3f} nats, "
      "mean ||J||_F at init {:.4f} vs {:.4f}; ||dL/dW_qk|| after the first steps {:.3g} vs {:.3g}. "
      "Unscaled median steps by d_k: {}.",
      d_max, to_string(opt), to_string(init), none.reached, none.runs, fmt_steps(none, study.config.base.steps),
      sqrt.reached, sqrt.runs, fmt_steps(sqrt, study.config.base.steps), none.mean_final_accuracy,
      sqrt.mean_final_accuracy, none.mean_entropy_start, sqrt.mean_entropy_start, none.mean_jacobian_start,
      sqrt.mean_jacobian_start, none.mean_grad_qk_first, sqrt.mean_grad_qk_first, trend);
  // The baseline must learn, else nothing can be said.
  if (sqrt.reached < rule.baseline_reached_share * sqrt.runs)
    return {lab::Outcome::inconclusive,
            fmt::format("The 1/√d_k baseline itself reached 90% in only {}/{} runs within {} steps. {}", sqrt.reached,
                        sqrt.runs, study.config.base.steps, numbers)};
  if (none.reached < sqrt.reached || none.median_steps >= rule.slower_steps_ratio * sqrt.median_steps ||
      none.mean_final_accuracy < sqrt.mean_final_accuracy - rule.final_accuracy_margin)
    return {lab::Outcome::confirmed, "Unscaled attention learns more slowly or not at all. " + numbers};
  if (none.reached == none.runs && none.median_steps <= rule.as_fast_steps_ratio * sqrt.median_steps)
    return {lab::Outcome::refuted,
            fmt::format("Unscaled attention trains as fast as 1/√d_k at d_k = {}{}. {}", d_max,
                        opt == OptimizerKind::adam ? " (Adam divides each update by the gradient's running RMS, so a "
                                                     "smaller gradient does not mean a smaller step)"
                                                   : "",
                        numbers)};
  return {lab::Outcome::inconclusive,
          fmt::format("Unscaled attention is slower, but by less than the {:g}× margin of the rule. {}",
                      rule.slower_steps_ratio, numbers)};
}

std::string policy_words(OptimizerKind opt) { return opt == OptimizerKind::adam ? "Adam" : "SGD with momentum"; }

// What the measurements say about why the unscaled cell failed or slowed (or that it did not).
std::string mechanism_words(const CellSummary& none, const CellSummary& sqrt) {
  const double grad_ratio = none.mean_grad_qk_first / sqrt.mean_grad_qk_first;
  const std::string state = fmt::format(
      "At initialisation its attention put {:.2f} of the weight on one position on average, entropy {:.2f} nats "
      "(with 1/√d_k: {:.2f} of the weight, {:.2f} nats), and the gradient reaching W_q and W_k in the first steps "
      "was {:.2g}× the scaled model's.",
      none.mean_max_prob_start, none.mean_entropy_start, sqrt.mean_max_prob_start, sqrt.mean_entropy_start,
      grad_ratio);
  switch (diagnose(none, sqrt)) {
    case Diagnosis::learns: return state;
    case Diagnosis::saturated_at_init:
      return state + (grad_ratio >= 1 ? " So what stops it is saturation, not a small gradient: the gradient is "
                                        "larger, but a one-hot softmax passes almost nothing back to the positions "
                                        "it would have to learn to attend to."
                                      : " It failed with a saturated softmax and a smaller gradient.");
    case Diagnosis::saturates_in_training:
      return state + fmt::format(" It did not start saturated but ended so (largest probability {:.3f} at the end): "
                                 "the attention sharpened to one-hot during training and learning stopped there.",
                                 none.mean_max_prob_end);
    case Diagnosis::small_gradient: return state + " It failed with a small gradient, not a saturated softmax.";
    case Diagnosis::other: return state + " Neither saturation nor a small gradient explains the difference.";
  }
  return state;
}

}  // namespace

std::vector<lab::Verdict> verdicts(const StudyResult& study) {
  const auto cells = summarise(study);
  const StudyConfig& config = study.config;
  std::vector<lab::Verdict> out;
  if (config.d_ks.empty()) return out;
  const Rule rule;
  const int64_t d_max = *std::max_element(config.d_ks.begin(), config.d_ks.end());
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
        lab::Verdict v = lab::make_verdict("C8");
        v.supplementary = !headline;
        v.title += fmt::format(" ({}{})", opt == OptimizerKind::adam ? "Adam" : "SGD with momentum",
                               headline ? "" : fmt::format("; {} task, {} init", to_string(task.kind), to_string(init)));
        v.theory_text =
            fmt::format("without 1/√d_k, at d_k = {} the model needs more steps to reach {:.0f}% (or never does)",
                        d_max, 100 * config.base.threshold);
        v.tolerance = rule.slower_steps_ratio;
        v.unit = fmt::format("ratio of median steps to {:.0f} %, without / with 1/√d_k", 100 * config.base.threshold);
        v.tolerance_unit = "ratio of median steps from which the unscaled model counts as slower";
        v.method = fmt::format(
            "{} task, {} init, {}, {} seeds per cell. Confirmed if, at the largest d_k, unscaled runs reach {:.0f}% in "
            "fewer seeds than 1/√d_k, or need ≥ {:g}× its median steps (runs that never reach count as the budget "
            "+ one evaluation), or end ≥ {:g} below its mean final accuracy; refuted if every unscaled run reaches it "
            "within {:g}× the median; inconclusive otherwise, or if 1/√d_k itself reaches it in fewer than 2/3 of "
            "the seeds. The number measured is the ratio of median steps to reach it, without / with 1/√d_k.",
            to_string(task.kind), to_string(init), to_string(opt), config.seeds, 100 * config.base.threshold,
            rule.slower_steps_ratio, rule.final_accuracy_margin, rule.as_fast_steps_ratio);
        const CellSummary* none = find(task.kind, init, opt, d_max, ScalePolicy::none());
        const CellSummary* sqrt = find(task.kind, init, opt, d_max, ScalePolicy::inv_sqrt_d());
        v.measured = (none ? none->median_steps : lab::kNaN) / (sqrt ? sqrt->median_steps : lab::kNaN);
        if (none == nullptr || sqrt == nullptr) {
          v.outcome = lab::Outcome::inconclusive;
          v.measured_text = "the sweep lacks the unscaled or the 1/√d_k cell at the largest d_k";
          out.push_back(std::move(v));
          continue;
        }
        // The trend of the unscaled runs over d_k, for the summary.
        std::string trend;
        for (int64_t d : config.d_ks)
          if (const CellSummary* c = find(task.kind, init, opt, d, ScalePolicy::none()))
            trend += fmt::format("{}{}: {} ({}/{})", trend.empty() ? "" : ", ", d, fmt_steps(*c, config.base.steps), c->reached, c->runs);
        Decision decision = decide(rule, study, *none, *sqrt, d_max, opt, init, trend);
        v.outcome = decision.outcome;
        v.measured_text = std::move(decision.summary);
        // The same rule at every d_k of the sweep: where does the outcome change?
        v.range_variable = "d_k";
        for (int64_t d : config.d_ks) {
          const CellSummary* n = find(task.kind, init, opt, d, ScalePolicy::none());
          const CellSummary* q = find(task.kind, init, opt, d, ScalePolicy::inv_sqrt_d());
          if (n == nullptr || q == nullptr) continue;
          const lab::Outcome o = decide(rule, study, *n, *q, d, opt, init, trend).outcome;
          const std::string text = fmt::format("unscaled {}/{} runs reach {:.0f}% (median {} steps), 1/√d_k {}/{} ({}); {}",
                                               n->reached, n->runs, 100 * config.base.threshold, fmt_steps(*n, config.base.steps),
                                               q->reached, q->runs, fmt_steps(*q, config.base.steps), to_string(diagnose(*n, *q)));
          const double x = static_cast<double>(d);
          if (!v.ranges.empty() && v.ranges.back().outcome == o) {
            v.ranges.back().to = x;
            v.ranges.back().text += fmt::format("; d_k {}: {}", d, text);
          } else {
            v.ranges.push_back({x, x, o, fmt::format("d_k {}: {}", d, text)});
          }
        }
        v.plain = fmt::format(
            "With {} at d_k = {}, the model without the scale reached {:.0f}% held-out accuracy in {} of {} runs "
            "(median {} steps); with 1/√d_k, {} of {} (median {} steps). {}",
            policy_words(opt), d_max, 100 * config.base.threshold, none->reached, none->runs, fmt_steps(*none, config.base.steps),
            sqrt->reached, sqrt->runs, fmt_steps(*sqrt, config.base.steps), mechanism_words(*none, *sqrt));
        out.push_back(std::move(v));
      }
  return out;
}

}  // namespace attnlab::train
