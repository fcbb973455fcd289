// C6's verdicts (lab/gradflow.hpp) from the `gradflow` experiment's sweep, boundary trials and table:
// judged on the whole gradient reaching Q and K, and beside it on the typical row, with where along d_k
// the unscaled typical gradient starts to fall.
#include <algorithm>
#include <cmath>

#include "lab/claims_data.hpp"
#include "lab/gradflow.hpp"
#include "lab/lab_util.hpp"

namespace attnlab::lab {

namespace {

// Largest over smallest of one quantity over d_k.
double spread(const std::vector<Measure>& v, double Measure::*field) {
  double lo = INFINITY, hi = 0;
  for (const auto& m : v) lo = std::min(lo, m.*field), hi = std::max(hi, m.*field);
  return hi / lo;
}

// The smallest and largest ratio without/with the scale of one quantity over the d_k in [from, to].
std::pair<double, double> ratio_span(const GradflowConfig& c, const std::vector<Measure>& B, const std::vector<Measure>& R,
                                     double Measure::*field, int64_t from, int64_t to) {
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < c.dims.size(); ++i)
    if (c.dims[i] >= from && c.dims[i] <= to) {
      const double r = B[i].*field / R[i].*field;
      lo = std::min(lo, r), hi = std::max(hi, r);
    }
  return {lo, hi};
}

// The largest d_k at which the quantity without the scale is still larger than with it (0: none).
int64_t last_larger(const GradflowConfig& c, const std::vector<Measure>& B, const std::vector<Measure>& R,
                    double Measure::*field) {
  int64_t last = 0;
  for (size_t i = 0; i < c.dims.size(); ++i)
    if (B[i].*field > R[i].*field) last = c.dims[i];
  return last;
}

// The main check: the whole gradient reaching Q and K. Per d_k, it holds where both totals without the scale
// have fallen below the scaled ones and fails where either is still larger.
Verdict verdict_total(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep, const IssueTable& issue,
                      const Words& words) {
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  const double dq_fall = B.front().dq / B.back().dq, dk_fall = B.front().dk / B.back().dk;
  const double remedy_spread = std::max(spread(R, &Measure::dq), spread(R, &Measure::dk));
  const bool vanishes = dq_fall > c.vanish_factor && dk_fall > c.vanish_factor;
  Verdict v = make_verdict("C6");
  v.theory = c.vanish_factor;
  v.measured = std::min(dq_fall, dk_fall);
  v.tolerance = c.vanish_factor;
  v.outcome = !vanishes                                                             ? Outcome::refuted
              : remedy_spread < c.same_order_factor && issue.worst <= 1.0 ? Outcome::confirmed
                                                                          : Outcome::inconclusive;
  v.figure = "gradflow";
  v.range_variable = "d_k";
  for (size_t i = 0; i < c.dims.size(); ++i) {
    const double rq = B[i].dq / R[i].dq, rk = B[i].dk / R[i].dk;
    const Outcome o = rq < 1 && rk < 1 ? Outcome::confirmed : Outcome::refuted;
    const std::string text = words("c6.total_range", {{"d_k", c.dims[i]}, {"q", rq}, {"k", rk}});
    const double x = static_cast<double>(c.dims[i]);
    if (!v.ranges.empty() && v.ranges.back().outcome == o)
      v.ranges.back().to = x, v.ranges.back().text += "; " + text;
    else
      v.ranges.push_back({x, x, o, text});
  }
  const auto [q_lo, q_hi] = ratio_span(c, B, R, &Measure::dq, c.dims.front(), c.dims.back());
  const auto [k_lo, k_hi] = ratio_span(c, B, R, &Measure::dk, c.dims.front(), c.dims.back());
  const auto [row_lo, row_hi] = ratio_span(c, B, R, &Measure::dq_row, c.model_dims[0], c.model_dims[1]);
  words.fill(v, "c6",
             {{"base", util::policy_label(policies.list[policies.base])},
              {"remedy", util::policy_label(policies.list[policies.remedy])},
              {"d_first", c.dims.front()},
              {"d_last", c.dims.back()},
              {"dq_fall", dq_fall},
              {"dk_fall", dk_fall},
              {"dq_change", util::pretty(B.back().dq / B.front().dq)},
              {"dk_change", util::pretty(B.back().dk / B.front().dk)},
              {"remedy_spread", remedy_spread},
              {"vanish", c.vanish_factor},
              {"same_order", c.same_order_factor},
              {"table", issue.text},
              {"worst", issue.worst},
              {"table_rows", c.table_rows},
              {"table_keys", c.table_keys},
              {"table_z", c.table_z},
              {"table_rounding", c.table_rounding},
              {"q_lo", q_lo},
              {"q_hi", q_hi},
              {"k_lo", k_lo},
              {"k_hi", k_hi},
              {"lo", c.model_dims[0]},
              {"hi", c.model_dims[1]},
              {"row_lo", row_lo},
              {"row_hi", row_hi},
              {"key_larger_to", last_larger(c, B, R, &Measure::dk_row)},
              {"query_larger_to", last_larger(c, B, R, &Measure::dq_row)}});
  return v;
}

// Beside it: the typical row (median over rows), with where along d_k its query gradient starts to fall.
Verdict verdict_typical_row(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                            const IssueTable& issue, const Words& words) {
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  const std::string base_name = util::policy_label(policies.list[policies.base]),
                    remedy_name = util::policy_label(policies.list[policies.remedy]);
  // The typical row (median over rows): the seeds' argument is about each softmax row saturating.
  const double j_fall = B.front().j_median / B.back().j_median;
  const double dq_fall = B.front().dq_row / B.back().dq_row, dk_fall = B.front().dk_row / B.back().dk_row;
  const double remedy_spread = std::max(spread(R, &Measure::dq_row), spread(R, &Measure::dk_row));
  const bool vanishes = j_fall > c.vanish_factor && dq_fall > c.vanish_factor && dk_fall > c.vanish_factor;
  const bool same_order = remedy_spread < c.same_order_factor;
  const bool table_ok = issue.worst <= 1.0;
  Verdict v6 = make_verdict("C6");
  v6.check = "typical_row";
  v6.title = words("c6.row.title");
  v6.statement = words("c6.row.statement");
  v6.theory = c.same_order_factor;
  v6.measured = remedy_spread;
  v6.tolerance = c.same_order_factor;
  v6.outcome = util::outcome_of(vanishes && same_order && table_ok);
  v6.figure = "gradflow";
  // Where along d_k does the typical query's gradient shrink without the scale? Step by step, the mean
  // change of log ‖dQ_i‖ over paired trials ± 2 standard errors: a step within noise is called neither way.
  v6.range_variable = "d_k";
  for (size_t i = 0; i + 1 < c.dims.size(); ++i) {
    const auto& a = sweep.base_dq_trials[i];
    const auto& b = sweep.base_dq_trials[i + 1];
    std::vector<double> logs;
    for (size_t t = 0; t < std::min(a.size(), b.size()); ++t) logs.push_back(std::log(b[t] / a[t]));
    const double mean = util::mean(logs);
    // Beyond boundary_max_dim only the sweep's few trials exist; the changes there are orders of magnitude, read by
    // sign.
    const bool few = static_cast<int64_t>(logs.size()) < c.boundary_trials;
    const double se2 = !few && logs.size() > 1 ? claim_threshold("C6", "step_standard_errors") *
                                                     std::sqrt(util::variance(logs) / static_cast<double>(logs.size()))
                                               : NAN;
    const Outcome o = !std::isfinite(se2) ? (mean < 0 ? Outcome::confirmed : Outcome::refuted)
                      : mean + se2 < 0    ? Outcome::confirmed
                      : mean - se2 > 0    ? Outcome::refuted
                                          : Outcome::inconclusive;
    const std::string text = words(
        "c6.range", {{"from", c.dims[i]},
                     {"to", c.dims[i + 1]},
                     {"factor", std::exp(mean)},
                     {"mean", mean},
                     {"error", std::isfinite(se2) ? words("c6.range_error", {{"se", se2}}) : words("c6.range_by_sign")},
                     {"trials", logs.size()},
                     {"remedy_from", R[i].dq_row},
                     {"remedy_to", R[i + 1].dq_row},
                     {"j_from", B[i].j_median},
                     {"j_to", B[i + 1].j_median}});
    if (!v6.ranges.empty() && v6.ranges.back().outcome == o) {
      v6.ranges.back().to = static_cast<double>(c.dims[i + 1]);
      v6.ranges.back().text += "; " + text;
    } else {
      v6.ranges.push_back({static_cast<double>(c.dims[i]), static_cast<double>(c.dims[i + 1]), o, text});
    }
  }
  std::string boundary;
  if (!v6.ranges.empty() && v6.ranges.back().outcome == Outcome::confirmed) {
    std::string before;
    for (size_t k = 0; k + 1 < v6.ranges.size(); ++k) {
      const auto& g = v6.ranges[k];
      const char* change = g.outcome == Outcome::refuted     ? "c6.rises"
                           : g.outcome == Outcome::confirmed ? "c6.falls"
                                                             : "c6.within_spread";
      before += words(before.empty() ? "c6.before_first" : "c6.before_next",
                      {{"change", words(change)}, {"from", g.from}, {"to", g.to}});
    }
    boundary = words("c6.boundary", {{"trials", c.boundary_trials},
                                     {"max_dim", c.boundary_max_dim},
                                     {"from", v6.ranges.back().from},
                                     {"before", before}});
  }
  // Why ‖J‖ without the scale is larger at small d_k: ‖J‖_F is small both for spread weights (uniform over n keys:
  // √(n − 1)/n) and for one-hot ones (0), and largest when a few keys share the weight (0.5 for two halves).
  const double uniform_j = std::sqrt(static_cast<double>(c.n_keys - 1)) / static_cast<double>(c.n_keys);
  const std::string small_dk = B.front().j_median > R.front().j_median
                                   ? words("c6.small_dk", {{"d_first", c.dims.front()},
                                                           {"j_base", B.front().j_median},
                                                           {"j_remedy", R.front().j_median},
                                                           {"n_keys", c.n_keys},
                                                           {"max_remedy", R.front().max_prob},
                                                           {"uniform", uniform_j},
                                                           {"max_base", B.front().max_prob}})
                                   : std::string();
  // At the head sizes models use: the fall has begun but the gradient is still larger than with the scale.
  std::string model;
  double ratio_lo = INFINITY, ratio_hi = 0;
  for (size_t i = 0; i < c.dims.size(); ++i)
    if (c.dims[i] >= c.model_dims[0] && c.dims[i] <= c.model_dims[1]) {
      const double r = B[i].dq_row / R[i].dq_row;
      ratio_lo = std::min(ratio_lo, r), ratio_hi = std::max(ratio_hi, r);
    }
  if (std::isfinite(ratio_lo))
    model = words("c6.model",
                  {{"lo", c.model_dims[0]}, {"hi", c.model_dims[1]}, {"ratio_lo", ratio_lo}, {"ratio_hi", ratio_hi}});
  words.fill(v6, "c6.row",
             {{"base", base_name},
              {"remedy", remedy_name},
              {"j_fall", j_fall},
              {"dq_fall", dq_fall},
              {"dk_fall", dk_fall},
              {"d_first", c.dims.front()},
              {"d_last", c.dims.back()},
              {"remedy_spread", remedy_spread},
              {"total_change", B.back().dq / B.front().dq},
              {"table", issue.text},
              {"worst", issue.worst},
              {"vanish", c.vanish_factor},
              {"same_order", c.same_order_factor},
              {"table_rows", c.table_rows},
              {"table_keys", c.table_keys},
              {"table_z", c.table_z},
              {"table_rounding", c.table_rounding},
              // The plain text says the factors as a reader counts them (util::pretty).
              {"j_factor", util::pretty(j_fall)},
              {"dq_factor", util::pretty(dq_fall)},
              {"dk_factor", util::pretty(dk_fall)},
              {"spread_factor", util::pretty(remedy_spread)},
              {"model", model},
              {"boundary", boundary},
              {"small_dk", small_dk}});
  return v6;
}

}  // namespace

std::vector<Verdict> verdicts_c6(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                                 const IssueTable& issue, const Words& words) {
  return {verdict_total(c, policies, sweep, issue, words), verdict_typical_row(c, policies, sweep, issue, words)};
}

}  // namespace attnlab::lab
