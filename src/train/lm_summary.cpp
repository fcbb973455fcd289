// What the language-model study's runs show (attnlab/lm_study.hpp): the bigram baseline, steps
// to a loss, each cell pooled over seeds, and each cell's best rate in a tuning study.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/error.hpp"
#include "attnlab/lm_study.hpp"
#include "lab/claims_data.hpp"

namespace attnlab::train::lm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using lab::kNaN;

// The median with +∞ allowed (a diverged run's loss): the middle value, or the mean of the
// middle two (+∞ if either is).
double median_of(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n % 2 == 1) return v[n / 2];
  const double a = v[n / 2 - 1], b = v[n / 2];
  return std::isinf(a) || std::isinf(b) ? kInf : (a + b) / 2;
}

double final_of(const LmRunResult& r) {
  return r.diverged || !std::isfinite(r.final_val_bpc) ? kInf : r.final_val_bpc;
}

double layer_mean(const std::vector<double>& per_layer) {
  if (per_layer.empty()) return kNaN;
  double sum = 0;
  for (double x : per_layer) sum += x;
  return sum / static_cast<double>(per_layer.size());
}

// The mean over runs of a finite field; NaN when no run has it.
template <class F>
double mean_over(const std::vector<const LmRunResult*>& runs, F field) {
  double sum = 0;
  int n = 0;
  for (const auto* r : runs)
    if (const double x = field(*r); std::isfinite(x)) sum += x, ++n;
  return n > 0 ? sum / n : kNaN;
}

}  // namespace

double bigram_bpc(const Corpus& corpus) {
  const auto V = static_cast<size_t>(corpus.vocab());
  if (V == 0 || corpus.train.size() < 2 || corpus.validation.size() < 2)
    throw Error("bigram_bpc: the corpus '" + corpus.name + "' has too little text");
  std::vector<double> counts(V * V, 1.0), totals(V, static_cast<double>(V));  // add-one smoothing
  for (size_t i = 0; i + 1 < corpus.train.size(); ++i) {
    counts[corpus.train[i] * V + corpus.train[i + 1]] += 1;
    totals[corpus.train[i]] += 1;
  }
  double bits = 0;
  for (size_t i = 0; i + 1 < corpus.validation.size(); ++i) {
    const size_t a = corpus.validation[i], b = corpus.validation[i + 1];
    bits -= std::log2(counts[a * V + b] / totals[a]);
  }
  return bits / static_cast<double>(corpus.validation.size() - 1);
}

int64_t steps_to(const LmRunResult& run, double bpc) {
  for (const auto& p : run.curve)
    if (std::isfinite(p.val_bpc) && p.val_bpc <= bpc) return p.step;
  return -1;
}

std::vector<LmCell> summarise(const LmStudyResult& study, double bigram) {
  const LmStudyConfig& c = study.config;
  const std::vector<RunPlace> where = places(c);
  if (where.size() != study.runs.size())
    throw Error(fmt::format("lm summarise: {} runs for a sweep of {}", study.runs.size(), where.size()));
  const double margin = lab::claim_threshold("C8", "lm_threshold_margin_bpc");
  // Consecutive runs of one cell (the sweep's innermost axis is the seed).
  std::vector<LmCell> cells;
  std::vector<std::vector<const LmRunResult*>> members;
  for (size_t i = 0; i < study.runs.size(); ++i) {
    const LmRunResult& r = study.runs[i];
    const LmRunConfig& rc = r.config;
    if (cells.empty() || cells.back().group != where[i].group || cells.back().d_k != rc.model.d_k ||
        !(cells.back().arm == where[i].arm) || cells.back().lr != rc.lr) {
      LmCell cell;
      cell.group = where[i].group;
      cell.init = rc.model.init;
      cell.optimizer = rc.optimizer;
      cell.d_k = rc.model.d_k;
      cell.arm = where[i].arm;
      cell.lr = rc.lr;
      cells.push_back(cell);
      members.emplace_back();
    }
    members.back().push_back(&r);
  }
  for (size_t k = 0; k < cells.size(); ++k) {
    LmCell& cell = cells[k];
    const auto& runs = members[k];
    std::vector<double> finals;
    for (const auto* r : runs) {
      finals.push_back(final_of(*r));
      cell.learnt += !r->diverged && final_of(*r) < bigram;
      cell.diverged += r->diverged;
      cell.spiked += r->loss_spikes > 0;
    }
    cell.runs = static_cast<int64_t>(runs.size());
    cell.median_final = median_of(finals);
    cell.min_final = *std::min_element(finals.begin(), finals.end());
    cell.max_final = *std::max_element(finals.begin(), finals.end());
    cell.entropy_init = mean_over(runs, [](const LmRunResult& r) { return r.curve.empty() ? kNaN : layer_mean(r.curve.front().entropy); });
    cell.entropy_end = mean_over(runs, [](const LmRunResult& r) { return r.curve.empty() ? kNaN : layer_mean(r.curve.back().entropy); });
    cell.max_prob_init = mean_over(runs, [](const LmRunResult& r) { return r.curve.empty() ? kNaN : layer_mean(r.curve.front().max_prob); });
    cell.max_prob_end = mean_over(runs, [](const LmRunResult& r) { return r.curve.empty() ? kNaN : layer_mean(r.curve.back().max_prob); });
    cell.grad_q_first = mean_over(runs, [](const LmRunResult& r) { return r.curve.size() > 1 ? r.curve[1].grad_norm_q : kNaN; });
    cell.grad_k_first = mean_over(runs, [](const LmRunResult& r) { return r.curve.size() > 1 ? r.curve[1].grad_norm_k : kNaN; });
  }
  // Steps to the loss the 1/√d_k cell of the same group and d_k ends at (its best rate's, in a
  // tuning study), plus the margin.
  for (size_t k = 0; k < cells.size(); ++k) {
    LmCell& cell = cells[k];
    double reference = kInf;
    for (const auto& b : cells)
      if (b.group == cell.group && b.d_k == cell.d_k && b.arm == Arm::inv_sqrt_d())
        reference = std::min(reference, b.median_final);
    if (!std::isfinite(reference)) continue;
    cell.threshold = reference + margin;
    std::vector<double> steps;
    int64_t reached = 0;
    for (const auto* r : members[k]) {
      const int64_t s = steps_to(*r, cell.threshold);
      reached += s >= 0;
      steps.push_back(s >= 0 ? static_cast<double>(s) : static_cast<double>(r->config.steps + r->config.eval_every));
    }
    cell.median_steps = median_of(steps);
    cell.min_steps = *std::min_element(steps.begin(), steps.end());
    cell.max_steps = *std::max_element(steps.begin(), steps.end());
    cell.steps_censored = 2 * reached <= cell.runs;
  }
  return cells;
}

std::vector<LmTunedRate> best_rates(const std::vector<LmCell>& cells) {
  std::vector<LmTunedRate> best;
  std::vector<const LmCell*> chosen;
  for (const auto& c : cells) {
    size_t i = 0;
    while (i < best.size() && !(chosen[i]->group == c.group && chosen[i]->d_k == c.d_k && chosen[i]->arm == c.arm)) ++i;
    if (i == best.size()) {
      best.push_back({c.init, c.optimizer, c.d_k, c.arm.name(), c.lr});
      chosen.push_back(&c);
    } else if (c.median_final < chosen[i]->median_final ||
               (c.median_final == chosen[i]->median_final && c.lr < chosen[i]->lr)) {
      best[i].lr = c.lr;
      chosen[i] = &c;
    }
  }
  return best;
}

}  // namespace attnlab::train::lm
