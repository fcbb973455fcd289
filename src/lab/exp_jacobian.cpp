// Experiment `jacobian` (C4, C5): the softmax Jacobian J = diag(s) − s sᵀ and
// back-propagation through it.
//
// C4: the library's J (attnlab::softmax_jacobian) is compared entry by entry with
// central finite differences of softmax; then its properties are checked on random
// inputs: symmetric, rows summing to 0, positive semi-definite (smallest eigenvalue
// ≥ 0, since vᵀJv = Var_s(v)), zero at a one-hot s and only there (tr J = 1 − ‖s‖²).
// C5: the O(n) VJP s ⊙ (g − ⟨g, s⟩) against Jᵀg with J formed explicitly, and against
// finite differences of ⟨g, softmax(x)⟩.
#include <fmt/format.h>

#include <cmath>

#include "attnlab/softmax.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/symmetric_eigen.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct JacobianConfig {
  std::vector<double> x{1, 1, 2, 4};          // seed 001's vector, for the heatmaps
  std::vector<double> heatmap_scales{0.25, 1, 8};
  int64_t trials = 300;                       // random (x, g) pairs
  int64_t n = 8;                              // their length
  std::vector<double> scales{0.01, 0.1, 1, 3, 10, 30, 100};
  double fd_step = 1e-5;
  double fd_tolerance = 1e-7;                 // |J − J_fd| (absolute; J's entries are ≤ 1/4)
  double exact_tolerance = 1e-12;             // symmetry, row sums, PSD, VJP vs Jᵀg (relative)
  std::string formula = "diag_minus_outer";   // or "diag": the common mistake J = diag(s), for the failing test
  void bind(Params& p) {
    using namespace rules;
    p.add("x", x, "logits whose Jacobian is drawn as heatmaps (seed 001's x)", at_least_items(2));
    p.add("heatmap_scales", heatmap_scales, "scales a of the heatmaps of J(softmax(a·x))");
    p.add("trials", trials, "random (x, g) pairs per scale", positive());
    p.add("n", n, "length of the random vectors", at_least(2));
    p.add("scales", scales, "scales a of the random logits a·x", each(positive()));
    p.add("fd_step", fd_step, "step of the central finite differences", positive());
    p.add("fd_tolerance", fd_tolerance, "largest allowed |J − finite differences|");
    p.add("exact_tolerance", exact_tolerance, "largest allowed rounding error in identities");
    p.add("formula", formula, "Jacobian under test: diag_minus_outer (the library's), or diag (a wrong one)", one_of({"diag_minus_outer", "diag"}));
  }
};

std::vector<double> softmax_of(const std::vector<double>& x) {
  std::vector<double> s(x.size());
  softmax<double>(x, s);
  return s;
}

std::vector<double> jacobian_of(const std::vector<double>& s, const std::string& formula) {
  const size_t n = s.size();
  std::vector<double> J(n * n, 0.0);
  if (formula == "diag")
    for (size_t i = 0; i < n; ++i) J[i * n + i] = s[i];
  else
    softmax_jacobian<double>(s, J);
  return J;
}

std::vector<double> finite_difference_jacobian(const std::vector<double>& x, double h) {
  const size_t n = x.size();
  std::vector<double> J(n * n);
  for (size_t j = 0; j < n; ++j) {
    auto xp = x, xm = x;
    xp[j] += h;
    xm[j] -= h;
    const auto sp = softmax_of(xp), sm = softmax_of(xm);
    for (size_t i = 0; i < n; ++i) J[i * n + j] = (sp[i] - sm[i]) / (2 * h);
  }
  return J;
}

// ---- measure ------------------------------------------------------------------

// J of softmax(a·x) for seed 001's x at each heatmap scale a, beside finite differences.
struct Heatmaps {
  Table table{"jacobian_heatmaps", {"a", "i", "j", "J_ij", "J_fd_ij"}};
  std::vector<std::vector<double>> J;  // per scale: [n, n] row-major
  double common = 0;                   // max |J_ij| over every scale: one colour range for all panels
};

Heatmaps measure_heatmaps(const JacobianConfig& c) {
  Heatmaps h;
  for (double a : c.heatmap_scales) {
    std::vector<double> ax(c.x.size());
    for (size_t i = 0; i < ax.size(); ++i) ax[i] = a * c.x[i];
    const auto J = jacobian_of(softmax_of(ax), c.formula);
    const auto Jfd = finite_difference_jacobian(ax, c.fd_step);
    for (size_t i = 0; i < c.x.size(); ++i)
      for (size_t j = 0; j < c.x.size(); ++j)
        h.table.add_row({a, static_cast<double>(i), static_cast<double>(j), J[i * c.x.size() + j], Jfd[i * c.x.size() + j]});
    for (double v : J) h.common = std::max(h.common, std::abs(v));
    h.J.push_back(J);
  }
  return h;
}

// C4's and C5's checks on random (x, g), worst over every trial, per scale and overall.
struct RandomChecks {
  Table table{"jacobian_checks", {"a", "fd_error", "symmetry_error", "row_sum_error", "min_eigenvalue",
                                  "vjp_vs_explicit", "vjp_vs_fd", "median_grad_norm", "median_fro"}};
  double fd = 0, sym = 0, rows = 0, psd = 0, vjp = 0, vjp_fd = 0;  // worst over scales (psd: −λ_min)
  std::vector<double> grad_norms, fros;                            // per scale: medians of ‖g_x‖ and ‖J‖_F
};

RandomChecks measure_random(const JacobianConfig& c, RunContext& ctx) {
  ctx.report(fmt::format("{} scales × {} random (x, g) of length {}", c.scales.size(), c.trials, c.n));
  const size_t n = static_cast<size_t>(c.n);
  auto g = util::rng(ctx.seed, "jacobian/random");
  std::normal_distribution<double> normal(0, 1);
  RandomChecks r;
  for (double a : c.scales) {
    double fd = 0, sym = 0, rows = 0, min_ev = INFINITY, vjp_err = 0, vjp_fd = 0;
    std::vector<double> norms, frs;
    for (int64_t trial = 0; trial < c.trials; ++trial) {
      std::vector<double> x(n), gs(n);
      for (auto& v : x) v = a * normal(g);
      for (auto& v : gs) v = normal(g);
      const auto s = softmax_of(x);
      const auto J = jacobian_of(s, c.formula);
      const auto Jfd = finite_difference_jacobian(x, c.fd_step);
      double fro = 0;
      for (size_t i = 0; i < n; ++i) {
        double row = 0;
        for (size_t j = 0; j < n; ++j) {
          fd = std::max(fd, std::abs(J[i * n + j] - Jfd[i * n + j]));
          sym = std::max(sym, std::abs(J[i * n + j] - J[j * n + i]));
          row += J[i * n + j];
          fro += J[i * n + j] * J[i * n + j];
        }
        rows = std::max(rows, std::abs(row));
      }
      const auto ev = util::symmetric_eigenvalues(J, n);
      min_ev = std::min(min_ev, ev.front());
      // C5: O(n) VJP vs explicit Jᵀg (relative to ‖g‖·max s, the size of the terms) and vs FD of ⟨g, s(x)⟩.
      std::vector<double> vjp(n), explicit_(n, 0.0);
      softmax_vjp<double>(s, gs, vjp);
      for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < n; ++i) explicit_[j] += J[i * n + j] * gs[i];
      double gnorm = 0, gsize = 0;
      for (double v : gs) gsize = std::max(gsize, std::abs(v));
      for (size_t j = 0; j < n; ++j) {
        vjp_err = std::max(vjp_err, std::abs(vjp[j] - explicit_[j]) / gsize);
        auto xp = x, xm = x;
        xp[j] += c.fd_step;
        xm[j] -= c.fd_step;
        const auto sp = softmax_of(xp), sm = softmax_of(xm);
        double lp = 0, lm = 0;
        for (size_t i = 0; i < n; ++i) lp += gs[i] * sp[i], lm += gs[i] * sm[i];
        vjp_fd = std::max(vjp_fd, std::abs(vjp[j] - (lp - lm) / (2 * c.fd_step)) / gsize);
        gnorm += vjp[j] * vjp[j];
      }
      norms.push_back(std::sqrt(gnorm));
      frs.push_back(std::sqrt(fro));
    }
    r.table.add_row({a, fd, sym, rows, min_ev, vjp_err, vjp_fd, util::median(norms), util::median(frs)});
    r.fd = std::max(r.fd, fd);
    r.sym = std::max(r.sym, sym);
    r.rows = std::max(r.rows, rows);
    r.psd = std::max(r.psd, -min_ev);
    r.vjp = std::max(r.vjp, vjp_err);
    r.vjp_fd = std::max(r.vjp_fd, vjp_fd);
    r.grad_norms.push_back(util::median(norms));
    r.fros.push_back(util::median(frs));
  }
  return r;
}

// J at one-hot s (and only there): zero for far-apart and −inf logits; tr J > 0 at s = (½, ½).
struct OneHot {
  double max_abs = 0;  // max |J_ij| at the one-hot inputs
  double trace_two = 0;
};

OneHot measure_one_hot(const JacobianConfig& c) {
  const size_t n = static_cast<size_t>(c.n);
  std::vector<double> one_hot_x(n, -1e4), neg_inf_x(n, -INFINITY);
  one_hot_x[1] = 0;
  neg_inf_x[0] = 0.5;
  OneHot o;
  for (const auto& x : {one_hot_x, neg_inf_x})
    for (double v : jacobian_of(softmax_of(x), c.formula)) o.max_abs = std::max(o.max_abs, std::abs(v));
  // Converse: J = 0 only at one-hot. tr J = 1 − ‖s‖², which is > 0 unless s is one-hot.
  const auto J_two = jacobian_of(softmax_of(std::vector<double>{0.0, 0.0}), c.formula);
  o.trace_two = J_two[0] + J_two[3];
  return o;
}

// ---- figures ------------------------------------------------------------------

std::string logits_text(const std::vector<double>& x) {
  std::string xs;
  for (size_t i = 0; i < x.size(); ++i) xs += (i ? ", " : "") + fmt::format("{:g}", x[i]);
  return xs;
}

Figure figure_heatmaps(const JacobianConfig& c, const Heatmaps& h, const Words& words) {
  Figure hf;
  hf.name = "jacobian_heatmaps";
  words.fill(hf, "heatmaps", {{"logits", logits_text(c.x)}});
  for (size_t k = 0; k < c.heatmap_scales.size(); ++k) {
    double fro = 0;
    for (double v : h.J[k]) fro += v * v;
    Panel p;
    p.title = words("heatmaps.panel", {{"a", c.heatmap_scales[k]}, {"fro", std::sqrt(fro)}});
    p.x_label = "logit j";
    p.y_label = "weight i";
    Heatmap hm;
    hm.rows = hm.cols = static_cast<int64_t>(c.x.size());
    hm.values = h.J[k];
    hm.colorbar_label = "∂s_i/∂x_j";
    hm.annotate = c.x.size() <= 8;
    hm.color_limit = h.common;
    p.heatmap = hm;
    hf.panels.push_back(p);
  }
  util::stack_panels(hf);
  return hf;
}

Figure figure_vjp(const JacobianConfig& c, const RandomChecks& r, const Words& words) {
  Figure vf;
  vf.name = "jacobian_vjp";
  words.fill(vf, "vjp", {{"trials", c.trials}});
  Panel pe = util::panel(words("vjp.panel_error"), "scale a of the logits a·x", "largest error / max|g|", true, true);
  auto floor_at = [](std::vector<double> v) {  // exact zeros cannot be drawn on a log axis: show them at 1e-18
    for (auto& e : v) e = std::max(e, 1e-18);
    return v;
  };
  pe.series.push_back(util::series("VJP vs explicit Jᵀg", Style::linespoints, c.scales, floor_at(r.table.column("vjp_vs_explicit")), "#0072B2"));
  pe.series.push_back(util::series("VJP vs finite differences", Style::linespoints, c.scales, floor_at(r.table.column("vjp_vs_fd")), "#D55E00"));
  pe.series.push_back(util::series("J vs finite differences", Style::linespoints, c.scales, floor_at(r.table.column("fd_error")), "#009E73"));
  pe.series.push_back(util::series(words("vjp.tolerance_fd", {{"tolerance", c.fd_tolerance}}), Style::theory,
                                   {c.scales.front(), c.scales.back()}, {c.fd_tolerance, c.fd_tolerance}, "#D55E00"));
  pe.series.push_back(util::series(words("vjp.tolerance_exact", {{"tolerance", c.exact_tolerance}}), Style::theory,
                                   {c.scales.front(), c.scales.back()}, {c.exact_tolerance, c.exact_tolerance},
                                   "#0072B2"));
  pe.y_min = 1e-19;
  pe.y_max = 1e-3;
  pe.legend_position = "below";
  Panel pg = util::panel(words("vjp.panel_size"), "scale a of the logits a·x", "median", true, true);
  pg.series.push_back(util::series("‖g_x‖ (VJP)", Style::linespoints, c.scales, r.grad_norms, "#0072B2"));
  pg.series.push_back(util::series("‖J‖_F", Style::linespoints, c.scales, r.fros, "#D55E00"));
  pg.legend_position = "below";
  vf.panels = {pe, pg};
  util::stack_panels(vf);
  return vf;
}

// ---- verdicts -----------------------------------------------------------------

Verdict verdict_c4(const JacobianConfig& c, const RandomChecks& r, const OneHot& one_hot) {
  Verdict v4 = make_verdict("C4");
  v4.theory = 0;
  v4.measured = r.fd;
  v4.tolerance = c.fd_tolerance;
  v4.outcome = util::outcome_of(r.fd <= c.fd_tolerance && r.sym <= c.exact_tolerance && r.rows <= c.exact_tolerance &&
                                r.psd <= c.exact_tolerance && one_hot.max_abs == 0 && one_hot.trace_two > 0);
  v4.figure = "jacobian_heatmaps";
  return v4;
}

Verdict verdict_c5(const JacobianConfig& c, const RandomChecks& r) {
  Verdict v5 = make_verdict("C5");
  v5.theory = 0;
  v5.measured = r.vjp;
  v5.tolerance = c.exact_tolerance;
  v5.outcome = util::outcome_of(r.vjp <= c.exact_tolerance && r.vjp_fd <= c.fd_tolerance);
  v5.figure = "jacobian_vjp";
  return v5;
}

Result run_jacobian(const JacobianConfig& c, RunContext& ctx) {
  const Heatmaps heatmaps = measure_heatmaps(c);
  const RandomChecks random = measure_random(c, ctx);
  const OneHot one_hot = measure_one_hot(c);

  Result result;
  result.tables = {heatmaps.table, random.table};
  const Words words("jacobian");
  result.figures = {figure_heatmaps(c, heatmaps, words), figure_vjp(c, random, words)};
  result.verdicts = {verdict_c4(c, random, one_hot), verdict_c5(c, random)};
  // The run's numbers by name, for both verdicts' words; the plain texts say them as a reader counts them.
  const WordArgs numbers{{"fd", random.fd},
                         {"sym", random.sym},
                         {"rows", random.rows},
                         {"min_eigenvalue", -random.psd},
                         {"one_hot", one_hot.max_abs},
                         {"trace_two", one_hot.trace_two},
                         {"vjp", random.vjp},
                         {"vjp_fd", random.vjp_fd},
                         {"trials", c.trials},
                         {"a_first", c.scales.front()},
                         {"a_last", c.scales.back()},
                         {"n", c.n},
                         {"fd_step", c.fd_step},
                         {"fd_tolerance", c.fd_tolerance},
                         {"exact_tolerance", c.exact_tolerance},
                         {"fd_shown", util::pretty(random.fd, 1)},
                         {"rows_shown", util::pretty(random.rows, 1)},
                         {"vjp_shown", util::pretty(random.vjp, 1)},
                         {"vjp_fd_shown", util::pretty(random.vjp_fd, 1)}};
  words.fill(result.verdicts[0], "c4", numbers);
  words.fill(result.verdicts[1], "c5", numbers);
  return result;
}

}  // namespace

Experiment jacobian_experiment() {
  return make_experiment<JacobianConfig>("jacobian",
                                              "The softmax Jacobian diag(s) − s sᵀ, its properties, and the VJP",
                                              {"C4", "C5"}, run_jacobian, {{"trials", "40"}});
}

}  // namespace attnlab::lab
