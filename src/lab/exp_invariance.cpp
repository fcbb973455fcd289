// Experiment `invariance` (C14): Su Jianlin's entropy-invariant scale log₅₁₂(n)/√d
// (kexue.fm 8823), tested where its derivation's assumption holds and where it does not.
//
// The derivation (in its short form, kexue.fm 9034): for p = softmax(λs),
//     H = ln n + ln((1/n) Σ e^{λ s_i}) − λ Σ p_i s_i ≈ ln n − λ (s_max − s̄),
// using two approximations: the mean of e^{λs} by e^{λ s̄} (mean field), and — the one this
// experiment varies — Σ p_i s_i ≈ s_max: the softmax puts its weight on the largest score.
// Then λ ∝ ln n cancels ln n, and log₅₁₂ fixes the constant so that the scale is 1/√d at
// n = 512 (a model tuned at that length). When the weight is spread over many keys (random
// q, k: no key stands out), Σ p_i s_i is far below s_max and nothing cancels.
//
// Inputs: q = β·k_t + N(0, I) against n random keys (lab/row_stats.hpp) for a range of β:
// β = 0 is the random input, larger β puts more of the row's weight on one key. How well the
// assumption holds is measured by the mean largest weight at n = 512, where both scales are
// equal. Per β: the entropy's rise from the smallest n to the largest, under log₅₁₂(n)/√d
// against 1/√d. Theory (dashed): the mean-field two-population entropy
// (util::planted_theory, lab/row_stats.hpp), drawn where it applies.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/scale.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/row_stats.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct InvarianceConfig {
  std::vector<int64_t> ns{16, 64, 256, 512, 1024, 4096, 16384};
  std::vector<double> betas{0, 0.25, 0.5, 0.75, 1, 1.125, 1.25, 1.375, 1.5};
  int64_t d_k = 64;
  int64_t queries = 64;
  std::string candidate = "entropy_invariant";
  int64_t anchor_n = 512;            // where log₅₁₂(n) = 1: both scales equal; the assumption is measured here
  double concentrated = 0.7;         // the assumption holds: mean largest weight at the anchor ≥ this
  double spread = 0.2;               // the assumption fails: mean largest weight at the anchor < this
  double constant_fraction = 0.25;   // "near constant": rise below this fraction of 1/√d's
  double saturation_limit = 0.95;    // a row whose mean largest weight exceeds this at some n is saturated: not counted
  void bind(Params& p) {
    using namespace rules;
    p.add("ns", ns, "numbers of keys n (must include anchor_n)", at_least_items(2) & each(at_least(2)) & increasing());
    p.add("betas", betas, "β of the inputs q = β·k_t + N(0, I); β = 0 is the random input", each(at_least(0)));
    p.add("d_k", d_k, "head dim", positive());
    p.add("queries", queries, "query rows per (β, n)", positive());
    p.add("candidate", candidate, "the log n-aware scale under test (ScalePolicy::parse name)", util::scale_policy_rule());
    p.add("anchor_n", anchor_n, "n where the assumption is measured (512: log₅₁₂(n) = 1, both scales equal)");
    p.add("concentrated", concentrated, "the assumption holds where the mean largest weight at anchor_n is at least this");
    p.add("spread", spread, "the assumption fails where the mean largest weight at anchor_n is below this");
    p.add("constant_fraction", constant_fraction, "near constant: the entropy's rise is below this fraction of 1/√d's", positive());
    p.add("saturation_limit", saturation_limit, "rows whose mean largest weight exceeds this at some n are saturated and not counted");
    p.check({"anchor_n", "ns"}, "anchor_n is one of ns",
            [this] { return std::find(ns.begin(), ns.end(), anchor_n) != ns.end(); });
    p.check({"concentrated", "spread"}, "0 < spread < concentrated < 1",
            [this] { return spread > 0 && spread < concentrated && concentrated < 1; });
    p.check({"saturation_limit", "concentrated"}, "concentrated < saturation_limit ≤ 1",
            [this] { return saturation_limit > concentrated && saturation_limit <= 1; });
  }
};

struct PerBeta {
  double anchor_max_prob = 0;   // mean largest weight at anchor_n (equal under both scales)
  double rise_base = 0, rise_candidate = 0, ratio = 0;
  double most_concentrated = 0;  // largest mean largest weight under the candidate, over n
  enum class Kind { concentrated, spread, between } kind = Kind::between;
  bool saturated = false, flat = false;
};

struct Measured {
  Table rows{"invariance", {"beta", "policy", "n", "scale", "mean_entropy", "mean_max_prob", "theory_entropy"}};
  Table summary{"invariance_summary", {"beta", "anchor_max_prob", "rise_inv_sqrt_d", "rise_candidate", "ratio",
                                       "candidate_max_max_prob", "assumption"}};
  std::vector<std::vector<std::vector<util::RowStats>>> stats;  // [β][policy: 0 1/√d, 1 candidate][n]
  std::vector<std::vector<std::vector<double>>> theory;
  std::vector<PerBeta> per_beta;
};

Measured measure(const InvarianceConfig& c, const ScalePolicy& candidate, RunContext& ctx) {
  const std::vector<ScalePolicy> policies{ScalePolicy::inv_sqrt_d(), candidate};
  const size_t nb = c.betas.size(), nn = c.ns.size();
  Measured m;
  m.stats.assign(nb, std::vector<std::vector<util::RowStats>>(2, std::vector<util::RowStats>(nn)));
  m.theory.assign(nb, std::vector<std::vector<double>>(2, std::vector<double>(nn, NAN)));
  ctx.report(fmt::format("{} values of β × n = {}..{}, d_k = {}", nb, c.ns.front(), c.ns.back(), c.d_k));
  util::parallel_for(static_cast<int64_t>(nb * nn), ctx.threads, [&](int64_t cell) {
    const size_t bi = static_cast<size_t>(cell) / nn, ni = static_cast<size_t>(cell) % nn;
    const int64_t n = c.ns[ni];
    for (size_t pi = 0; pi < 2; ++pi) {
      // Same stream for both policies (paired); β = 0 draws no planted signal.
      m.stats[bi][pi][ni] = util::row_stats(policies[pi], {c.betas[bi] > 0, c.betas[bi], n, c.d_k, c.queries}, ctx.seed,
                                            fmt::format("invariance/{}/{}", c.betas[bi], n));
      m.theory[bi][pi][ni] = util::planted_theory(policies[pi](c.d_k, n), c.betas[bi], static_cast<double>(c.d_k),
                                                  static_cast<double>(n)).entropy;
    }
  });
  const size_t anchor = static_cast<size_t>(std::find(c.ns.begin(), c.ns.end(), c.anchor_n) - c.ns.begin());
  for (size_t bi = 0; bi < nb; ++bi) {
    PerBeta b;
    const auto& base = m.stats[bi][0];
    const auto& cand = m.stats[bi][1];
    b.anchor_max_prob = base[anchor].max_prob;
    b.rise_base = base.back().entropy - base.front().entropy;
    b.rise_candidate = cand.back().entropy - cand.front().entropy;
    b.ratio = b.rise_base != 0 ? b.rise_candidate / b.rise_base : NAN;
    for (const auto& s : cand) b.most_concentrated = std::max(b.most_concentrated, s.max_prob);
    b.kind = b.anchor_max_prob >= c.concentrated ? PerBeta::Kind::concentrated
             : b.anchor_max_prob < c.spread      ? PerBeta::Kind::spread
                                                 : PerBeta::Kind::between;
    b.saturated = b.most_concentrated > c.saturation_limit;
    b.flat = std::abs(b.ratio) < c.constant_fraction;
    m.per_beta.push_back(b);
    m.summary.add_row({c.betas[bi], b.anchor_max_prob, b.rise_base, b.rise_candidate, b.ratio, b.most_concentrated,
                       static_cast<double>(b.kind == PerBeta::Kind::concentrated ? 1 : b.kind == PerBeta::Kind::spread ? 0 : 0.5)});
    for (size_t pi = 0; pi < 2; ++pi)
      for (size_t ni = 0; ni < nn; ++ni)
        m.rows.add_row({c.betas[bi], static_cast<double>(pi), static_cast<double>(c.ns[ni]), policies[pi](c.d_k, c.ns[ni]),
                        m.stats[bi][pi][ni].entropy, m.stats[bi][pi][ni].max_prob, m.theory[bi][pi][ni]});
  }
  return m;
}

// The β shown in the top panel beside the random input, and the verdict's main case: the
// most concentrated input that is not saturated (where the derivation's assumption holds
// best), else the last.
size_t shown_beta(const Measured& m) {
  size_t best = m.per_beta.size();
  for (size_t i = 0; i < m.per_beta.size(); ++i)
    if (!m.per_beta[i].saturated && (best == m.per_beta.size() || m.per_beta[i].anchor_max_prob > m.per_beta[best].anchor_max_prob))
      best = i;
  return best == m.per_beta.size() ? m.per_beta.size() - 1 : best;
}

// Appends one item to a list sentence, after the separator unless it is the first.
void append(std::string& list, const std::string& item, const std::string& separator) {
  list += (list.empty() ? std::string() : separator) + item;
}

Figure figure_invariance(const InvarianceConfig& c, const ScalePolicy& candidate, const Measured& m,
                         const Words& words) {
  const auto xs = util::to_double(c.ns);
  const size_t shown = shown_beta(m);
  Figure f;
  f.name = "entropy_invariance";
  words.fill(f, "figure",
             {{"d_k", c.d_k},
              {"candidate", util::policy_label(candidate)},
              {"beta", c.betas[shown]},
              {"n_first", c.ns.front()},
              {"n_last", c.ns.back()},
              {"anchor_n", c.anchor_n},
              {"constant_fraction", c.constant_fraction}});
  Panel pe = util::panel(words("figure.panel_entropy"), "n (keys)", "entropy (nats)", true, false);
  const std::vector<ScalePolicy> policies{ScalePolicy::inv_sqrt_d(), candidate};
  std::vector<Series> theory;
  for (size_t bi : {size_t{0}, shown}) {
    for (size_t pi = 0; pi < 2; ++pi) {
      std::vector<double> e;
      for (const auto& s : m.stats[bi][pi]) e.push_back(s.entropy);
      const std::string col = util::policy_colour(policies[pi]);
      pe.series.push_back(util::series(fmt::format("{}, β = {:g}", pi == 0 ? "1/√d_k" : util::policy_label(candidate), c.betas[bi]),
                                       bi == 0 ? Style::lines : Style::linespoints, xs, e, col));
      theory.push_back(util::series("", Style::theory, xs, m.theory[bi][pi], col));
    }
    if (bi == shown) break;  // shown may be 0 when no β concentrates the rows
  }
  pe.series.insert(pe.series.end(), theory.begin(), theory.end());
  pe.legend_position = "below";
  pe.y_min = 0;
  pe.y_max = 1.4 * std::log(static_cast<double>(c.ns.back()));  // room for the legend above the curves
  Panel pr = util::panel(words("figure.panel_rise", {{"candidate", util::policy_label(candidate)}}),
                         words("figure.rise_x", {{"anchor_n", c.anchor_n}}), "ratio of entropy rises");
  std::vector<double> x, y;
  for (const auto& b : m.per_beta) x.push_back(b.anchor_max_prob), y.push_back(b.ratio);
  pr.series.push_back(util::series("one β each", Style::linespoints, x, y, util::policy_colour(candidate)));
  pr.series.push_back(util::series("near constant", Style::theory, {0, 1}, {c.constant_fraction, c.constant_fraction}, "#000000"));
  pr.x_min = 0;
  pr.x_max = 1;
  pr.y_min = std::min(0.0, *std::min_element(y.begin(), y.end()) - 0.05);
  pr.legend_position = "below";
  f.panels = {pe, pr};
  util::stack_panels(f);
  return f;
}

Verdict verdict_c14(const InvarianceConfig& c, const ScalePolicy& candidate, const Measured& m, const Words& words) {
  int concentrated = 0, held = 0, spread = 0, spread_flat = 0, saturated = 0;
  std::string cases, missed;  // missed: concentrated, unsaturated inputs that are not near constant
  for (size_t bi = 0; bi < m.per_beta.size(); ++bi) {
    const PerBeta& b = m.per_beta[bi];
    const char* kind = b.kind == PerBeta::Kind::concentrated ? "kind.concentrated"
                       : b.kind == PerBeta::Kind::spread     ? "kind.spread"
                                                             : "kind.between";
    append(cases,
           words("c14.case",
                 {{"beta", c.betas[bi]},
                  {"kind", words(kind)},
                  {"anchor_max_prob", b.anchor_max_prob},
                  {"anchor_n", c.anchor_n},
                  {"rise_candidate", b.rise_candidate},
                  {"rise_base", b.rise_base},
                  {"ratio", b.ratio},
                  {"saturated",
                   b.saturated ? words("c14.case_saturated", {{"most_concentrated", b.most_concentrated}}) : ""}}),
           words("list_semicolon"));
    if (b.saturated) {
      ++saturated;
      continue;
    }
    if (b.kind == PerBeta::Kind::concentrated) ++concentrated, held += b.flat;
    if (b.kind == PerBeta::Kind::concentrated && !b.flat)
      append(missed, words("c14.missed", {{"anchor_max_prob", b.anchor_max_prob}, {"percent", 100 * b.ratio}}),
             words("list_comma"));
    if (b.kind == PerBeta::Kind::spread) ++spread, spread_flat += b.flat;
  }
  Verdict v = make_verdict("C14");
  v.check = "assumption";
  v.title = words("c14.title");
  v.statement = words("c14.statement");
  v.theory = c.constant_fraction;
  v.measured = concentrated ? static_cast<double>(held) / concentrated : NAN;
  v.tolerance = c.constant_fraction;
  const PerBeta& best = m.per_beta[shown_beta(m)];
  const bool best_holds = !best.saturated && best.kind == PerBeta::Kind::concentrated && best.flat;
  if (best_holds && spread > 0 && spread_flat == 0)
    v.outcome = Outcome::confirmed;
  else if (held == 0)
    v.outcome = Outcome::refuted;
  else
    v.outcome = Outcome::inconclusive;
  v.figure = "entropy_invariance";
  const PerBeta& random = m.per_beta.front();
  const size_t shown = shown_beta(m);
  const PerBeta& focus = m.per_beta[shown];
  words.fill(v, "c14",
             {{"candidate", util::policy_label(candidate)},
              {"n_first", c.ns.front()},
              {"n_last", c.ns.back()},
              {"d_k", c.d_k},
              {"cases", cases},
              {"anchor_n", c.anchor_n},
              {"concentrated", c.concentrated},
              {"spread", c.spread},
              {"saturation_limit", c.saturation_limit},
              {"constant_fraction", c.constant_fraction},
              {"random_max_prob", random.anchor_max_prob},
              {"random_percent", 100 * random.ratio},
              {"random_rise_candidate", random.rise_candidate},
              {"random_rise_base", random.rise_base},
              {"focus_beta", c.betas[shown]},
              {"focus_max_prob", focus.anchor_max_prob},
              {"focus_percent", 100 * focus.ratio},
              {"focus_rise_candidate", focus.rise_candidate},
              {"focus_rise_base", focus.rise_base},
              {"focus_reading", words(focus.flat ? "c14.focus_flat" : "c14.focus_not_flat")},
              {"held", held},
              {"concentrated_count", concentrated},
              {"missed", missed.empty() ? "" : words("c14.missed_list", {{"missed", missed}})},
              {"spread_flat", spread_flat},
              {"spread_count", spread},
              {"saturated", saturated ? words(saturated == 1 ? "c14.saturated_one" : "c14.saturated_many",
                                              {{"saturated", saturated}})
                                      : ""}});
  return v;
}

// The claim itself: with log₅₁₂(n)/√d a row's entropy stays near constant as n grows, judged on every
// unsaturated input, in order of how concentrated its weight is (the largest weight at anchor_n):
// confirmed when every one is near constant, refuted when none is, inconclusive ("depends on the
// input") otherwise, with the outcome over each range of concentration.
Verdict verdict_claim(const InvarianceConfig& c, const ScalePolicy& candidate, const Measured& m, const Words& words) {
  std::vector<size_t> order;
  for (size_t bi = 0; bi < m.per_beta.size(); ++bi)
    if (!m.per_beta[bi].saturated) order.push_back(bi);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return m.per_beta[a].anchor_max_prob < m.per_beta[b].anchor_max_prob; });
  Verdict v = make_verdict("C14");
  v.theory = c.constant_fraction;
  v.tolerance = c.constant_fraction;
  v.range_variable = words("claim.range_variable", {{"anchor_n", c.anchor_n}});
  int flat = 0;
  double worst = 0;
  for (size_t bi : order) {
    const PerBeta& b = m.per_beta[bi];
    flat += b.flat;
    worst = std::max(worst, b.ratio);
    const Outcome o = util::outcome_of(b.flat);
    const std::string text = words("claim.range", {{"beta", c.betas[bi]},
                                                   {"anchor_max_prob", b.anchor_max_prob},
                                                   {"rise_candidate", b.rise_candidate},
                                                   {"rise_base", b.rise_base},
                                                   {"percent", 100 * b.ratio}});
    if (!v.ranges.empty() && v.ranges.back().outcome == o)
      v.ranges.back().to = b.anchor_max_prob, append(v.ranges.back().text, text, words("list_semicolon"));
    else
      v.ranges.push_back({b.anchor_max_prob, b.anchor_max_prob, o, text});
  }
  const int counted = static_cast<int>(order.size());
  v.measured = worst;
  v.outcome = counted == 0 ? Outcome::inconclusive : flat == counted ? Outcome::confirmed : flat == 0 ? Outcome::refuted
                                                                                                  : Outcome::inconclusive;
  v.figure = "entropy_invariance";
  std::string where;
  if (v.outcome == Outcome::inconclusive && v.ranges.size() >= 2)
    where = v.ranges.back().outcome == Outcome::confirmed
                ? words("claim.where_concentrated", {{"from", v.ranges.back().from}, {"anchor_n", c.anchor_n}})
                : words("claim.where_unrelated");
  words.fill(v, "claim",
             {{"n_first", c.ns.front()},
              {"n_last", c.ns.back()},
              {"candidate", util::policy_label(candidate)},
              {"constant_fraction", c.constant_fraction},
              {"flat", flat},
              {"counted", counted},
              {"worst", worst},
              {"saturated", m.per_beta.size() - order.size()},
              {"saturation_limit", c.saturation_limit},
              {"where", where}});
  return v;
}

Result run_invariance(const InvarianceConfig& c, RunContext& ctx) {
  const ScalePolicy candidate = ScalePolicy::parse(c.candidate);
  const Measured m = measure(c, candidate, ctx);
  const Words words("invariance");
  Result r;
  r.setup = words("setup", {{"queries", c.queries},
                            {"d_k", c.d_k},
                            {"beta_first", c.betas.front()},
                            {"beta_last", c.betas.back()},
                            {"candidate", util::policy_label(candidate)}});
  r.tables = {m.rows, m.summary};
  r.notes.push_back(words("note", {{"candidate_name", candidate.name()}}));
  r.figures = {figure_invariance(c, candidate, m, words)};
  r.verdicts = {verdict_claim(c, candidate, m, words), verdict_c14(c, candidate, m, words)};
  return r;
}

}  // namespace

Experiment invariance_experiment() {
  return make_experiment<InvarianceConfig>(
      "invariance", "The entropy-invariant scale log₅₁₂(n)/√d (Su 2021) where its derivation's assumption holds and where it does not",
      {"C14"}, run_invariance, {{"ns", "16,512,16384"}, {"betas", "0,0.5,1.25"}, {"queries", "32"}});
}

}  // namespace attnlab::lab
