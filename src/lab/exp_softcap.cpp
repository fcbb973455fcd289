// Experiment `softcap` (C15): Gemma 2's logit softcap, s ← c·tanh(s/c) after the scale
// (AttentionOptions::softcap, through the double-precision reference, whose backward
// differentiates through the tanh and is checked against finite differences).
//
// Rows: `queries` queries against n random keys, q, k ~ N(0, I), scaled so that the logits
// before the cap are σ·z with z ~ N(0, 1) (the policy fixed(σ/√d)); σ sweeps from far below
// the cap to far above. Per (cap, σ): the largest logit after the cap (lse + ln max p, from
// the forward's own outputs), the mean largest weight, and the typical row's ‖dQ_i‖ (median over
// rows) for a fixed random dO.
//
// Theory. The cap bounds every logit in (−c, c), so a row's largest weight is at most
//     p_max ≤ 1/(1 + (n − 1)e^{−2c})      (one logit at +c, the rest at −c);
// at Gemma 2's c = 50 that bound is 1 − 10⁻⁴¹: it stops the logits, not the saturation.
// As σ → ∞ the capped logits tend to c·sign(z): the weight spreads over the keys with z > 0
// (largest weight → about 2/n), so the softmax does not saturate, and the gradient reaches q
// through the keys with |σz| ≲ c, where tanh is still steep; uncapped, the row goes one-hot and
// ‖dQ‖ falls towards 0.
//
// cap_order=before_scale applies the cap to the unit logits z and scales after it,
// σ·c·tanh(z/c) (= the library's softcap at σ·c after the scale σ): the logits then reach
// σ·c, beyond the cap; the breaking configuration.
#include <cmath>
#include <fmt/format.h>

#include "attnlab/attention.hpp"
#include "attnlab/scale.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"

namespace attnlab::lab {
namespace {

struct SoftcapConfig {
  std::vector<double> caps{0, 50, 10, 2};  // 0 = no cap
  double sigma_min = 0.25, sigma_max = 1000;
  int64_t sigma_points = 13;
  int64_t n = 128;
  int64_t d_k = 64;
  int64_t queries = 32;
  std::string cap_order = "after_scale";   // Gemma 2 and the library; before_scale: the breaking configuration
  double bound_tolerance = 1e-9;           // relative slack on the bounds (double rounding)
  double keep_factor = 10;                 // "keeps the gradient": capped ‖dQ‖ ≥ this × uncapped at the largest σ
  void bind(Params& p) {
    using namespace rules;
    p.add("caps", caps, "softcap values c (0 = no cap; Gemma 2 uses 50 in attention)", each(at_least(0)));
    p.add("sigma_min", sigma_min, "smallest spread σ of the logits before the cap (a log grid)", positive());
    p.add("sigma_max", sigma_max, "largest spread σ");
    p.add("sigma_points", sigma_points, "points of the log grid of σ", in_range(2, 1000));
    p.add("n", n, "keys per row", at_least(2));
    p.add("d_k", d_k, "head dim", positive());
    p.add("queries", queries, "query rows", positive());
    p.add("cap_order", cap_order, "after_scale (Gemma 2, the library) or before_scale (cap the unit logits, then scale: the cap no longer bounds them)", one_of({"after_scale", "before_scale"}));
    p.add("bound_tolerance", bound_tolerance, "relative slack allowed on the bounds", positive());
    p.add("keep_factor", keep_factor, "the cap keeps the gradient when capped ‖dQ‖ ≥ this × uncapped at the largest σ", positive());
    p.check({"caps"}, "includes 0 (no cap, the baseline) and a cap > 0", [this] {
      return std::find(caps.begin(), caps.end(), 0.0) != caps.end() &&
             std::any_of(caps.begin(), caps.end(), [](double cap) { return cap > 0; });
    });
    p.check({"sigma_max", "sigma_min"}, "sigma_max > sigma_min", [this] { return sigma_max > sigma_min; });
  }
};

double saturation_bound(double cap, double n) { return cap > 0 ? 1 / (1 + (n - 1) * std::exp(-2 * cap)) : 1.0; }

struct Point {
  double max_logit = -INFINITY, max_prob = 0, grad_q = 0;
};

// One (cap, σ) through the reference: forward with diagnostics, then the backward for dO.
Point measure_point(const SoftcapConfig& c, double cap, double sigma, const Tensor<double>& q, const Tensor<double>& k,
                    const Tensor<double>& v, const Tensor<double>& grad_out) {
  AttentionOptions<double> o;
  o.scale = ScalePolicy::fixed(sigma / std::sqrt(static_cast<double>(c.d_k)));
  if (cap > 0) o.softcap = c.cap_order == "before_scale" ? sigma * cap : cap;
  Tensor<double> out({1, 1, c.queries, c.d_k}), lse({1, 1, c.queries, 1}), mp({1, 1, c.queries, 1});
  RowDiagnostics<double> diag;
  diag.max_prob = mp.view();
  attention_forward(q.view(), k.view(), v.view(), o, {out.view(), lse.view(), diag});
  Tensor<double> dq(q.shape()), dk(k.shape()), dv(v.shape());
  attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), grad_out.view(), o,
                     {dq.view(), dk.view(), dv.view()});
  Point p;
  for (int64_t i = 0; i < c.queries; ++i) {
    p.max_logit = std::max(p.max_logit, lse(0, 0, i, 0) + std::log(mp(0, 0, i, 0)));
    p.max_prob += mp(0, 0, i, 0) / static_cast<double>(c.queries);
  }
  // The typical row (median over rows of ‖dQ_i‖): a few near-tied rows, whose two largest logits split the
  // weight, carry most of a total once the others saturate.
  std::vector<double> rows;
  for (int64_t i = 0; i < c.queries; ++i) {
    double s2 = 0;
    for (int64_t j = 0; j < c.d_k; ++j) s2 += dq(0, 0, i, j) * dq(0, 0, i, j);
    rows.push_back(std::sqrt(s2));
  }
  p.grad_q = util::median(rows);
  return p;
}

struct Measured {
  Table table{"softcap", {"cap", "sigma", "max_logit", "mean_max_prob", "saturation_bound", "median_row_grad_q"}};
  std::vector<std::vector<Point>> points;  // [cap][σ]
  double worst_logit_excess = 0;           // max over caps > 0 of max_logit/c − 1 (≤ 0 when bounded)
  double worst_prob_excess = 0;            // max of mean max p − bound
};

Measured measure(const SoftcapConfig& c, const std::vector<double>& sigmas, RunContext& ctx) {
  ctx.report(fmt::format("{} caps × {} spreads σ = {:g}..{:g}, n = {}, d_k = {}", c.caps.size(), sigmas.size(),
                         sigmas.front(), sigmas.back(), c.n, c.d_k));
  auto g = util::rng(ctx.seed, "softcap");
  std::normal_distribution<double> normal(0, 1);
  Tensor<double> q({1, 1, c.queries, c.d_k}), k({1, 1, c.n, c.d_k}), v({1, 1, c.n, c.d_k}),
      grad_out({1, 1, c.queries, c.d_k});  // [B, H, N, d]: the same rows for every cap and σ
  for (auto* t : {&q, &k, &v, &grad_out})
    for (auto& x : t->storage()) x = normal(g);
  Measured m;
  m.points.assign(c.caps.size(), std::vector<Point>(sigmas.size()));
  const int64_t cells = static_cast<int64_t>(c.caps.size() * sigmas.size());
  util::parallel_for(cells, ctx.threads, [&](int64_t cell) {
    const size_t ci = static_cast<size_t>(cell) / sigmas.size(), si = static_cast<size_t>(cell) % sigmas.size();
    m.points[ci][si] = measure_point(c, c.caps[ci], sigmas[si], q, k, v, grad_out);
  });
  const double n = static_cast<double>(c.n);
  for (size_t ci = 0; ci < c.caps.size(); ++ci)
    for (size_t si = 0; si < sigmas.size(); ++si) {
      const Point& p = m.points[ci][si];
      const double cap = c.caps[ci], bound = saturation_bound(cap, n);
      m.table.add_row({cap, sigmas[si], p.max_logit, p.max_prob, bound, p.grad_q});
      if (cap > 0) {
        m.worst_logit_excess = std::max(m.worst_logit_excess, p.max_logit / cap - 1);
        m.worst_prob_excess = std::max(m.worst_prob_excess, p.max_prob - bound);
      }
    }
  return m;
}

std::string cap_label(double cap) { return cap > 0 ? fmt::format("c = {:g}", cap) : std::string("no cap"); }
std::string cap_colour(size_t i, double cap) { return cap > 0 ? util::colour(i + 1) : std::string("#000000"); }

Figure figure_softcap(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m) {
  Figure f;
  f.name = "softcap";
  f.caption = fmt::format(
      "Logit softcap c·tanh(s/c), applied {} the scale, on {} rows of n = {} random keys whose logits before the cap "
      "are σ·z, z ~ N(0, 1). Top: the largest logit of any row (dashed: each cap c). Middle: the mean largest weight "
      "(dashed: the bound 1/(1 + (n − 1)e^(−2c)), below 1 only for small c). Bottom: the gradient reaching a typical "
      "query row, the median over rows of ‖dQ_i‖ for a fixed random dO (a curve leaves the panel below 10⁻⁸ of the "
      "largest). Without a cap the rows go one-hot and the gradient falls away; a cap well below σ spreads the "
      "weight over the keys with z > 0 and keeps a gradient through those near z = 0.",
      c.cap_order == "before_scale" ? "before" : "after", c.queries, c.n);
  f.alt =
      "Against the logit spread σ (log axis), one line per softcap: the largest logit, the mean largest "
      "weight and the gradient reaching a typical query row. Without a cap the rows go one-hot and the "
      "gradient falls away; a cap well below σ bounds the logits and keeps a gradient.";
  Panel pl = util::panel("largest logit", "σ (logit spread before the cap)", "largest logit", true, true);
  Panel pp = util::panel("largest weight", "σ (logit spread before the cap)", "mean largest weight", true, false);
  Panel pg = util::panel("gradient, typical row of Q", "σ (logit spread before the cap)", "median ‖dQ_i‖", true, true);
  std::vector<Series> bounds;
  for (size_t ci = 0; ci < c.caps.size(); ++ci) {
    std::vector<double> logit, prob, grad;
    for (const auto& p : m.points[ci]) logit.push_back(p.max_logit), prob.push_back(p.max_prob), grad.push_back(p.grad_q);
    const std::string col = cap_colour(ci, c.caps[ci]), label = cap_label(c.caps[ci]);
    pl.series.push_back(util::series(label, Style::linespoints, sigmas, logit, col));
    pp.series.push_back(util::series(label, Style::linespoints, sigmas, prob, col));
    pg.series.push_back(util::series(label, Style::linespoints, sigmas, grad, col));
    if (c.caps[ci] > 0) {
      bounds.push_back(util::series("", Style::theory, {sigmas.front(), sigmas.back()}, {c.caps[ci], c.caps[ci]}, col));
      const double b = saturation_bound(c.caps[ci], static_cast<double>(c.n));
      pp.series.push_back(util::series("", Style::theory, {sigmas.front(), sigmas.back()}, {b, b}, col));
    }
  }
  pl.series.insert(pl.series.end(), bounds.begin(), bounds.end());
  pl.legend_position = "below";
  pp.legend_position = "below";
  pg.legend_position = "below";
  pp.y_min = 0;
  pp.y_max = 1.05;
  // The uncapped gradient falls by a hundred orders of magnitude: the panel keeps 8 decades
  // below the largest value, so the capped curves stay readable and the uncapped one leaves it.
  double top = 0;
  for (const auto& row : m.points)
    for (const auto& p : row) top = std::max(top, p.grad_q);
  pg.y_min = top * 1e-8;
  pg.y_max = top * 3;
  f.panels = {pl, pp, pg};
  util::stack_panels(f);
  return f;
}

// The main check: the cap bounds the logits and, through them, how far a row can saturate.
Verdict verdict_bounds(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m) {
  Verdict v = make_verdict("C15");
  const bool logits_bounded = m.worst_logit_excess <= c.bound_tolerance;
  const bool probs_bounded = m.worst_prob_excess <= c.bound_tolerance;
  std::string per_cap;
  for (size_t ci = 0; ci < c.caps.size(); ++ci) {
    if (c.caps[ci] <= 0) continue;
    double top = -INFINITY;
    for (const auto& p : m.points[ci]) top = std::max(top, p.max_logit);
    per_cap += fmt::format("{}c = {:g}: largest logit {:.4g}, largest weight at σ = {:g} {:.3f} (bound {:.3g})",
                           per_cap.empty() ? "" : "; ", c.caps[ci], top, sigmas.back(), m.points[ci].back().max_prob,
                           saturation_bound(c.caps[ci], static_cast<double>(c.n)));
  }
  const auto& none = m.points[static_cast<size_t>(std::find(c.caps.begin(), c.caps.end(), 0.0) - c.caps.begin())];
  v.theory = 0;
  v.theory_text = fmt::format("every logit in (−c, c); largest weight ≤ 1/(1 + (n − 1)e^(−2c)) (n = {})", c.n);
  v.measured = std::max(m.worst_logit_excess, m.worst_prob_excess);
  v.measured_text = fmt::format("σ = {:g}..{:g}, cap {} the scale: {}. Without a cap: largest logit {:.4g}, largest weight "
                                "{:.3f} at σ = {:g}. Worst excess over the bounds (relative logit, absolute weight): {:.2g}, {:.2g}",
                                sigmas.front(), sigmas.back(), c.cap_order == "before_scale" ? "before" : "after", per_cap,
                                none.back().max_logit, none.back().max_prob, sigmas.back(), m.worst_logit_excess,
                                m.worst_prob_excess);
  v.tolerance = c.bound_tolerance;
  v.unit = "worst excess over the bounds: relative for logits, absolute for weights";
  v.method = fmt::format("The largest logit of any row is read from the forward's own outputs (lse + ln max p) at every "
                         "cap c and spread σ; confirmed when it never exceeds c and the mean largest weight never exceeds "
                         "1/(1 + (n − 1)e^(−2c)), each within {:g}; refuted otherwise.", c.bound_tolerance);
  v.outcome = util::outcome_of(logits_bounded && probs_bounded);
  v.figure = "softcap";
  // Gemma 2's cap, if measured: it bounds the logits, not the saturation.
  std::string gemma;
  for (size_t ci = 0; ci < c.caps.size(); ++ci)
    if (c.caps[ci] == 50) {
      size_t peak = 0;
      for (size_t si = 0; si < sigmas.size(); ++si)
        if (m.points[ci][si].max_prob > m.points[ci][peak].max_prob) peak = si;
      gemma = fmt::format(
          " At Gemma 2's c = 50 that bound is 1 − {} for n = {}: it says nothing. Rows still concentrate while σ is below "
          "the cap (largest weight up to {:.2f} at σ = {:.3g}, uncapped {:.2f}) and spread again only once σ is far above "
          "it, when the capped logits pile up at ±c ({:.3f} at σ = {:g}, uncapped {:.3f}).",
          util::pretty(static_cast<double>(c.n - 1) * std::exp(-100.0)), c.n, m.points[ci][peak].max_prob, sigmas[peak],
          none[peak].max_prob, m.points[ci].back().max_prob, sigmas.back(), none.back().max_prob);
    }
  v.plain = logits_bounded && probs_bounded
                ? "The cap holds every logit below c at every spread, and the largest weight below its bound "
                  "1/(1 + (n − 1)e^(−2c)), which is well below 1 only for a small cap (c = 2: " +
                      fmt::format("{:.3f}", saturation_bound(2, static_cast<double>(c.n))) + ")." + gemma
                : fmt::format("Applied {} the scale, the cap does not bound the logits: {}.",
                              c.cap_order == "before_scale" ? "before" : "after", per_cap);
  return v;
}

// Beside the claim: what the cap does to the gradient, at the largest σ.
Verdict verdict_gradient(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m) {
  const size_t none = static_cast<size_t>(std::find(c.caps.begin(), c.caps.end(), 0.0) - c.caps.begin());
  size_t smallest = none;
  for (size_t ci = 0; ci < c.caps.size(); ++ci)
    if (c.caps[ci] > 0 && (smallest == none || c.caps[ci] < c.caps[smallest])) smallest = ci;
  const double capped = m.points[smallest].back().grad_q, uncapped = m.points[none].back().grad_q;
  double uncapped_peak = 0;
  for (const auto& p : m.points[none]) uncapped_peak = std::max(uncapped_peak, p.grad_q);
  Verdict v = make_verdict("C15");
  v.supplementary = true;
  v.title = "A cap keeps a gradient where the uncapped softmax saturates";
  v.statement = "As the logits' spread σ grows past the cap, the capped rows stay spread and the gradient reaches Q "
                "through the keys whose logits sit near 0, where tanh is steep; uncapped, the rows go one-hot and the "
                "gradient falls towards 0.";
  v.theory = c.keep_factor;
  v.theory_text = fmt::format("typical row: capped ‖dQ_i‖ ≫ uncapped at large σ (at least {:g}×)", c.keep_factor);
  v.measured = uncapped > 0 ? capped / uncapped : INFINITY;
  std::string curve;
  for (size_t si = 0; si < sigmas.size(); si += std::max<size_t>(1, sigmas.size() / 5))
    curve += fmt::format("{}σ = {:.3g}: {:.3g} / {:.3g}", curve.empty() ? "" : ", ", sigmas[si], m.points[smallest][si].grad_q,
                         m.points[none][si].grad_q);
  v.measured_text = fmt::format("median over rows of ‖dQ_i‖ with c = {:g} / without a cap: {}; at σ = {:g}: {:.3g} / {:.3g} (ratio {:.3g}); the "
                                "uncapped peak {:.3g}",
                                c.caps[smallest], curve, sigmas.back(), capped, uncapped, v.measured, uncapped_peak);
  v.tolerance = c.keep_factor;
  v.unit = "ratio of the typical query's gradient, capped / uncapped";
  v.theory_unit = "smallest ratio that confirms";
  v.tolerance_unit = "smallest ratio that confirms";
  v.method = fmt::format("The median over query rows of ‖dQ_i‖ for one fixed random dO through the reference's backward (which differentiates through "
                         "the tanh); confirmed when, at the largest σ, the smallest cap's gradient is at least {:g}× the "
                         "uncapped one; refuted otherwise.", c.keep_factor);
  v.outcome = util::outcome_of(v.measured >= c.keep_factor);
  v.figure = "softcap";
  size_t peak = 0;
  for (size_t si = 0; si < sigmas.size(); ++si)
    if (m.points[none][si].grad_q > m.points[none][peak].grad_q) peak = si;
  const double at_peak = m.points[smallest][peak].grad_q / m.points[none][peak].grad_q;
  size_t capped_at = 0;
  for (size_t si = 0; si < sigmas.size(); ++si)
    if (m.points[smallest][si].grad_q > m.points[smallest][capped_at].grad_q) capped_at = si;
  const double capped_peak = m.points[smallest][capped_at].grad_q;
  v.plain = fmt::format("At the largest spread (σ = {:g}) the uncapped gradient has fallen to {} of its peak, while with "
                        "c = {:g} it is {:.3g}, {}× the uncapped one: the cap trades a saturated softmax for a steep "
                        "tanh near z = 0. Where the uncapped gradient peaks (σ = {:.3g}) the cap makes it {} ({:.2g}×).{}",
                        sigmas.back(), util::pretty(uncapped / uncapped_peak), c.caps[smallest], capped,
                        util::pretty(v.measured), sigmas[peak], at_peak < 1 ? "smaller, not larger" : "larger", at_peak,
                        capped < capped_peak / 3
                            ? fmt::format(" The capped gradient declines too, more slowly, once few keys have logits within "
                                          "c of 0 (from {:.3g} at σ = {:.3g} to {:.3g}).",
                                          capped_peak, sigmas[capped_at], capped)
                            : std::string());
  return v;
}

Result run_softcap(const SoftcapConfig& c, RunContext& ctx) {
  const std::vector<double> sigmas = util::log_grid(c.sigma_min, c.sigma_max, static_cast<int>(c.sigma_points));
  const Measured m = measure(c, sigmas, ctx);
  Result r;
  r.setup = fmt::format("{} queries against n = {} random keys, q, k, v ~ N(0, I) of size d_k = {}, the logits before the "
                        "cap σ·q·k/√d_k for σ = {:g}..{:g}; the library's softcap option through the double-precision "
                        "reference, forward and backward, the same rows and dO for every cap.",
                        c.queries, c.n, c.d_k, sigmas.front(), sigmas.back());
  r.tables = {m.table};
  r.notes.push_back("softcap.csv: cap 0 = no cap");
  r.figures = {figure_softcap(c, sigmas, m)};
  r.verdicts = {verdict_bounds(c, sigmas, m), verdict_gradient(c, sigmas, m)};
  return r;
}

}  // namespace

Experiment softcap_experiment() {
  return make_experiment<SoftcapConfig>("softcap", "Gemma 2's logit softcap: the logits bounded, the saturation and the gradient",
                                        {"C15"}, run_softcap, {{"sigma_points", "6"}, {"queries", "8"}});
}

}  // namespace attnlab::lab
