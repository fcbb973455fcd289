// Per-cell summaries of a study, the C8 verdict rule and the CSV tables.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <tuple>

#include "attnlab/train.hpp"

namespace attnlab::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using CellKey = std::tuple<TaskKind, InitMode, OptimizerKind, int64_t, ScaleMode>;
CellKey key_of(const RunConfig& c) { return {c.task.kind, c.model.init, c.optimizer, c.model.d_k, c.model.scale}; }

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The first evaluation after training started (the gradient is not defined at step 0).
const CurvePoint* first_trained_point(const RunResult& r) { return r.curve.size() > 1 ? &r.curve[1] : nullptr; }

std::string fmt_steps(const CellSummary& c) {
  return c.median_censored ? fmt::format(">{:.0f}", c.median_steps - 1) : fmt::format("{:.0f}", c.median_steps);
}

}  // namespace

std::vector<CellSummary> summarise(const StudyResult& study) {
  std::map<CellKey, std::vector<const RunResult*>> cells;
  std::vector<CellKey> order;
  for (const auto& r : study.runs) {
    const CellKey k = key_of(r.config);
    if (!cells.count(k)) order.push_back(k);
    cells[k].push_back(&r);
  }
  std::vector<CellSummary> out;
  for (const auto& k : order) {
    const auto& runs = cells[k];
    CellSummary c;
    std::tie(c.task, c.init, c.optimizer, c.d_k, c.scale) = k;
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
      if (const CurvePoint* p = first_trained_point(*r); p && std::isfinite(p->grad_qk)) {
        c.mean_grad_qk_first += p->grad_qk;
        grad_n += 1;
      }
    }
    c.mean_grad_qk_first = grad_n > 0 ? c.mean_grad_qk_first / grad_n : kNaN;
    c.median_steps = median(steps);
    // Censored values sort last, so the median involves one as soon as half the runs or more never reached.
    c.median_censored = 2 * c.reached <= c.runs;
    out.push_back(c);
  }
  return out;
}

std::vector<Verdict> verdicts(const StudyResult& study) {
  const auto cells = summarise(study);
  std::vector<Verdict> out;
  if (study.config.d_ks.empty()) return out;
  const int64_t d_max = *std::max_element(study.config.d_ks.begin(), study.config.d_ks.end());
  auto find = [&](TaskKind t, InitMode i, OptimizerKind o, int64_t d, ScaleMode s) -> const CellSummary* {
    for (const auto& c : cells)
      if (c.task == t && c.init == i && c.optimizer == o && c.d_k == d && c.scale == s) return &c;
    return nullptr;
  };
  for (const auto& task : study.config.tasks)
    for (InitMode init : study.config.inits)
      for (OptimizerKind opt : study.config.optimizers) {
        Verdict v;
        v.task = task.kind;
        v.init = init;
        v.optimizer = opt;
        const CellSummary* none = find(task.kind, init, opt, d_max, ScaleMode::none);
        const CellSummary* sqrt = find(task.kind, init, opt, d_max, ScaleMode::inv_sqrt_d);
        if (none == nullptr || sqrt == nullptr) {
          v.status = "inconclusive";
          v.summary = "the sweep lacks the unscaled or the 1/sqrt(d_k) cell at the largest d_k";
          out.push_back(v);
          continue;
        }
        // The trend of the unscaled runs over d_k, for the summary.
        std::string trend;
        for (int64_t d : study.config.d_ks)
          if (const CellSummary* c = find(task.kind, init, opt, d, ScaleMode::none))
            trend += fmt::format("{}{}: {} ({}/{})", trend.empty() ? "" : ", ", d, fmt_steps(*c), c->reached, c->runs);
        const std::string numbers = fmt::format(
            "At d_k = {}, {} with {} init: unscaled reached 90% in {}/{} runs (median steps {}), 1/sqrt(d_k) in {}/{} "
            "(median {}); mean final accuracy {:.3f} vs {:.3f}. Attention entropy at init {:.3f} vs {:.3f} nats, "
            "mean ||J||_F at init {:.4f} vs {:.4f}; ||dL/dW_qk|| after the first steps {:.3g} vs {:.3g}. "
            "Unscaled median steps by d_k: {}.",
            d_max, to_string(opt), to_string(init), none->reached, none->runs, fmt_steps(*none), sqrt->reached,
            sqrt->runs, fmt_steps(*sqrt), none->mean_final_accuracy, sqrt->mean_final_accuracy,
            none->mean_entropy_start, sqrt->mean_entropy_start, none->mean_jacobian_start, sqrt->mean_jacobian_start,
            none->mean_grad_qk_first, sqrt->mean_grad_qk_first, trend);
        // The rule (docs/training.md): the baseline must learn, else nothing can be said.
        if (3 * sqrt->reached < 2 * sqrt->runs) {
          v.status = "inconclusive";
          v.summary = fmt::format("The 1/sqrt(d_k) baseline itself reached 90% in only {}/{} runs within {} steps. {}",
                                  sqrt->reached, sqrt->runs, study.config.base.steps, numbers);
        } else if (none->reached < sqrt->reached || none->median_steps >= 1.5 * sqrt->median_steps ||
                   none->mean_final_accuracy < sqrt->mean_final_accuracy - 0.1) {
          v.status = "confirmed";
          v.summary = "Unscaled attention learns more slowly or not at all. " + numbers;
        } else if (none->reached == none->runs && none->median_steps <= 1.2 * sqrt->median_steps) {
          v.status = "refuted";
          v.summary = fmt::format("Unscaled attention trains as fast as 1/sqrt(d_k) at d_k = {}{}. {}", d_max,
                                  opt == OptimizerKind::adam
                                      ? " (Adam divides each update by the gradient's running RMS, so a smaller "
                                        "gradient does not mean a smaller step)"
                                      : "",
                                  numbers);
        } else {
          v.status = "inconclusive";
          v.summary = "Unscaled attention is slower, but by less than the 1.5x margin of the rule. " + numbers;
        }
        out.push_back(v);
      }
  return out;
}

std::string runs_csv(const StudyResult& study) {
  std::string s =
      "task,init,optimizer,d_k,scale,seed,lr,steps,steps_to_threshold,final_accuracy,final_loss,diverged,"
      "entropy_init,jacobian_fro_init,grad_qk_first,seconds\n";
  for (const auto& r : study.runs) {
    const auto& c = r.config;
    const CurvePoint* first = first_trained_point(r);
    s += fmt::format("{},{},{},{},{},{},{},{},{},{:.4f},{:.5g},{},{:.5g},{:.5g},{:.5g},{:.3f}\n", to_string(c.task.kind),
                     to_string(c.model.init), to_string(c.optimizer), c.model.d_k, to_string(c.model.scale), c.seed,
                     c.lr > 0 ? c.lr : default_lr(c.optimizer), c.steps, r.steps_to_threshold, r.final_accuracy,
                     r.final_loss, r.diverged ? 1 : 0, r.curve.front().entropy, r.curve.front().jacobian_fro,
                     first ? first->grad_qk : kNaN, r.seconds);
  }
  return s;
}

std::string curves_csv(const StudyResult& study) {
  std::string s =
      "task,init,optimizer,d_k,scale,seed,step,train_loss,eval_loss,eval_accuracy,entropy,jacobian_fro,max_prob,"
      "grad_qk,temperature\n";
  for (const auto& r : study.runs) {
    const auto& c = r.config;
    for (const auto& p : r.curve)
      s += fmt::format("{},{},{},{},{},{},{},{:.5g},{:.5g},{:.4f},{:.5g},{:.5g},{:.5g},{:.5g},{:.5g}\n",
                       to_string(c.task.kind), to_string(c.model.init), to_string(c.optimizer), c.model.d_k,
                       to_string(c.model.scale), c.seed, p.step, p.train_loss, p.eval_loss, p.eval_accuracy, p.entropy,
                       p.jacobian_fro, p.max_prob, p.grad_qk, p.temperature);
  }
  return s;
}

std::string cells_csv(const std::vector<CellSummary>& cells) {
  std::string s =
      "task,init,optimizer,d_k,scale,runs,reached,median_steps,median_censored,mean_final_accuracy,"
      "min_final_accuracy,entropy_start,entropy_end,jacobian_fro_start,jacobian_fro_end,grad_qk_first,diverged\n";
  for (const auto& c : cells)
    s += fmt::format("{},{},{},{},{},{},{},{:.0f},{},{:.4f},{:.4f},{:.5g},{:.5g},{:.5g},{:.5g},{:.5g},{}\n",
                     to_string(c.task), to_string(c.init), to_string(c.optimizer), c.d_k, to_string(c.scale), c.runs,
                     c.reached, c.median_steps, c.median_censored ? 1 : 0, c.mean_final_accuracy, c.min_final_accuracy,
                     c.mean_entropy_start, c.mean_entropy_end, c.mean_jacobian_start, c.mean_jacobian_end,
                     c.mean_grad_qk_first, c.diverged);
  return s;
}

}  // namespace attnlab::train
