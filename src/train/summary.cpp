// Per-cell summaries of a study: the runs of one (task, init, optimiser, d_k, scale) pooled over seeds.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "attnlab/statistics.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The scaling by name: names are unique (parse(name()) round-trips) and ordered.
using CellKey = std::tuple<TaskKind, InitMode, OptimizerKind, int64_t, std::string, double>;
CellKey key_of(const RunConfig& c) {
  return {c.task.kind, c.model.init, c.optimizer, c.model.d_k, c.model.scale.name(), c.lr};
}


}  // namespace

std::vector<CellSummary> summarise(const StudyResult& study) {
  std::map<CellKey, std::vector<const RunResult*>> cells;
  std::vector<std::pair<CellKey, Scaling>> order;
  for (const auto& r : study.runs) {
    const CellKey k = key_of(r.config);
    if (!cells.count(k)) order.push_back({k, r.config.model.scale});
    cells[k].push_back(&r);
  }
  std::vector<CellSummary> out;
  for (const auto& [k, scale] : order) {
    const auto& runs = cells[k];
    CellSummary c;
    std::tie(c.task, c.init, c.optimizer, c.d_k, std::ignore, c.lr) = k;
    c.scale = scale;
    c.runs = static_cast<int64_t>(runs.size());
    std::vector<double> steps;
    c.min_final_accuracy = 1.0;
    double grad_n = 0;
    for (const RunResult* r : runs) {
      const double censor = static_cast<double>(r->config.steps + r->config.eval_every);
      if (r->steps_to_threshold >= 0) ++c.reached;
      steps.push_back(r->steps_to_threshold >= 0 ? static_cast<double>(r->steps_to_threshold) : censor);
      c.mean_final_accuracy += r->final_accuracy / static_cast<double>(c.runs);
      c.min_final_accuracy = std::min(c.min_final_accuracy, r->final_accuracy);
      c.diverged += r->diverged;
      c.mean_entropy_start += r->curve.front().entropy / static_cast<double>(c.runs);
      c.mean_jacobian_start += r->curve.front().jacobian_fro / static_cast<double>(c.runs);
      c.mean_entropy_end += r->curve.back().entropy / static_cast<double>(c.runs);
      c.mean_jacobian_end += r->curve.back().jacobian_fro / static_cast<double>(c.runs);
      c.mean_max_prob_start += r->curve.front().max_prob / static_cast<double>(c.runs);
      c.mean_max_prob_end += r->curve.back().max_prob / static_cast<double>(c.runs);
      if (const CurvePoint* p = r->first_trained_point(); p && std::isfinite(p->grad_qk)) {
        c.mean_grad_qk_first += p->grad_qk;
        grad_n += 1;
      }
    }
    c.mean_grad_qk_first = grad_n > 0 ? c.mean_grad_qk_first / grad_n : kNaN;
    c.median_steps = stats::median(steps);
    // Censored values sort last, so the median involves one as soon as half the runs or more never reached.
    c.median_censored = 2 * c.reached <= c.runs;
    out.push_back(c);
  }
  return out;
}

const char* to_string(Diagnosis d) {
  switch (d) {
    case Diagnosis::learns: return "learns";
    case Diagnosis::saturated_at_init: return "saturated at initialisation";
    case Diagnosis::saturates_in_training: return "saturates during training";
    case Diagnosis::small_gradient: return "small gradient";
    case Diagnosis::other: return "other";
  }
  return "other";
}

Diagnosis diagnose(const CellSummary& cell, const CellSummary& baseline) {
  const bool learns = !cell.median_censored && cell.median_steps < 1.5 * baseline.median_steps;
  if (learns) return Diagnosis::learns;
  if (cell.mean_max_prob_start >= 0.9) return Diagnosis::saturated_at_init;
  if (cell.mean_grad_qk_first < 0.1 * baseline.mean_grad_qk_first) return Diagnosis::small_gradient;
  if (cell.mean_max_prob_end >= 0.99) return Diagnosis::saturates_in_training;
  return Diagnosis::other;
}

}  // namespace attnlab::train
