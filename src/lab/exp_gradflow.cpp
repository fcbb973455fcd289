// Experiment `gradflow` (C6, C7): how much gradient reaches Q and K through the
// softmax as d_k grows, under each scale policy.
//
// Random Q, K, V ~ N(0, 1) of [1, 1, n_keys, d_k] and an upstream gradient dO ~ N(0, 1)
// go through the double-precision reference (attnlab/reference.hpp) forward and backward.
// Per policy and d_k we record ‖dQ‖_F, ‖dK‖_F, ‖dS‖_F (dS = P ⊙ (dP − D), the
// gradient at the scores), the mean and median over rows of ‖J‖_F (J = diag(p) − p pᵀ),
// and the fraction of saturated rows (max p > 0.99).
// A second measurement reproduces the issue's table: median ‖J‖_F of rows with
// `table_keys` keys, unscaled and with 1/√d, with a sampling error from row groups.
#include <cmath>
#include <fmt/format.h>

#include "attnlab/reference.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/softmax.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/experiments.hpp"

namespace attnlab::lab {
namespace {

struct GradflowConfig {
  std::vector<int64_t> dims{16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> policies{"none", "inv_sqrt_d", "inv_d", "entropy_invariant"};
  int64_t n_keys = 128;
  int64_t trials = 2;
  std::string upstream = "unit_dp";   // dO ~ N(0, 1/d_v) so that dP = dO·v ~ N(0, 1) at every d; or "unit": dO ~ N(0, 1)
  std::string baseline = "none";       // the policy C6/C7 compare against the remedy
  std::string remedy = "inv_sqrt_d";
  double same_order_factor = 4.0;      // "stays of the same order": max/min of ‖dQ‖, ‖dK‖ over d_k within this factor
  double vanish_factor = 10.0;         // "falls towards 0": without the scale the typical row falls by more than an order of magnitude
  // The issue's table of median ‖J‖_F for 64 keys.
  int64_t table_keys = 64;
  std::vector<int64_t> table_dims{16, 64, 256, 1024};
  std::vector<double> table_unscaled{0.335, 0.22, 0.028, 1.8e-4};
  double table_scaled = 0.18;
  int64_t table_rows = 8192;
  int64_t table_groups = 16;
  double table_z = 4.0;                // agreement: |log(measured/expected)| ≤ table_z·SE + table_rounding
  double table_rounding = 0.05;        // the issue's numbers carry 2–3 significant digits ("≈ 0.18")
  void bind(Params& p) {
    p.add("dims", dims, "head dims d_k");
    p.add("policies", policies, "scale policies (ScalePolicy::parse names: none, inv_sqrt_d, inv_d, entropy_invariant, ssmax, or a number)");
    p.add("n_keys", n_keys, "queries and keys per problem (seq)");
    p.add("trials", trials, "independent problems per (policy, d_k)");
    p.add("upstream", upstream, "upstream gradient dO: unit_dp (N(0, 1/d_v), so dO·v ~ N(0,1) for every d) or unit (N(0, 1))");
    p.add("baseline", baseline, "policy judged as 'without the scale'");
    p.add("remedy", remedy, "policy judged as 'with the scale' (set inv_d to apply 1/√d twice: C6 must then fail)");
    p.add("same_order_factor", same_order_factor, "with the remedy, max/min of ‖dQ‖ and ‖dK‖ over d_k must stay below this");
    p.add("vanish_factor", vanish_factor, "without the scale, ‖J‖ and ‖dQ‖ must fall by more than this from the smallest to the largest d_k");
    p.add("table_keys", table_keys, "keys per row for the reproduced ‖J‖_F table");
    p.add("table_dims", table_dims, "d_k of the reproduced table");
    p.add("table_unscaled", table_unscaled, "expected median ‖J‖_F without scale (the issue's table)");
    p.add("table_scaled", table_scaled, "expected median ‖J‖_F with 1/√d (the issue's table)");
    p.add("table_rows", table_rows, "query rows sampled per table entry");
    p.add("table_groups", table_groups, "row groups whose medians give the sampling error");
    p.add("table_z", table_z, "agreement in standard errors of log(median)");
    p.add("table_rounding", table_rounding, "extra allowance in log for the rounding of the issue's numbers");
  }
};

double fro(const Tensor<double>& t) {
  double s = 0;
  for (double x : t.storage()) s += x * x;
  return std::sqrt(s);
}

struct Measure {
  double dq = 0, dk = 0, ds = 0, j_mean = 0, j_median = 0, saturated = 0, max_prob = 0;
  double dq_row = 0, dk_row = 0;  // medians over rows of ‖dQ_i‖, ‖dK_j‖: the typical query and key
};

// Median over rows i of ‖t[0, 0, i, :]‖.
double median_row_norm(const Tensor<double>& t) {
  std::vector<double> norms;
  for (int64_t i = 0; i < t.size(kSeq); ++i) {
    double s = 0;
    for (int64_t c = 0; c < t.size(kDim); ++c) s += t(0, 0, i, c) * t(0, 0, i, c);
    norms.push_back(std::sqrt(s));
  }
  return util::median(norms);
}

Measure measure(const ScalePolicy& policy, int64_t n, int64_t d, double upstream_sigma, std::mt19937_64& g) {
  std::normal_distribution<double> normal(0, 1);
  Tensor<double> q({1, 1, n, d}), k({1, 1, n, d}), v({1, 1, n, d}), dout({1, 1, n, d});
  for (auto* t : {&q, &k, &v, &dout})
    for (auto& x : t->storage()) x = normal(g);
  for (auto& x : dout.storage()) x *= upstream_sigma;
  AttentionOptions<double> options;
  options.scale = policy;
  const auto f = reference::attention_forward(q, k, v, options);
  const auto grads = reference::attention_backward(q, k, v, f, dout, options);
  Measure m;
  m.dq = fro(grads.dq);
  m.dk = fro(grads.dk);
  m.dq_row = median_row_norm(grads.dq);
  m.dk_row = median_row_norm(grads.dk);
  // Row by row: P from the scores and L, dS = P ⊙ (dP − D), ‖J‖_F.
  const double scale = policy(d, n);
  std::vector<double> p(static_cast<size_t>(n)), jf;
  double ds2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    double D = 0;
    for (int64_t c = 0; c < d; ++c) D += dout(0, 0, i, c) * f.out(0, 0, i, c);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, dp = 0;
      for (int64_t c = 0; c < d; ++c) s += q(0, 0, i, c) * k(0, 0, j, c), dp += dout(0, 0, i, c) * v(0, 0, j, c);
      p[static_cast<size_t>(j)] = std::exp(s * scale - f.lse(0, 0, i, 0));
      const double dsij = p[static_cast<size_t>(j)] * (dp - D);
      ds2 += dsij * dsij;
    }
    const double mp = *std::max_element(p.begin(), p.end());
    m.max_prob += mp / static_cast<double>(n);
    if (mp > 0.99) m.saturated += 1.0 / static_cast<double>(n);
    jf.push_back(std::sqrt(jacobian_frobenius_sq<double>(p)));
  }
  m.ds = std::sqrt(ds2);
  m.j_mean = util::mean(jf);
  m.j_median = util::median(jf);
  return m;
}

// Median ‖J‖_F over `rows` query rows against `keys` keys (a fresh K per group), with
// the standard error of log(median) from the spread of the group medians.
struct TableEntry {
  double median = 0, log_se = 0;
};
TableEntry jacobian_median(const ScalePolicy& policy, int64_t keys, int64_t d, int64_t rows, int64_t groups,
                           uint64_t seed, const std::string& stream, int threads) {
  const int64_t per_group = std::max<int64_t>(1, rows / groups);
  std::vector<std::vector<double>> values(static_cast<size_t>(groups));
  util::parallel_for(groups, threads, [&](int64_t gi) {
    auto g = util::rng(seed, fmt::format("{}/{}", stream, gi));
    std::normal_distribution<double> normal(0, 1);
    std::vector<double> K(static_cast<size_t>(keys * d)), q(static_cast<size_t>(d)), x(static_cast<size_t>(keys)),
        p(x.size());
    for (auto& e : K) e = normal(g);
    const double scale = policy(d, keys);
    for (int64_t r = 0; r < per_group; ++r) {
      for (auto& e : q) e = normal(g);
      for (int64_t j = 0; j < keys; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += q[static_cast<size_t>(c)] * K[static_cast<size_t>(j * d + c)];
        x[static_cast<size_t>(j)] = s * scale;
      }
      softmax<double>(x, p);
      values[static_cast<size_t>(gi)].push_back(std::sqrt(jacobian_frobenius_sq<double>(p)));
    }
  });
  std::vector<double> all, logs;
  for (const auto& v : values) {
    all.insert(all.end(), v.begin(), v.end());
    logs.push_back(std::log(util::median(v)));
  }
  return {util::median(all), std::sqrt(util::variance(logs) / static_cast<double>(groups))};
}

// The policies to compare; C6 and C7 set `baseline` (no scale) against `remedy` (1/√d).
struct Policies {
  std::vector<ScalePolicy> list;
  size_t base = 0, remedy = 0;
};

Policies validate(const GradflowConfig& c) {
  util::require_positive("dims", c.dims);
  util::require_positive("table_dims", c.table_dims);
  if (c.n_keys < 2) throw Error("n_keys: need at least 2");
  util::require_positive("trials", c.trials);
  util::require_positive("table_rows", c.table_rows);
  if (c.table_groups < 2) throw Error("table_groups: need at least 2");
  if (c.table_unscaled.size() != c.table_dims.size())
    throw Error(fmt::format("table_unscaled: {} values for {} table_dims", c.table_unscaled.size(), c.table_dims.size()));
  if (c.dims.size() < 2) throw Error("dims: need at least 2 to see a trend");
  if (c.upstream != "unit_dp" && c.upstream != "unit") throw Error("upstream: '" + c.upstream + "' is not unit_dp or unit");
  Policies p;
  p.list = util::parse_policies("policies", c.policies);
  const auto find_policy = [&](const std::string& key, const std::string& name) {
    for (size_t i = 0; i < c.policies.size(); ++i)
      if (c.policies[i] == name) return i;
    throw Error(key + ": '" + name + "' is not one of the policies");
  };
  p.base = find_policy("baseline", c.baseline);
  p.remedy = find_policy("remedy", c.remedy);
  return p;
}

// ---- measure ------------------------------------------------------------------

struct PolicySweep {
  Table table{"gradflow", {"policy", "d_k", "scale", "norm_dQ", "norm_dK", "norm_dS", "mean_J_fro", "median_J_fro",
                           "saturated_fraction", "mean_max_prob", "median_row_dQ", "median_row_dK"}};
  std::vector<std::vector<Measure>> by_policy;  // [policy][d_k], averaged over trials
};

// Every policy at every d_k, on the same random problems (a paired comparison).
PolicySweep measure_policies(const GradflowConfig& c, const Policies& policies, RunContext& ctx) {
  PolicySweep sweep;
  sweep.by_policy.resize(policies.list.size());
  for (size_t pi = 0; pi < policies.list.size(); ++pi) {
    const ScalePolicy& policy = policies.list[pi];
    ctx.report(fmt::format("policy {} over {} head dims ({} keys)", policy.name(), c.dims.size(), c.n_keys));
    for (int64_t d : c.dims) {
      std::vector<Measure> trials(static_cast<size_t>(c.trials));
      util::parallel_for(c.trials, ctx.threads, [&](int64_t tr) {
        // The same Q, K, V for every policy (stream without the policy name): a paired comparison.
        auto g = util::rng(ctx.seed, fmt::format("gradflow/{}/{}", d, tr));
        const double upstream_sigma = c.upstream == "unit" ? 1.0 : 1.0 / std::sqrt(static_cast<double>(d));
        trials[static_cast<size_t>(tr)] = measure(policy, c.n_keys, d, upstream_sigma, g);
      });
      Measure m;
      const double T = static_cast<double>(c.trials);
      for (const auto& x : trials) {
        m.dq += x.dq / T, m.dk += x.dk / T, m.ds += x.ds / T, m.j_mean += x.j_mean / T;
        m.j_median += x.j_median / T, m.saturated += x.saturated / T, m.max_prob += x.max_prob / T;
        m.dq_row += x.dq_row / T, m.dk_row += x.dk_row / T;
      }
      sweep.by_policy[pi].push_back(m);
      sweep.table.add_row({static_cast<double>(pi), static_cast<double>(d), policy(d, c.n_keys), m.dq, m.dk, m.ds,
                           m.j_mean, m.j_median, m.saturated, m.max_prob, m.dq_row, m.dk_row});
    }
  }
  return sweep;
}

// The issue's table of median ‖J‖_F, measured beside the values it quotes.
struct IssueTable {
  Table table{"jacobian_median_table", {"d_k", "unscaled_median", "unscaled_log_se", "unscaled_expected",
                                        "scaled_median", "scaled_log_se", "scaled_expected"}};
  double worst = 0;  // largest |log ratio| / allowance
  std::string text;
};

IssueTable measure_issue_table(const GradflowConfig& c, RunContext& ctx) {
  ctx.report(fmt::format("median ‖J‖_F table: {} keys, {} rows per entry", c.table_keys, c.table_rows));
  IssueTable t;
  for (size_t i = 0; i < c.table_dims.size(); ++i) {
    const int64_t d = c.table_dims[i];
    const auto u = jacobian_median(ScalePolicy::none(), c.table_keys, d, c.table_rows, c.table_groups, ctx.seed,
                                   fmt::format("gradflow/table/none/{}", d), ctx.threads);
    const auto s = jacobian_median(ScalePolicy::inv_sqrt_d(), c.table_keys, d, c.table_rows, c.table_groups, ctx.seed,
                                   fmt::format("gradflow/table/inv_sqrt_d/{}", d), ctx.threads);
    t.table.add_row({static_cast<double>(d), u.median, u.log_se, c.table_unscaled[i], s.median, s.log_se, c.table_scaled});
    t.worst = std::max(t.worst, std::abs(std::log(u.median / c.table_unscaled[i])) / (c.table_z * u.log_se + c.table_rounding));
    t.worst = std::max(t.worst, std::abs(std::log(s.median / c.table_scaled)) / (c.table_z * s.log_se + c.table_rounding));
    t.text += fmt::format("{}d_k {}: {:.3g} (issue {:g}) / {:.3g} (issue ≈{:g})", i ? "; " : "", d, u.median,
                          c.table_unscaled[i], s.median, c.table_scaled);
  }
  return t;
}

// ---- figures ------------------------------------------------------------------

Figure figure_gradflow(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                       const IssueTable& issue) {
  const auto xs = util::to_double(c.dims);
  auto column = [&](size_t pi, double Measure::*field) {
    std::vector<double> v;
    for (const auto& m : sweep.by_policy[pi]) v.push_back(m.*field);
    return v;
  };
  Figure f;
  f.name = "gradflow";
  f.title = fmt::format("Gradient reaching Q and K through softmax(QKᵀ·scale): {} keys, Q, K, V ~ N(0,1), dO ~ {}", c.n_keys, c.upstream == "unit" ? "N(0,1)" : "N(0,1/d)");
  f.caption = "Without a scale (none) the softmax saturates as d_k grows: the fraction of one-hot rows rises, the "
              "typical row's ‖J‖ collapses and the gradient reaching a typical query or key vanishes. With 1/√d_k they "
              "stay of the same order for every d_k. The total ‖dQ‖_F (top right) does not vanish without the scale: "
              "it is carried by the few rows whose two largest logits happen to be close. Lower right: the issue's "
              "table of median ‖J‖_F (dashed) beside the measured medians (points).";
  f.layout_rows = 2;
  f.layout_cols = 3;
  f.width = 1600;
  f.height = 980;
  Panel pq = util::panel("typical query: median over rows of ‖dQ_i‖", "d_k", "median ‖dQ_i‖", true, true);
  Panel pk = util::panel("typical key: median over rows of ‖dK_j‖", "d_k", "median ‖dK_j‖", true, true);
  Panel ps = util::panel("all queries: ‖dQ‖_F", "d_k", "‖dQ‖_F", true, true);
  Panel pj = util::panel("median over rows of ‖J‖_F", "d_k", "median ‖J‖_F", true, true);
  Panel pz = util::panel("saturated rows (max p > 0.99)", "d_k", "fraction of rows", true, false);
  for (size_t pi = 0; pi < policies.list.size(); ++pi) {
    const std::string col = util::colour(pi), name = policies.list[pi].name();
    pq.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dq_row), col));
    pk.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dk_row), col));
    ps.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dq), col));
    pj.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::j_median), col));
    pz.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::saturated), col));
  }
  pz.y_min = -0.02;
  pz.y_max = 1.05;
  pz.legend_position = "top left";
  for (auto* p : {&pq, &pk, &ps, &pj}) p->legend_position = "bottom left";
  for (auto* p : {&pq, &pk, &ps, &pj, &pz}) p->x_tics = xs;
  Panel pt = util::panel(fmt::format("median ‖J‖_F, {} keys: issue's table vs measured", c.table_keys), "d_k",
                         "median ‖J‖_F", true, true);
  const auto tx = util::to_double(c.table_dims);
  pt.series.push_back(util::series("unscaled: issue", Style::theory, tx, c.table_unscaled, util::colour(0)));
  pt.series.push_back(util::series("unscaled: measured", Style::points, tx, issue.table.column("unscaled_median"), util::colour(0)));
  pt.series.push_back(util::series("1/√d: issue", Style::theory, tx, issue.table.column("scaled_expected"), util::colour(1)));
  pt.series.push_back(util::series("1/√d: measured", Style::points, tx, issue.table.column("scaled_median"), util::colour(1)));
  pt.x_tics = tx;
  pt.legend_position = "bottom left";
  f.panels = {pq, pk, ps, pj, pz, pt};
  return f;
}

// ---- verdicts -----------------------------------------------------------------

Verdict verdict_c6(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                   const IssueTable& issue) {
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  const std::string base_name = policies.list[policies.base].name(), remedy_name = policies.list[policies.remedy].name();
  // The typical row (median over rows): the seeds' argument is about each softmax row saturating.
  const double j_fall = B.front().j_median / B.back().j_median;
  const double dq_fall = B.front().dq_row / B.back().dq_row, dk_fall = B.front().dk_row / B.back().dk_row;
  auto spread = [](const std::vector<Measure>& v, double Measure::*field) {
    double lo = INFINITY, hi = 0;
    for (const auto& m : v) lo = std::min(lo, m.*field), hi = std::max(hi, m.*field);
    return hi / lo;
  };
  const double remedy_spread = std::max(spread(R, &Measure::dq_row), spread(R, &Measure::dk_row));
  const bool vanishes = j_fall > c.vanish_factor && dq_fall > c.vanish_factor && dk_fall > c.vanish_factor;
  const bool same_order = remedy_spread < c.same_order_factor;
  const bool table_ok = issue.worst <= 1.0;
  Verdict v6 = make_verdict("C6");
  v6.theory_text = fmt::format("without scale ‖J‖, ‖dQ‖, ‖dK‖ → 0 as d_k grows; with {} of the same order; the issue's "
                               "median ‖J‖_F table", remedy_name);
  v6.theory = c.same_order_factor;
  v6.measured = remedy_spread;
  v6.measured_text = fmt::format("typical row, {}: ‖J‖_F falls {:.3g}×, ‖dQ_i‖ {:.3g}×, ‖dK_j‖ {:.3g}× from d_k {} to "
                                 "{}; {}: max/min over d_k = {:.3g}; total ‖dQ‖_F without scale changes {:.3g}× "
                                 "(few unsaturated rows); table: {} (worst deviation {:.2f} of the allowance)",
                                 base_name, j_fall, dq_fall, dk_fall, c.dims.front(), c.dims.back(), remedy_name,
                                 remedy_spread, B.back().dq / B.front().dq, issue.text, issue.worst);
  v6.tolerance = c.same_order_factor;
  v6.method = fmt::format("Per row (median over rows: the typical query and key). Confirmed when, without the scale, "
                          "median ‖J‖_F, ‖dQ_i‖ and ‖dK_j‖ fall by more than {:g}× from "
                          "d_k = {} to {}; with {} their largest/smallest over d_k stays below {:g}; and the "
                          "median ‖J‖_F over {} rows of {} keys matches the issue's table within {:g} standard errors "
                          "of log(median) (+{:g} for rounding).",
                          c.vanish_factor, c.dims.front(), c.dims.back(), remedy_name, c.same_order_factor,
                          c.table_rows, c.table_keys, c.table_z, c.table_rounding);
  v6.outcome = util::outcome_of(vanishes && same_order && table_ok);
  v6.figure = "gradflow";
  return v6;
}

// C7: explosion or vanishing? The ratio of gradient norms without/with the scale.
Verdict verdict_c7(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep) {
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  std::vector<double> ratio;
  std::string ratio_text;
  for (size_t i = 0; i < c.dims.size(); ++i) {
    const double r = std::sqrt((B[i].dq_row * B[i].dq_row + B[i].dk_row * B[i].dk_row) /
                               (R[i].dq_row * R[i].dq_row + R[i].dk_row * R[i].dk_row));
    ratio.push_back(r);
    ratio_text += fmt::format("{}{}: {:.2g}", i ? ", " : "", c.dims[i], r);
  }
  const double slope = util::loglog_slope(util::to_double(c.dims), ratio);
  Verdict v7 = make_verdict("C7");
  v7.theory = 0;
  v7.theory_text = "vanishing: ‖grad‖ without scale / ‖grad‖ with it → 0 as d_k grows (explosion would make it ≫ 1)";
  v7.measured = ratio.back();
  std::string total_text;
  for (size_t i = 0; i < c.dims.size(); ++i)
    total_text += fmt::format("{}{}: {:.2g}", i ? ", " : "", c.dims[i], B[i].dq / R[i].dq);
  v7.measured_text = fmt::format("typical-row ratio ‖(dQ_i, dK_j)‖ {} / {} by d_k: {}; trend d_k^{:.2f}. Total ‖dQ‖_F "
                                 "ratio (carried by the few unsaturated rows): {}",
                                 policies.list[policies.base].name(), policies.list[policies.remedy].name(), ratio_text,
                                 slope, total_text);
  v7.tolerance = 1.0;
  v7.method = "On the typical row (median over rows of ‖dQ_i‖ and ‖dK_j‖): vanishing (confirmed) when the ratio "
              "of gradient norms without/with the scale is below 1 at the largest "
              "d_k and falls with d_k (negative fitted power); explosion (refuted) when it is above 1 and rising; "
              "inconclusive otherwise.";
  if (ratio.back() < 1 && slope < 0)
    v7.outcome = Outcome::confirmed;
  else if (ratio.back() > 1 && slope > 0)
    v7.outcome = Outcome::refuted;
  else
    v7.outcome = Outcome::inconclusive;
  v7.figure = "gradflow";
  return v7;
}

Result run_gradflow(const GradflowConfig& c, RunContext& ctx) {
  const Policies policies = validate(c);
  const PolicySweep sweep = measure_policies(c, policies, ctx);
  const IssueTable issue = measure_issue_table(c, ctx);

  Result result;
  result.tables = {sweep.table, issue.table};
  result.notes.push_back("gradflow.csv: policy " + util::policy_legend(policies.list));
  result.notes.push_back("median ‖J‖_F, " + std::to_string(c.table_keys) + " keys, unscaled / 1/√d: " + issue.text);
  result.figures = {figure_gradflow(c, policies, sweep, issue)};
  result.verdicts = {verdict_c6(c, policies, sweep, issue), verdict_c7(c, policies, sweep)};
  return result;
}

}  // namespace

Experiment gradflow_experiment() {
  return make_experiment<GradflowConfig>("gradflow", "Gradients reaching Q and K against d_k under each scale policy; the median ‖J‖_F table",
    {"C6", "C7"}, run_gradflow,
    {{"dims", "16,64,256,1024,4096"}, {"n_keys", "64"}, {"trials", "1"}, {"table_rows", "2048"}, {"table_groups", "8"}});
}

}  // namespace attnlab::lab
