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
// The configuration and the measured types are in lab/gradflow.hpp; C6's verdict is in
// c6_verdict.cpp and C7's in c7_verdicts.cpp, so that this file holds the measurements and figures.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "attnlab/reference.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_results.hpp"
#include "lab/c7_verdicts.hpp"
#include "lab/experiments.hpp"
#include "lab/gradflow.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

double fro(const Tensor<double>& t) {
  double s = 0;
  for (double x : t.storage()) s += x * x;
  return std::sqrt(s);
}

// Median over rows i of ‖t[0, 0, i, :]‖.
double median_row_norm(const Tensor<double>& t) {
  std::vector<double> norms;
  for (int64_t i = 0; i < t.size(Axis::seq); ++i) {
    double s = 0;
    for (int64_t c = 0; c < t.size(Axis::dim); ++c) s += t(0, 0, i, c) * t(0, 0, i, c);
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
  const auto f = detail::allocating_forward(q, k, v, options);
  const auto grads = detail::allocating_backward(q, k, v, f, dout, options);
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

Policies policies_of(const GradflowConfig& c) {
  Policies p;
  p.list = util::parse_policies("policies", c.policies);
  const auto index = [&](const std::string& name) {
    return static_cast<size_t>(std::find(c.policies.begin(), c.policies.end(), name) - c.policies.begin());
  };
  p.base = index(c.baseline);
  p.remedy = index(c.remedy);
  return p;
}

// ---- measure ------------------------------------------------------------------

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
      if (pi == policies.base && d > c.boundary_max_dim) {
        sweep.base_dq_trials.emplace_back();
        for (const auto& x : trials) sweep.base_dq_trials.back().push_back(x.dq_row);
      }
      sweep.table.add_row({static_cast<double>(pi), static_cast<double>(d), policy(d, c.n_keys), m.dq, m.dk, m.ds,
                           m.j_mean, m.j_median, m.saturated, m.max_prob, m.dq_row, m.dk_row});
    }
  }
  return sweep;
}

// C6's boundary: the baseline's typical query gradient on boundary_trials problems at each d_k up to
// boundary_max_dim (the first `trials` of them are the sweep's own problems, same streams).
void measure_boundary(const GradflowConfig& c, const Policies& policies, PolicySweep& sweep, RunContext& ctx) {
  std::vector<std::vector<double>> small;
  for (int64_t d : c.dims) {
    if (d > c.boundary_max_dim) break;
    std::vector<double> dq(static_cast<size_t>(c.boundary_trials));
    util::parallel_for(c.boundary_trials, ctx.threads, [&](int64_t tr) {
      auto g = util::rng(ctx.seed, fmt::format("gradflow/{}/{}", d, tr));
      const double upstream_sigma = c.upstream == "unit" ? 1.0 : 1.0 / std::sqrt(static_cast<double>(d));
      dq[static_cast<size_t>(tr)] = measure(policies.list[policies.base], c.n_keys, d, upstream_sigma, g).dq_row;
    });
    small.push_back(dq);
  }
  sweep.base_dq_trials.insert(sweep.base_dq_trials.begin(), small.begin(), small.end());
}

IssueTable measure_issue_table(const GradflowConfig& c, RunContext& ctx, const Words& words) {
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
    t.text += (i ? "; " : "") + words("table_entry", {{"d_k", d},
                                                      {"unscaled", u.median},
                                                      {"unscaled_expected", c.table_unscaled[i]},
                                                      {"scaled", s.median},
                                                      {"scaled_expected", c.table_scaled}});
  }
  return t;
}

// The ratios without/with the scale that C7 judges (see verdicts_c7), each [d_k]: of the typical row's
// softmax Jacobian ‖J‖_F, of the gradient reaching a typical query ‖dQ_i‖ and a typical key ‖dK_j‖.
std::array<std::vector<double>, 3> ratio_curves(const Policies& policies, const PolicySweep& sweep) {
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  std::array<std::vector<double>, 3> out;
  for (size_t i = 0; i < B.size(); ++i) {
    out[0].push_back(B[i].j_median / R[i].j_median);
    out[1].push_back(B[i].dq_row / R[i].dq_row);
    out[2].push_back(B[i].dk_row / R[i].dk_row);
  }
  return out;
}

// ---- figures ------------------------------------------------------------------

// The head sizes models use, shaded behind a panel's curves.
void shade_model_sizes(const GradflowConfig& c, Panel& p, const Words& words) {
  const double a = static_cast<double>(c.model_dims[0]), b = static_cast<double>(c.model_dims[1]);
  util::shade_x_range(p, a, b, words("model_sizes", {{"lo", a}, {"hi", b}}));
}

// Every other power of two: a tic per label that fits a 300-pixel panel.
std::vector<double> sparse_tics(const std::vector<double>& xs) {
  std::vector<double> t;
  for (size_t i = 0; i < xs.size(); i += xs.size() > 6 ? 2 : 1) t.push_back(xs[i]);
  return t;
}

// C7's own figure: without/with the scale, the gradient reaching a typical query and key,
// and the total over all queries, against d_k, with 1 (no difference) marked.
Figure figure_ratio(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep, const Words& words) {
  const auto xs = util::to_double(c.dims);
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  std::vector<double> total;
  for (size_t i = 0; i < xs.size(); ++i) total.push_back(B[i].dq / R[i].dq);
  const std::string base = util::policy_label(policies.list[policies.base]),
                    remedy = util::policy_label(policies.list[policies.remedy]);
  Figure f;
  f.name = "gradflow_ratio";
  const WordArgs names{{"base", base}, {"remedy", remedy}, {"lo", c.model_dims[0]}, {"hi", c.model_dims[1]}};
  words.fill(f, "ratio", names);
  Panel pr = util::panel(words("ratio.panel_row"), "d_k", words("ratio.panel_row_axis", names), true, true);
  Panel pt = util::panel(words("ratio.panel_total"), "d_k", "ratio", true, true);
  const auto curves = ratio_curves(policies, sweep);
  const char* labels[3] = {"Jacobian ‖J‖_F", "query ‖dQ_i‖", "key ‖dK_j‖"};
  for (size_t k = 0; k < 3; ++k)
    pr.series.push_back(util::series(labels[k], Style::linespoints, xs, curves[k], util::colour(k)));
  pt.series.push_back(util::series("measured", Style::linespoints, xs, total, util::policy_colour(ScalePolicy::none())));
  for (auto* p : {&pr, &pt}) {
    p->series.push_back(util::series("", Style::theory, {xs.front(), xs.back()}, {1, 1}, "#000000"));
    p->x_tics = sparse_tics(xs);
    shade_model_sizes(c, *p, words);
  }
  pr.legend_position = "below";
  pt.legend_position = "below";
  f.panels = {pr, pt};
  util::stack_panels(f);
  return f;
}

Figure figure_gradflow(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                       const IssueTable& issue, const Words& words) {
  const auto xs = util::to_double(c.dims);
  auto column = [&](size_t pi, double Measure::*field) {
    std::vector<double> v;
    for (const auto& m : sweep.by_policy[pi]) v.push_back(m.*field);
    return v;
  };
  Figure f;
  f.name = "gradflow";
  words.fill(f, "gradflow", {{"n_keys", c.n_keys}});
  Panel pq = util::panel(words("gradflow.panel_query"), "d_k", "median over rows", true, true);
  Panel pk = util::panel(words("gradflow.panel_key"), "d_k", "median over rows", true, true);
  Panel ps = util::panel(words("gradflow.panel_total"), "d_k", "‖dQ‖_F", true, true);
  Panel pj = util::panel(words("gradflow.panel_jacobian"), "d_k", "median over rows", true, true);
  Panel pz = util::panel(words("gradflow.panel_saturated"), "d_k", "fraction of rows", true, false);
  for (size_t pi = 0; pi < policies.list.size(); ++pi) {
    const std::string col = util::policy_colour(policies.list[pi]), name = util::policy_label(policies.list[pi]);
    pq.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dq_row), col));
    pk.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dk_row), col));
    ps.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::dq), col));
    pj.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::j_median), col));
    pz.series.push_back(util::series(name, Style::linespoints, xs, column(pi, &Measure::saturated), col));
  }
  pz.y_min = -0.02;
  pz.y_max = 1.05;
  for (auto* p : {&pq, &pk, &ps, &pj, &pz}) p->legend_position = "below";
  for (auto* p : {&pq, &pk, &ps, &pj, &pz}) {
    p->x_tics = sparse_tics(xs);
    shade_model_sizes(c, *p, words);
  }
  Panel pt =
      util::panel(words("gradflow.panel_table", {{"keys", c.table_keys}}), "d_k", "median over rows", true, true);
  const auto tx = util::to_double(c.table_dims);
  const std::string none_colour = util::policy_colour(ScalePolicy::none()),
                    scaled_colour = util::policy_colour(ScalePolicy::inv_sqrt_d());
  pt.series.push_back(util::series("no scale: expected", Style::theory, tx, c.table_unscaled, none_colour));
  pt.series.push_back(util::series("no scale: measured", Style::points, tx, issue.table.column("unscaled_median"), none_colour));
  pt.series.push_back(
      util::series("1/√d_k: expected", Style::theory, tx, issue.table.column("scaled_expected"), scaled_colour));
  pt.series.push_back(util::series("1/√d_k: measured", Style::points, tx, issue.table.column("scaled_median"), scaled_colour));
  pt.x_tics = tx;
  pt.legend_position = "below";
  f.panels = {pq, pk, ps, pj, pz, pt};
  util::stack_panels(f);
  return f;
}

// ---- verdicts -----------------------------------------------------------------

// C7's verdicts (lab/c7_verdicts.hpp), from the ratios of the typical row.
std::vector<Verdict> verdicts_c7(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                                 const Words& words) {
  const auto curves = ratio_curves(policies, sweep);
  TypicalRowRatios r{c.dims,
                     curves[0],
                     curves[1],
                     curves[2],
                     {},
                     c.model_dims[0],
                     c.model_dims[1],
                     util::policy_label(policies.list[policies.base]),
                     util::policy_label(policies.list[policies.remedy]),
                     "gradflow_ratio"};
  const auto& B = sweep.by_policy[policies.base];
  const auto& R = sweep.by_policy[policies.remedy];
  for (size_t i = 0; i < B.size(); ++i) r.total_query.push_back(B[i].dq / R[i].dq);
  return c7_verdicts(r, words);
}

Result run_gradflow(const GradflowConfig& c, RunContext& ctx) {
  const Policies policies = policies_of(c);
  PolicySweep sweep = measure_policies(c, policies, ctx);
  measure_boundary(c, policies, sweep, ctx);
  const Words words("gradflow");
  const IssueTable issue = measure_issue_table(c, ctx, words);

  Result result;
  result.tables = {sweep.table, issue.table};
  result.notes.push_back(words("note_policies", {{"legend", util::policy_legend(policies.list)}}));
  result.notes.push_back(words("note_table", {{"keys", c.table_keys}, {"table", issue.text}}));
  result.figures = {figure_gradflow(c, policies, sweep, issue, words), figure_ratio(c, policies, sweep, words)};
  result.verdicts = verdicts_c6(c, policies, sweep, issue, words);
  for (auto& v : verdicts_c7(c, policies, sweep, words)) result.verdicts.push_back(std::move(v));
  return result;
}

}  // namespace

Experiment gradflow_experiment() {
  return make_experiment<GradflowConfig>("gradflow", "Gradients reaching Q and K against d_k under each scale policy; the median ‖J‖_F table",
    {"C6", "C7"}, run_gradflow,
    {{"dims", "16,64,256,1024,4096"}, {"n_keys", "64"}, {"trials", "1"}, {"table_rows", "2048"}, {"table_groups", "8"}});
}

}  // namespace attnlab::lab
