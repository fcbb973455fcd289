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
#include <fmt/format.h>

#include <cmath>

#include "attnlab/attention.hpp"
#include "attnlab/scale.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

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

// Appends one item to a list sentence, after the separator unless it is the first.
void append(std::string& list, const std::string& item, const std::string& separator) {
  list += (list.empty() ? std::string() : separator) + item;
}

Figure figure_softcap(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m,
                      const Words& words) {
  Figure f;
  f.name = "softcap";
  words.fill(f, "figure", {{"order", words("order." + c.cap_order)}, {"queries", c.queries}, {"n", c.n}});
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
Verdict verdict_bounds(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m,
                       const Words& words) {
  Verdict v = make_verdict("C15");
  const bool logits_bounded = m.worst_logit_excess <= c.bound_tolerance;
  const bool probs_bounded = m.worst_prob_excess <= c.bound_tolerance;
  std::string per_cap;
  for (size_t ci = 0; ci < c.caps.size(); ++ci) {
    if (c.caps[ci] <= 0) continue;
    double top = -INFINITY;
    for (const auto& p : m.points[ci]) top = std::max(top, p.max_logit);
    append(per_cap,
           words("bounds.per_cap", {{"cap", c.caps[ci]},
                                    {"top", top},
                                    {"sigma_last", sigmas.back()},
                                    {"max_prob", m.points[ci].back().max_prob},
                                    {"bound", saturation_bound(c.caps[ci], static_cast<double>(c.n))}}),
           words("list_semicolon"));
  }
  const auto& none = m.points[static_cast<size_t>(std::find(c.caps.begin(), c.caps.end(), 0.0) - c.caps.begin())];
  v.theory = 0;
  v.measured = std::max(m.worst_logit_excess, m.worst_prob_excess);
  v.tolerance = c.bound_tolerance;
  v.outcome = util::outcome_of(logits_bounded && probs_bounded);
  v.figure = "softcap";
  // Gemma 2's cap, if measured: it bounds the logits, not the saturation.
  std::string gemma;
  for (size_t ci = 0; ci < c.caps.size(); ++ci)
    if (c.caps[ci] == 50) {
      size_t peak = 0;
      for (size_t si = 0; si < sigmas.size(); ++si)
        if (m.points[ci][si].max_prob > m.points[ci][peak].max_prob) peak = si;
      gemma = words("bounds.gemma", {{"gemma_gap", util::pretty(static_cast<double>(c.n - 1) * std::exp(-100.0))},
                                     {"n", c.n},
                                     {"peak_prob", m.points[ci][peak].max_prob},
                                     {"peak_sigma", sigmas[peak]},
                                     {"peak_none_prob", none[peak].max_prob},
                                     {"last_prob", m.points[ci].back().max_prob},
                                     {"sigma_last", sigmas.back()},
                                     {"none_prob", none.back().max_prob}});
    }
  const WordArgs args = {{"n", c.n},
                         {"sigma_first", sigmas.front()},
                         {"sigma_last", sigmas.back()},
                         {"order", words("order." + c.cap_order)},
                         {"per_cap", per_cap},
                         {"none_logit", none.back().max_logit},
                         {"none_prob", none.back().max_prob},
                         {"logit_excess", m.worst_logit_excess},
                         {"prob_excess", m.worst_prob_excess},
                         {"tolerance", c.bound_tolerance},
                         {"bound_at_2", saturation_bound(2, static_cast<double>(c.n))},
                         {"gemma", gemma}};
  words.fill(v, "bounds", args);
  v.plain = words(logits_bounded && probs_bounded ? "bounds.plain_bounded" : "bounds.plain_unbounded", args);
  return v;
}

// Beside the claim: what the cap does to the gradient, at the largest σ.
Verdict verdict_gradient(const SoftcapConfig& c, const std::vector<double>& sigmas, const Measured& m,
                         const Words& words) {
  const size_t none = static_cast<size_t>(std::find(c.caps.begin(), c.caps.end(), 0.0) - c.caps.begin());
  size_t smallest = none;
  for (size_t ci = 0; ci < c.caps.size(); ++ci)
    if (c.caps[ci] > 0 && (smallest == none || c.caps[ci] < c.caps[smallest])) smallest = ci;
  const double capped = m.points[smallest].back().grad_q, uncapped = m.points[none].back().grad_q;
  double uncapped_peak = 0;
  for (const auto& p : m.points[none]) uncapped_peak = std::max(uncapped_peak, p.grad_q);
  Verdict v = make_verdict("C15");
  v.check = "gradient";
  v.title = words("gradient.title");
  v.statement = words("gradient.statement");
  v.theory = c.keep_factor;
  v.measured = uncapped > 0 ? capped / uncapped : INFINITY;
  std::string curve;
  for (size_t si = 0; si < sigmas.size(); si += std::max<size_t>(1, sigmas.size() / 5))
    append(curve,
           words("gradient.curve_point", {{"sigma", sigmas[si]},
                                          {"capped", m.points[smallest][si].grad_q},
                                          {"uncapped", m.points[none][si].grad_q}}),
           words("list_comma"));
  v.tolerance = c.keep_factor;
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
  words.fill(v, "gradient",
             {{"keep_factor", c.keep_factor},
              {"cap", c.caps[smallest]},
              {"curve", curve},
              {"sigma_last", sigmas.back()},
              {"capped", capped},
              {"uncapped", uncapped},
              {"ratio", v.measured},
              {"uncapped_peak", uncapped_peak},
              {"fallen_to", util::pretty(uncapped / uncapped_peak)},
              {"ratio_pretty", util::pretty(v.measured)},
              {"peak_sigma", sigmas[peak]},
              {"direction", words(at_peak < 1 ? "gradient.smaller" : "gradient.larger")},
              {"at_peak", at_peak},
              {"declines",
               capped < capped_peak / 3
                   ? words("gradient.declines",
                           {{"capped_peak", capped_peak}, {"capped_peak_sigma", sigmas[capped_at]}, {"capped", capped}})
                   : ""}});
  return v;
}

Result run_softcap(const SoftcapConfig& c, RunContext& ctx) {
  const std::vector<double> sigmas = util::log_grid(c.sigma_min, c.sigma_max, static_cast<int>(c.sigma_points));
  const Measured m = measure(c, sigmas, ctx);
  const Words words("softcap");
  Result r;
  r.setup = words("setup", {{"queries", c.queries},
                            {"n", c.n},
                            {"d_k", c.d_k},
                            {"sigma_first", sigmas.front()},
                            {"sigma_last", sigmas.back()}});
  r.tables = {m.table};
  r.notes.push_back(words("note"));
  r.figures = {figure_softcap(c, sigmas, m, words)};
  r.verdicts = {verdict_bounds(c, sigmas, m, words), verdict_gradient(c, sigmas, m, words)};
  return r;
}

}  // namespace

Experiment softcap_experiment() {
  return make_experiment<SoftcapConfig>("softcap", "Gemma 2's logit softcap: the logits bounded, the saturation and the gradient",
                                        {"C15"}, run_softcap, {{"sigma_points", "6"}, {"queries", "8"}});
}

}  // namespace attnlab::lab
