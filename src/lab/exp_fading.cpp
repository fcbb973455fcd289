// Experiment `fading` (C13): attention fading and scalable softmax (Nakanishi 2025,
// arXiv:2501.19399). As the number of keys n grows, softmax's largest output goes to 0
// even for a clearly preferred key; SSMax multiplies the logits by s·ln n and keeps it.
//
// Three inputs, one panel each:
//   exact    the paper's Figure 1: one row of logits, −2 everywhere and one +3, through the
//            double-precision reference (d = 1, q = 1, k_j = the logit), softmax (no scale)
//            against SSMax (the scalable_softmax policy, whose s·ln(n)/√d is s·ln n at d = 1).
//            Closed forms: softmax max = 1/(1 + (n − 1)e^{low − high}),
//                          SSMax  max = 1/(1 + (n − 1)·n^{s(low − high)}).
//   planted  q = β·k_t + N(0, I) against n random keys (lab/row_stats.hpp), 1/√d against
//            SSMax applied to the 1/√d logits. Theory: the mean field with the planted
//            logit's spread (util::planted_theory, lab/row_stats.hpp).
//   random   q, k ~ N(0, I): no key is preferred (shown, not judged: fading is then right).
#include <fmt/format.h>

#include <cmath>

#include "attnlab/attention.hpp"
#include "attnlab/scale.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/row_stats.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct FadingConfig {
  std::vector<int64_t> exact_ns{10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000};
  double low_logit = -2, high_logit = 3;  // the paper's Figure 1
  double ssmax_s = 0.43;                  // the paper's Figure 1
  int64_t headline_n = 10000;             // the paper's number: softmax max ≈ 0.015 here
  std::vector<int64_t> ns{16, 64, 256, 1024, 4096, 16384};
  int64_t d_k = 64;
  int64_t queries = 64;
  double planted_signal = 1.0;            // β in q = β·k_t + noise
  double exact_tolerance = 1e-9;          // relative agreement of the reference with the closed forms
  double fade_factor = 5;                 // "fades": softmax's largest weight falls by more than this factor over the range
  double keep_limit = 0.9;                // "keeps": SSMax's largest weight stays at or above this at every n
  void bind(Params& p) {
    using namespace rules;
    p.add("exact_ns", exact_ns, "numbers of keys n for the paper's Figure 1 (logits low everywhere and one high)", at_least_items(2) & each(at_least(2)) & increasing());
    p.add("low_logit", low_logit, "Figure 1's logit of every key but one");
    p.add("high_logit", high_logit, "Figure 1's logit of the preferred key");
    p.add("ssmax_s", ssmax_s, "SSMax's s: the logits are multiplied by s·ln n (0.43 in the paper's Figure 1)", positive());
    p.add("headline_n", headline_n, "n at which the paper's number is read (softmax max ≈ 0.015 at 10⁴); must be in exact_ns");
    p.add("ns", ns, "numbers of keys n for the random and planted inputs", at_least_items(2) & each(at_least(2)) & increasing());
    p.add("d_k", d_k, "head dim of the random and planted inputs", positive());
    p.add("queries", queries, "query rows per n (statistics are averaged over them)", positive());
    p.add("planted_signal", planted_signal, "β of the planted input q = β·k_t + N(0, I)");
    p.add("exact_tolerance", exact_tolerance, "relative agreement required between the reference and the closed forms", positive());
    p.add("fade_factor", fade_factor, "softmax 'fades' when its largest weight falls by more than this factor from the smallest n to the largest", above(1));
    p.add("keep_limit", keep_limit, "SSMax 'keeps' the preferred key when its largest weight stays at or above this at every n", above(0) & below(1));
    p.check({"headline_n", "exact_ns"}, "headline_n is one of exact_ns",
            [this] { return std::find(exact_ns.begin(), exact_ns.end(), headline_n) != exact_ns.end(); });
    p.check({"high_logit", "low_logit"}, "high_logit > low_logit (one clearly preferred key)",
            [this] { return high_logit > low_logit; });
  }
};

// ---- the paper's Figure 1, exactly ------------------------------------------------

double softmax_max_theory(const FadingConfig& c, double n) {
  return 1 / (1 + (n - 1) * std::exp(c.low_logit - c.high_logit));
}
double ssmax_max_theory(const FadingConfig& c, double n) {
  return 1 / (1 + (n - 1) * std::exp(c.ssmax_s * std::log(n) * (c.low_logit - c.high_logit)));
}

// The largest output of one row of Figure 1's logits under `policy`, through the reference.
double figure1_max(const FadingConfig& c, int64_t n, const ScalePolicy& policy) {
  Tensor<double> q({1, 1, 1, 1}, 1.0), k({1, 1, n, 1}, c.low_logit), v({1, 1, n, 1}, 0.0);  // [B, H, N, d = 1]
  k(0, 0, n / 2, 0) = c.high_logit;  // anywhere: the softmax does not care where
  Tensor<double> out({1, 1, 1, 1}), lse({1, 1, 1, 1}), mp({1, 1, 1, 1});
  RowDiagnostics<double> diag;
  diag.max_prob = mp.view();
  AttentionOptions<double> o;
  o.scale = policy;
  attention_forward(q.view(), k.view(), v.view(), o, {out.view(), lse.view(), diag});
  return mp(0, 0, 0, 0);
}

struct Exact {
  Table table{"fading_exact", {"n", "softmax_max", "softmax_theory", "ssmax_max", "ssmax_theory"}};
  std::vector<double> softmax, ssmax;  // measured, per n
  double worst_error = 0;              // relative, over both curves
  double headline = 0;                 // softmax max at headline_n
};

Exact measure_exact(const FadingConfig& c, RunContext& ctx) {
  ctx.report(fmt::format("Figure 1: logits {:g} and one {:g}, n = {}..{}", c.low_logit, c.high_logit,
                         c.exact_ns.front(), c.exact_ns.back()));
  Exact e;
  for (int64_t n : c.exact_ns) {
    const double nd = static_cast<double>(n);
    const double sm = figure1_max(c, n, ScalePolicy::none());
    const double ss = figure1_max(c, n, ScalePolicy::scalable_softmax(c.ssmax_s));
    const double sm_th = softmax_max_theory(c, nd), ss_th = ssmax_max_theory(c, nd);
    e.softmax.push_back(sm);
    e.ssmax.push_back(ss);
    e.worst_error = std::max({e.worst_error, std::abs(sm / sm_th - 1), std::abs(ss / ss_th - 1)});
    if (n == c.headline_n) e.headline = sm;
    e.table.add_row({nd, sm, sm_th, ss, ss_th});
  }
  return e;
}

// ---- random and planted rows ---------------------------------------------------------

struct Rows {
  Table table{"fading_rows", {"input", "policy", "n", "scale", "mean_max_prob", "mean_entropy", "theory_max_prob"}};
  // [input: 0 random, 1 planted][policy: 0 1/√d, 1 SSMax][n]
  std::vector<std::vector<std::vector<util::RowStats>>> stats;
  std::vector<std::vector<std::vector<double>>> theory;
};

std::vector<ScalePolicy> row_policies(const FadingConfig& c) {
  return {ScalePolicy::inv_sqrt_d(), ScalePolicy::scalable_softmax(c.ssmax_s)};
}

Rows measure_rows(const FadingConfig& c, RunContext& ctx) {
  const auto policies = row_policies(c);
  Rows r;
  r.stats.assign(2, std::vector<std::vector<util::RowStats>>(policies.size(), std::vector<util::RowStats>(c.ns.size())));
  r.theory.assign(2, std::vector<std::vector<double>>(policies.size(), std::vector<double>(c.ns.size(), NAN)));
  ctx.report(fmt::format("random and planted rows, n = {}..{}, d_k = {}", c.ns.front(), c.ns.back(), c.d_k));
  // One index per (input, n): each writes its own slots; the same inputs for both policies.
  const int64_t cells = 2 * static_cast<int64_t>(c.ns.size());
  util::parallel_for(cells, ctx.threads, [&](int64_t cell) {
    const size_t input = static_cast<size_t>(cell) / c.ns.size(), ni = static_cast<size_t>(cell) % c.ns.size();
    const int64_t n = c.ns[ni];
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      r.stats[input][pi][ni] = util::row_stats(policies[pi], {input == 1, c.planted_signal, n, c.d_k, c.queries}, ctx.seed,
                                               fmt::format("fading/{}/{}", input, n));
      if (input == 1)
        r.theory[input][pi][ni] = util::planted_theory(policies[pi](c.d_k, n), c.planted_signal,
                                                       static_cast<double>(c.d_k), static_cast<double>(n)).max_prob;
    }
  });
  for (size_t input = 0; input < 2; ++input)
    for (size_t pi = 0; pi < policies.size(); ++pi)
      for (size_t ni = 0; ni < c.ns.size(); ++ni)
        r.table.add_row({static_cast<double>(input), static_cast<double>(pi), static_cast<double>(c.ns[ni]),
                         policies[pi](c.d_k, c.ns[ni]), r.stats[input][pi][ni].max_prob, r.stats[input][pi][ni].entropy,
                         r.theory[input][pi][ni]});
  return r;
}

std::vector<double> max_probs(const Rows& r, size_t input, size_t policy) {
  std::vector<double> out;
  for (const auto& s : r.stats[input][policy]) out.push_back(s.max_prob);
  return out;
}

// ---- figure --------------------------------------------------------------------------

Figure figure_fading(const FadingConfig& c, const Exact& e, const Rows& r, const Words& words) {
  const auto policies = row_policies(c);
  Figure f;
  f.name = "fading";
  words.fill(f, "figure",
             {{"low", c.low_logit},
              {"high", c.high_logit},
              {"exponent", c.low_logit - c.high_logit},
              {"s", c.ssmax_s},
              {"beta", c.planted_signal},
              {"d_k", c.d_k}});
  const std::string ssmax_colour = util::policy_colour(policies[1]);
  Panel p1 = util::panel(words("figure.panel_exact"), "n (keys)", "largest weight", true, false);
  const auto xe = util::to_double(c.exact_ns);
  p1.series.push_back(util::series("softmax", Style::points, xe, e.softmax, util::policy_colour(ScalePolicy::none())));
  p1.series.push_back(util::series("SSMax", Style::points, xe, e.ssmax, ssmax_colour));
  p1.series.push_back(util::series("", Style::theory, xe, e.table.column("softmax_theory"), util::policy_colour(ScalePolicy::none())));
  p1.series.push_back(util::series("", Style::theory, xe, e.table.column("ssmax_theory"), ssmax_colour));
  p1.legend_position = "below";
  const auto xs = util::to_double(c.ns);
  for (size_t input : {1, 0}) {
    Panel p =
        util::panel(input ? words("figure.panel_planted", {{"beta", c.planted_signal}}) : words("figure.panel_random"),
                    "n (keys)", "largest weight", true, false);
    std::vector<Series> theory;
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      const std::string col = util::policy_colour(policies[pi]);
      p.series.push_back(util::series(pi == 0 ? "1/√d_k" : "SSMax", Style::linespoints, xs, max_probs(r, input, pi), col));
      if (input == 1) theory.push_back(util::series("", Style::theory, xs, r.theory[input][pi], col));
    }
    p.series.insert(p.series.end(), theory.begin(), theory.end());
    p.legend_position = "below";
    f.panels.push_back(p);
  }
  for (auto& p : f.panels) p.y_min = 0, p.y_max = 1.05;
  p1.y_min = 0, p1.y_max = 1.05;
  f.panels.insert(f.panels.begin(), p1);
  util::stack_panels(f);
  return f;
}

// ---- verdict -------------------------------------------------------------------------

Verdict verdict_c13(const FadingConfig& c, const Exact& e, const Rows& r, const Words& words) {
  const auto planted_sm = max_probs(r, 1, 0), planted_ss = max_probs(r, 1, 1);
  const auto random_sm = max_probs(r, 0, 0), random_ss = max_probs(r, 0, 1);
  const bool exact_ok = e.worst_error <= c.exact_tolerance;
  const bool fades_exact = e.softmax.front() / e.softmax.back() > c.fade_factor;
  const bool fades_planted = planted_sm.front() / planted_sm.back() > c.fade_factor;
  const double ss_exact_min = *std::min_element(e.ssmax.begin(), e.ssmax.end());
  const double ss_planted_min = *std::min_element(planted_ss.begin(), planted_ss.end());
  const double ss_planted_max = *std::max_element(planted_ss.begin(), planted_ss.end());
  const bool keeps = ss_exact_min >= c.keep_limit && ss_planted_min >= c.keep_limit;
  Verdict v = make_verdict("C13");
  v.theory = softmax_max_theory(c, static_cast<double>(c.headline_n));
  v.measured = e.headline;
  v.tolerance = c.exact_tolerance;
  if (!(fades_exact && fades_planted) || !keeps)
    v.outcome = Outcome::refuted;
  else
    v.outcome = exact_ok ? Outcome::confirmed : Outcome::inconclusive;
  v.figure = "fading";
  words.fill(v, "c13",
             {{"exponent", c.low_logit - c.high_logit},
              {"ssmax_exponent", c.ssmax_s * (c.low_logit - c.high_logit)},
              {"theory", v.theory},
              {"headline", e.headline},
              {"headline_n", c.headline_n},
              {"s", c.ssmax_s},
              {"exact_fall", e.softmax.front() / e.softmax.back()},
              {"exact_first", c.exact_ns.front()},
              {"exact_last", c.exact_ns.back()},
              {"ss_exact_min", ss_exact_min},
              {"worst_error", e.worst_error},
              {"beta", c.planted_signal},
              {"d_k", c.d_k},
              {"planted_sm_first", planted_sm.front()},
              {"planted_sm_last", planted_sm.back()},
              {"n_first", c.ns.front()},
              {"n_last", c.ns.back()},
              {"ss_planted_min", ss_planted_min},
              {"random_sm_first", random_sm.front()},
              {"random_sm_last", random_sm.back()},
              {"random_ss_first", random_ss.front()},
              {"random_ss_last", random_ss.back()},
              {"exact_tolerance", c.exact_tolerance},
              {"fade_factor", c.fade_factor},
              {"keep_limit", c.keep_limit},
              {"exact_kept", ss_exact_min >= 0.999 ? words("c13.kept_over")
                                                   : words("c13.kept_at_least", {{"ss_exact_min", ss_exact_min}})},
              {"one_hot", ss_planted_max > 0.99 ? words("c13.one_hot", {{"ss_planted_max", ss_planted_max}}) : ""},
              {"random_reading",
               words(random_ss.back() > 2 * random_ss.front() ? "c13.random_concentrates" : "c13.random_offsets")}});
  return v;
}

Result run_fading(const FadingConfig& c, RunContext& ctx) {
  const Exact exact = measure_exact(c, ctx);
  const Rows rows = measure_rows(c, ctx);
  const Words words("fading");
  Result result;
  result.setup = words("setup", {{"s", c.ssmax_s}, {"queries", c.queries}, {"d_k", c.d_k}});
  result.tables = {exact.table, rows.table};
  result.notes.push_back(words("note"));
  result.figures = {figure_fading(c, exact, rows, words)};
  result.verdicts = {verdict_c13(c, exact, rows, words)};
  return result;
}

}  // namespace

Experiment fading_experiment() {
  return make_experiment<FadingConfig>(
      "fading", "Attention fading as n grows, and scalable softmax (Nakanishi 2025): the paper's Figure 1, then random and planted rows",
      {"C13"}, run_fading, {{"ns", "16,1024,16384"}, {"queries", "16"}});
}

}  // namespace attnlab::lab
