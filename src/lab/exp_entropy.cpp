// Experiment `entropy` (C12): attention entropy against the number of keys n under
// 1/√d, log₅₁₂(n)/√d (entropy-invariant) and s·ln(n)/√d (scalable softmax), and the
// temperature α* that maximises the softmax's gradient ½‖J‖₁·α = α(1 − Σp²): Su Jianlin's
// objective (kexue.fm/archives/9812), whose mean-field maximiser he fits as α* ≈ 0.84·√(ln n).
//
// Rows come from the engine's fused diagnostics on two inputs, random and planted
// (lab/row_stats.hpp).
// Theory, random: the logits of a row are ≈ N(0, τ²) with τ = scale·√d, and for
// τ² < 2 ln n the entropy is ≈ ln n − τ²/2 (the mean of e^{x} over n Gaussians).
#include <fmt/format.h>

#include <cmath>

#include "attnlab/attention.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/softmax.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/row_stats.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct EntropyConfig {
  std::vector<int64_t> ns{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  int64_t d_k = 64;
  int64_t queries = 64;
  std::vector<std::string> policies{"inv_sqrt_d", "entropy_invariant", "ssmax"};
  double planted_signal = 1.0;       // β in q = β k_t + z
  double growth_threshold = 1.0;     // "grows": entropy rises by more than this (nats) from the smallest to the largest n
  double constant_fraction = 0.25;   // "near constant": its rise is below this fraction of 1/√d's
  double saturation_limit = 0.9;     // a flat entropy counts only while the mean largest probability stays below this
  // α*: maximiser of α(1 − Σ softmax(α z)²), z ~ N(0, I_n). Su's fit 0.84·√(ln n) is judged against the
  // maximiser of his mean-field objective α(1 − e^{α²}/n), what the fit was made to; single rows are shown beside.
  int64_t alpha_samples = 1 << 17;   // Σ over draws of n: draws per n = max(32, alpha_samples / n)
  double alpha_coefficient = 0.84;   // Su's fit: α* ≈ 0.84·√(ln n)
  double alpha_tolerance = 0.10;     // relative
  int64_t alpha_min_n = 256;         // the fit is asymptotic (Su fits n from 40 to 20000): judged for n ≥ this
  void bind(Params& p) {
    using namespace rules;
    p.add("ns", ns, "numbers of keys n", at_least_items(2) & each(at_least(2)));
    p.add("d_k", d_k, "head dim", positive());
    p.add("queries", queries, "query rows per n (statistics are averaged over them)", positive());
    p.add("policies", policies, "scale policies (ScalePolicy::parse names)", each(util::scale_policy_rule()));
    p.add("planted_signal", planted_signal, "β of the planted input q = β·k_t + N(0, I)");
    p.add("growth_threshold", growth_threshold, "1/√d's entropy must rise by more than this many nats over the range of n");
    p.add("constant_fraction", constant_fraction, "a log n-aware scale is 'near constant' if its rise is below this fraction of 1/√d's");
    p.add("saturation_limit", saturation_limit, "a flat entropy counts only where the mean largest probability stays below this (saturated rows are flat at 0)");
    p.add("alpha_samples", alpha_samples, "random logits per n for α* (draws = max(32, alpha_samples / n))", positive());
    p.add("alpha_coefficient", alpha_coefficient, "Su's fit: α* ≈ alpha_coefficient·√(ln n)");
    p.add("alpha_tolerance", alpha_tolerance, "relative agreement of the fit with the mean-field maximiser it was fitted to");
    p.add("alpha_min_n", alpha_min_n, "the fit is judged for n ≥ this (it is asymptotic)");
    p.check({"policies"}, "includes inv_sqrt_d (the baseline of C12)", [this] {
      return std::find(policies.begin(), policies.end(), "inv_sqrt_d") != policies.end();
    });
  }
};

using util::RowStats;

// g(α) = α(1 − Σp²), p = softmax(α z): the size ½‖αJ‖₁ of the gradient through a
// softmax whose logits are α z.
double half_l1(double alpha, const std::vector<double>& z, std::vector<double>& x, std::vector<double>& p) {
  x.resize(z.size());
  p.resize(z.size());
  for (size_t i = 0; i < z.size(); ++i) x[i] = alpha * z[i];
  softmax<double>(x, p);
  double s2 = 0;
  for (double v : p) s2 += v * v;
  return alpha * (1 - s2);
}

// Golden-section search for the maximum of f on [lo, hi] (f unimodal there).
template <class F>
double golden_argmax(F f, double lo, double hi) {
  const double r = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi, c = b - r * (b - a), d = a + r * (b - a);
  double fc = f(c), fd = f(d);
  while (b - a > 1e-4 * (1 + a)) {
    if (fc > fd) {
      b = d, d = c, fd = fc, c = b - r * (b - a), fc = f(c);
    } else {
      a = c, c = d, fc = fd, d = a + r * (b - a), fd = f(d);
    }
  }
  return (a + b) / 2;
}

// The policies to compare, and which of them is 1/√d (C12's baseline).
struct Policies {
  std::vector<ScalePolicy> list;
  size_t base = 0;
};

Policies policies_of(const EntropyConfig& c) {
  Policies p;
  p.list = util::parse_policies("policies", c.policies);
  for (size_t i = 0; i < p.list.size(); ++i)
    if (p.list[i].kind() == ScalePolicy::Kind::inv_sqrt_d) p.base = i;
  return p;
}

// The texts item(0..count−1) joined by the words' list separator.
template <class Item>
std::string joined(const Words& words, size_t count, Item item) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += (i ? words("list_separator") : std::string()) + item(i);
  return out;
}

// ---- measure ------------------------------------------------------------------

struct EntropyRows {
  Table table{"entropy", {"scenario", "policy", "n", "scale", "mean_entropy", "mean_max_prob", "ln_n",
                          "theory_entropy_random"}};
  std::vector<std::vector<std::vector<RowStats>>> stats;  // [scenario: random, planted][policy][n]
};

// Mean row entropy and largest probability for each input, policy and n.
EntropyRows measure_rows(const EntropyConfig& c, const Policies& policies, RunContext& ctx) {
  const double d = static_cast<double>(c.d_k);
  EntropyRows rows;
  rows.stats.assign(2, std::vector<std::vector<RowStats>>(policies.list.size()));
  for (int scenario = 0; scenario < 2; ++scenario) {
    for (size_t pi = 0; pi < policies.list.size(); ++pi) {
      const ScalePolicy& policy = policies.list[pi];
      ctx.report(fmt::format("{} input, policy {}: n = {}..{}", scenario ? "planted" : "random", policy.name(),
                             c.ns.front(), c.ns.back()));
      auto& row = rows.stats[static_cast<size_t>(scenario)][pi];
      row.resize(c.ns.size());
      for (size_t ni = 0; ni < c.ns.size(); ++ni) {
        const int64_t n = c.ns[ni];
        // Same inputs for every policy (stream without the policy name): a paired comparison.
        row[ni] = util::row_stats(policy, {scenario == 1, c.planted_signal, n, c.d_k, c.queries}, ctx.seed,
                                  fmt::format("entropy/{}/{}", scenario, n));
        const double scale = policy(c.d_k, n), tau2 = scale * scale * d;
        rows.table.add_row({static_cast<double>(scenario), static_cast<double>(pi), static_cast<double>(n), scale,
                            row[ni].entropy, row[ni].max_prob, std::log(static_cast<double>(n)),
                            std::log(static_cast<double>(n)) - tau2 / 2});
      }
    }
  }
  return rows;
}

struct AlphaStar {
  Table table{"alpha_star", {"n", "alpha_star", "alpha_star_p25", "alpha_star_p75", "theory_084_sqrt_ln_n",
                             "mean_field_alpha_star", "expected_alpha_star", "draws"}};
  std::vector<double> median, p25, p75, expected;  // per n; expected: maximiser of α(1 − E[Σp²]) over the draws
  double worst = 0;  // largest relative deviation of Su's fit from his mean-field maximiser, n ≥ alpha_min_n
};

// Per n, the α maximising α(1 − Σp²) for random logits, over many draws.
AlphaStar measure_alpha_star(const EntropyConfig& c, RunContext& ctx) {
  ctx.report("α* maximising α(1 − Σp²)");
  AlphaStar a;
  a.median.resize(c.ns.size());
  a.p25.resize(c.ns.size());
  a.p75.resize(c.ns.size());
  a.expected.resize(c.ns.size());
  util::parallel_for(static_cast<int64_t>(c.ns.size()), ctx.threads, [&](int64_t i) {
    const int64_t n = c.ns[static_cast<size_t>(i)];
    auto g = util::rng(ctx.seed, fmt::format("entropy/alpha/{}", n));
    std::normal_distribution<double> normal(0, 1);
    // Per draw of z, the α maximising g(α) (g → 0 at both ends); then the median and quartiles over draws.
    // A single row's g is largest where its two largest z split the mass (α ≈ 1/gap), which Su's mean field
    // does not describe. A log grid finds the maximum; golden-section search refines it.
    std::vector<double> z(static_cast<size_t>(n)), x, p, best;
    std::vector<std::vector<double>> draws;  // every z, for the expected gradient below
    const auto grid = util::log_grid(0.05, 100.0, 64);
    for (int64_t r = 0; r < std::max<int64_t>(32, c.alpha_samples / n); ++r) {
      for (auto& e : z) e = normal(g);
      draws.push_back(z);
      std::vector<double> vals;
      for (double al : grid) vals.push_back(half_l1(al, z, x, p));
      auto refine = [&](size_t k) {
        const double lo = grid[k == 0 ? 0 : k - 1], hi = grid[std::min(k + 1, grid.size() - 1)];
        return golden_argmax([&](double al) { return half_l1(al, z, x, p); }, lo, hi);
      };
      best.push_back(refine(static_cast<size_t>(std::max_element(vals.begin(), vals.end()) - vals.begin())));
    }
    // What Su's mean field approximates: the gradient of a typical row, α(1 − E[Σp²]) with the mean over draws
    // inside (it is what e^{α²}/n stands for), maximised on the grid and refined by golden-section search.
    auto expected_gradient = [&](double al) {
      double sum_p2 = 0;  // Σ over draws of Σp²
      for (const auto& d : draws) sum_p2 += 1 - half_l1(al, d, x, p) / al;
      return al * (1 - sum_p2 / static_cast<double>(draws.size()));
    };
    std::vector<double> mean_vals;
    for (double al : grid) mean_vals.push_back(expected_gradient(al));
    const auto k = static_cast<size_t>(std::max_element(mean_vals.begin(), mean_vals.end()) - mean_vals.begin());
    a.expected[static_cast<size_t>(i)] =
        golden_argmax(expected_gradient, grid[k == 0 ? 0 : k - 1], grid[std::min(k + 1, grid.size() - 1)]);
    a.median[static_cast<size_t>(i)] = util::median(best);
    a.p25[static_cast<size_t>(i)] = util::quantile(best, 0.25);
    a.p75[static_cast<size_t>(i)] = util::quantile(best, 0.75);
  });
  // Su's mean-field theory: Σp² ≈ E[e^{2αz}]/(n E[e^{αz}]²) = e^{α²}/n, so α* maximises α(1 − e^{α²}/n)
  // (i.e. solves α² + ln(1 + 2α²) = ln n); his fit 0.84·√(ln n) approximates that solution.
  auto large_n = [](double n) {
    return golden_argmax([n](double al) { return al * (1 - std::exp(al * al) / n); }, 0.0, std::sqrt(std::log(n)));
  };
  for (size_t i = 0; i < c.ns.size(); ++i) {
    const double n = static_cast<double>(c.ns[i]), theory = c.alpha_coefficient * std::sqrt(std::log(n));
    a.table.add_row({n, a.median[i], a.p25[i], a.p75[i], theory, large_n(n), a.expected[i],
                     static_cast<double>(std::max<int64_t>(32, c.alpha_samples / c.ns[i]))});
    if (c.ns[i] >= c.alpha_min_n) a.worst = std::max(a.worst, std::abs(theory / large_n(n) - 1));
  }
  return a;
}

// ---- figures ------------------------------------------------------------------

Figure figure_entropy(const EntropyConfig& c, const Policies& policies, const EntropyRows& rows, const Words& words) {
  const auto xs = util::to_double(c.ns);
  const double d = static_cast<double>(c.d_k);
  Figure f;
  f.name = "entropy_vs_n";
  f.title = "";
  words.fill(f, "entropy", {{"d_k", c.d_k}, {"queries", c.queries}, {"beta", c.planted_signal}});
  for (int scenario = 0; scenario < 2; ++scenario) {
    const std::string input =
        scenario ? words("entropy.input_planted", {{"beta", c.planted_signal}}) : words("input.random");
    Panel pe =
        util::panel(words("entropy.panel_entropy", {{"input", input}}), "n (keys)", "entropy (nats)", true, false);
    Panel pm = util::panel(words("entropy.panel_max_prob", {{"input", input}}), "n (keys)", "max p", true, false);
    std::vector<double> ln_n;
    for (double n : xs) ln_n.push_back(std::log(n));
    pe.series.push_back(util::series("ln n (uniform)", Style::theory, xs, ln_n, "#000000"));
    std::vector<Series> theory;  // drawn over the measured lines, so that they stay visible
    for (size_t pi = 0; pi < policies.list.size(); ++pi) {
      std::vector<double> e, m, th;
      for (size_t ni = 0; ni < c.ns.size(); ++ni) {
        e.push_back(rows.stats[static_cast<size_t>(scenario)][pi][ni].entropy);
        m.push_back(rows.stats[static_cast<size_t>(scenario)][pi][ni].max_prob);
        const double scale = policies.list[pi](c.d_k, c.ns[ni]), tau2 = scale * scale * d;
        // ln n − τ²/2 holds while the sum over keys self-averages (τ² < ½ ln n); beyond, the largest
        // logits dominate and the formula no longer applies, so the line is not drawn there.
        th.push_back(tau2 < 0.5 * std::log(xs[ni]) ? std::log(xs[ni]) - tau2 / 2 : NAN);
      }
      const std::string label = util::policy_label(policies.list[pi]);
      const std::string col = util::policy_colour(policies.list[pi]);
      pe.series.push_back(util::series(label, Style::linespoints, xs, e, col));
      if (scenario == 0) theory.push_back(util::series("", Style::theory, xs, th, col));
      pm.series.push_back(util::series(label, Style::linespoints, xs, m, col));
    }
    pe.series.insert(pe.series.end(), theory.begin(), theory.end());
    pe.legend_position = "below";
    pm.legend_position = "below";
    pm.y_min = 0;
    pm.y_max = 1.05;
    pe.y_min = 0;
    for (size_t i = 0; i < xs.size(); i += xs.size() > 6 ? 2 : 1) pe.x_tics.push_back(xs[i]);
    pm.x_tics = pe.x_tics;
    f.panels.push_back(pe);
    f.panels.push_back(pm);
  }
  util::stack_panels(f);
  return f;
}

Figure figure_alpha_star(const EntropyConfig& c, const AlphaStar& a, const Words& words) {
  const auto xs = util::to_double(c.ns);
  Figure af;
  af.name = "alpha_star";
  af.title = "";
  words.fill(af, "alpha_star");
  Panel pa = util::panel(words("alpha_star.panel"), "n", "α*", true, true);
  pa.series.push_back(util::band("measured: quartiles over draws", xs, a.p25, a.p75, util::colour(5)));
  pa.series.push_back(util::series("single rows' α* (median over draws)", Style::linespoints, xs, a.median, util::colour(1)));
  pa.series.push_back(util::series(fmt::format("Su's fit {:g}·√(ln n)", c.alpha_coefficient), Style::theory, xs, a.table.column("theory_084_sqrt_ln_n"), "#000000"));
  pa.series.push_back(util::series("Su's mean field: max α(1 − exp(α²)/n)", Style::theory, xs, a.table.column("mean_field_alpha_star"), util::colour(0)));
  pa.y_min = 0.5;
  pa.y_max = 100;
  pa.legend_position = "below";
  for (size_t i = 0; i < xs.size(); i += xs.size() > 6 ? 2 : 1) pa.x_tics.push_back(xs[i]);
  af.panels.push_back(pa);
  util::stack_panels(af);
  return af;
}

// ---- verdicts -----------------------------------------------------------------

Verdict verdict_c12(const EntropyConfig& c, const Policies& policies, const EntropyRows& rows, const Words& words) {
  auto rise = [&](int scenario, size_t pi) {
    const auto& r = rows.stats[static_cast<size_t>(scenario)][pi];
    return r.back().entropy - r.front().entropy;
  };
  auto most_concentrated = [&](int scenario, size_t pi) {
    double m = 0;
    for (const auto& r : rows.stats[static_cast<size_t>(scenario)][pi]) m = std::max(m, r.max_prob);
    return m;
  };
  std::string text, plain_cases, held_cases;  // held_cases: flat and not saturated, in words
  bool grows = true;
  int held = 0, tested = 0, flat_but_saturated = 0;
  for (int scenario = 0; scenario < 2; ++scenario) {
    const double base_rise = rise(scenario, policies.base);
    grows = grows && base_rise > c.growth_threshold;
    const std::string input = words(scenario ? "input.planted" : "input.random");
    if (scenario) text += words("c12.measured_separator");
    text += words("c12.measured_input", {{"input", input}, {"rise", base_rise}});
    for (size_t pi = 0; pi < policies.list.size(); ++pi) {
      if (pi == policies.base || !policies.list[pi].depends_on_n()) continue;
      const double r = rise(scenario, pi), top = most_concentrated(scenario, pi);
      const bool flat = std::abs(r) < c.constant_fraction * base_rise, saturated = top > c.saturation_limit;
      const std::string label = util::policy_label(policies.list[pi]);
      ++tested;
      if (flat && !saturated) {
        ++held;
        if (!held_cases.empty()) held_cases += words("c12.held_separator");
        held_cases += words("c12.held_case", {{"label", label}, {"input", input}});
      }
      if (flat && saturated) ++flat_but_saturated;
      const WordArgs args = {{"label", label}, {"input", input}, {"rise", r}, {"top", top}};
      text += words(flat && saturated ? "c12.measured_case_saturated" : "c12.measured_case", args);
      if (!plain_cases.empty()) plain_cases += words("c12.plain_separator");
      plain_cases += words(!flat       ? "c12.plain_case.not_flat"
                           : saturated ? "c12.plain_case.saturated"
                                       : "c12.plain_case.held",
                           args);
    }
  }
  Verdict v = make_verdict("C12");
  v.theory = c.constant_fraction;
  v.measured = tested ? static_cast<double>(held) / tested : NAN;
  v.tolerance = c.constant_fraction;
  if (grows && tested > 0 && held == tested)
    v.outcome = Outcome::confirmed;
  else if (!grows || held == 0)
    v.outcome = Outcome::refuted;
  else
    v.outcome = Outcome::inconclusive;
  v.figure = "entropy_vs_n";
  const std::string saturated_more =
      flat_but_saturated == 0 ? std::string()
                              : words(flat_but_saturated == 1 ? "c12.saturated_more.one" : "c12.saturated_more.many",
                                      {{"count", flat_but_saturated}});
  words.fill(v, "c12",
             {{"n_first", c.ns.front()},
              {"n_last", c.ns.back()},
              {"text", text},
              {"held", held},
              {"tested", tested},
              {"constant_fraction", c.constant_fraction},
              {"saturation_limit", c.saturation_limit},
              {"growth_threshold", c.growth_threshold},
              {"base_rise", rise(0, policies.base)},
              {"cases", plain_cases},
              {"saturated_more", saturated_more}});
  if (held > 0) v.plain += words("c12.plain_held", {{"cases", held_cases}});
  for (const auto& p : policies.list)
    if (p.kind() == ScalePolicy::Kind::entropy_invariant) v.plain += words("c12.plain_entropy_invariant");
  return v;
}

// A check beside C12: Su's fit α* ≈ 0.84·√(ln n), against the mean-field maximiser it was fitted to.
Verdict verdict_alpha_star(const EntropyConfig& c, const AlphaStar& a, const Words& words) {
  Verdict va = make_verdict("C12");
  va.title = words("alpha.title");
  va.check = "alpha_star";
  va.statement = words("alpha.statement");
  va.theory = c.alpha_coefficient * std::sqrt(std::log(static_cast<double>(c.ns.back())));
  va.measured = a.table.column("mean_field_alpha_star").back();
  va.tolerance = c.alpha_tolerance;
  va.outcome = util::outcome_of(a.worst <= c.alpha_tolerance);
  const auto& theory = a.table.column("theory_084_sqrt_ln_n");
  const auto& mean_field = a.table.column("mean_field_alpha_star");
  const std::string by_n = joined(words, c.ns.size(), [&](size_t i) {
    return words("alpha.measured_item", {{"n", c.ns[i]}, {"measured", a.median[i]}, {"theory", theory[i]}});
  });
  const std::string mean_field_by_n = joined(words, c.ns.size(), [&](size_t i) {
    return words("alpha.mean_field_item",
                 {{"n", c.ns[i]}, {"mean_field", mean_field[i]}, {"expected", a.expected[i]}});  // the mean over rows, beside
  });
  words.fill(va, "alpha",
             {{"coefficient", c.alpha_coefficient},
              {"by_n", by_n},
              {"min_n", c.alpha_min_n},
              {"worst", a.worst},
              {"worst_percent", 100 * a.worst},
              {"expected_lo", *std::min_element(a.expected.begin(), a.expected.end())},
              {"expected_hi", *std::max_element(a.expected.begin(), a.expected.end())},
              {"row_max", a.median.back()},
              {"mean_field_last", mean_field.back()},
              {"mean_field_by_n", mean_field_by_n},
              {"samples", c.alpha_samples},
              {"tolerance", c.alpha_tolerance},
              {"theory", va.theory},
              {"n_last", c.ns.back()},
              {"measured", va.measured}});
  va.figure = "alpha_star";
  return va;
}

Result run_entropy(const EntropyConfig& c, RunContext& ctx) {
  const Policies policies = policies_of(c);
  const EntropyRows rows = measure_rows(c, policies, ctx);
  const AlphaStar alpha = measure_alpha_star(c, ctx);

  Result result;
  result.tables = {rows.table, alpha.table};
  const Words words("entropy");
  result.notes.push_back(words("note", {{"legend", util::policy_legend(policies.list)}}));
  result.figures = {figure_entropy(c, policies, rows, words), figure_alpha_star(c, alpha, words)};
  result.verdicts = {verdict_c12(c, policies, rows, words), verdict_alpha_star(c, alpha, words)};
  return result;
}

}  // namespace

Experiment entropy_experiment() {
  return make_experiment<EntropyConfig>("entropy", "Attention entropy against n under 1/√d and log n-aware scales; the α* maximising the gradient",
    {"C12"}, run_entropy, {{"ns", "16,128,1024,4096"}, {"queries", "16"}, {"alpha_samples", "16384"}});
}

}  // namespace attnlab::lab
