#include "lab/c7_verdicts.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "lab/claims_data.hpp"
#include "lab/lab_util.hpp"

namespace attnlab::lab {
namespace {

// "16: 2.5, 32: 2.4, …"
std::string ratio_list(const TypicalRowRatios& c, const std::vector<double>& ratio) {
  std::string s;
  for (size_t i = 0; i < ratio.size(); ++i) s += fmt::format("{}{}: {:.2g}", i ? ", " : "", c.dims[i], ratio[i]);
  return s;
}

// One quantity's verdict: its outcome at each d_k, by range, and overall.
Verdict ratio_verdict(const TypicalRowRatios& c, const std::vector<double>& ratio) {
  const double limit = claim_threshold("C7", "ratio");
  Verdict v = make_verdict("C7");
  v.theory = limit;
  v.tolerance = limit;
  v.unit = "ratio without/with the scale at the largest d_k; below 1 is smaller without it";
  v.theory_unit = "ratio without/with the scale that separates smaller from larger";
  v.tolerance_unit = "ratio without/with the scale that separates smaller from larger";
  v.range_variable = "d_k";
  for (size_t i = 0; i < c.dims.size(); ++i) {
    const Outcome o = ratio[i] < limit ? Outcome::confirmed : Outcome::refuted;
    const std::string text =
        fmt::format("d_k {}: {}× {}", c.dims[i], util::pretty(ratio[i]),
                    ratio[i] < limit ? "(smaller without the scale)" : "(larger without the scale)");
    const double x = static_cast<double>(c.dims[i]);
    if (!v.ranges.empty() && v.ranges.back().outcome == o) {
      v.ranges.back().to = x;
      v.ranges.back().text += "; " + text;
    } else {
      v.ranges.push_back({x, x, o, text});
    }
  }
  const bool all_smaller = std::all_of(ratio.begin(), ratio.end(), [&](double r) { return r < limit; });
  const bool all_larger = std::none_of(ratio.begin(), ratio.end(), [&](double r) { return r < limit; });
  v.outcome = all_smaller ? Outcome::confirmed : all_larger ? Outcome::refuted : Outcome::inconclusive;
  v.measured = ratio.back();
  v.figure = c.figure;
  return v;
}

// Where a ratio curve is below 1 in words: "from d_k = 128 on", "nowhere up to 1024", "everywhere".
std::string where_smaller(const TypicalRowRatios& c, const Verdict& v) {
  if (v.outcome == Outcome::confirmed) return fmt::format("at every d_k from {} to {}", c.dims.front(), c.dims.back());
  if (v.outcome == Outcome::refuted) return fmt::format("at no d_k up to {}", c.dims.back());
  const auto& last = v.ranges.back();
  return last.outcome == Outcome::confirmed ? fmt::format("from d_k = {:g} on", last.from)
                                            : fmt::format("only up to d_k = {:g}", v.ranges[v.ranges.size() - 2].to);
}

}  // namespace

std::vector<Verdict> c7_verdicts(const TypicalRowRatios& c) {
  const std::vector<double>* curves[3] = {&c.jacobian, &c.query, &c.key};
  const std::string &base = c.base, &remedy = c.remedy;
  std::string total;
  for (size_t i = 0; i < c.dims.size(); ++i) total += fmt::format("{}{}: {:.2g}", i ? ", " : "", c.dims[i], c.total_query[i]);
  std::vector<Verdict> out;
  for (const auto* q : curves) out.push_back(ratio_verdict(c, *q));
  Verdict& j = out[0];
  j.theory_text = "vanishing: the softmax's Jacobian without the scale is smaller than with it (ratio < 1); explosion "
                  "would be a ratio ≫ 1";
  j.measured_text = fmt::format("ratio {} / {} by d_k of the typical row's ‖J‖_F: {}; of ‖dQ_i‖: {}; of ‖dK_j‖: {}. "
                                "Total ‖dQ‖_F ratio (carried by the few unsaturated rows): {}",
                                base, remedy, ratio_list(c, c.jacobian), ratio_list(c, c.query),
                                ratio_list(c, c.key), total);
  j.method = fmt::format(
      "On the typical row (median over rows) of the softmax Jacobian ‖diag(p) − p pᵀ‖_F, the quantity article 003 "
      "argues about, at every d_k measured: the claim holds there when the ratio without/with the scale is below {0:g} "
      "(the scale prevents vanishing) and does not when it is above {0:g}. Confirmed when it holds at every d_k "
      "measured, refuted when at none, inconclusive (depends on d_k) otherwise; never extrapolated beyond the "
      "range. The gradients reaching a typical query and key are checked beside it, each by the same rule.",
      claim_threshold("C7", "ratio"));
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < c.dims.size(); ++i)
    if (c.dims[i] >= c.model_lo && c.dims[i] <= c.model_hi)
      lo = std::min(lo, c.jacobian[i]), hi = std::max(hi, c.jacobian[i]);
  const std::string at_model =
      std::isfinite(lo) ? fmt::format(" At the head sizes models use (d_k {}–{}) it is {:.2g}–{:.2g}× the scaled one.",
                                      c.model_lo, c.model_hi, lo, hi)
                        : std::string();
  j.plain = fmt::format(
      "Article 003 argues about the softmax's own derivative. Without the scale a typical row's Jacobian ‖J‖_F is smaller "
      "than with it {} (it is never large: ‖J‖_F ≤ 0.5 for any weights, reached at two keys sharing the weight "
      "equally), so what the scale prevents is vanishing, not explosion, wherever the unscaled softmax saturates.{} The "
      "gradients that reach the parameters say something else at model sizes: without the scale they miss the factor "
      "1/√d_k the chain rule would multiply in, so a typical query's gradient is smaller only {} and a key's only {}. "
      "Neither “explosion” nor “vanishing” describes those: the softmax saturates (C6), and that, not the raw size of "
      "the gradient, is what hurts learning (C8).",
      where_smaller(c, j), at_model, where_smaller(c, out[1]), where_smaller(c, out[2]));
  for (size_t k = 1; k < 3; ++k) {
    Verdict& v = out[k];
    v.supplementary = true;
    v.title = k == 1 ? "The gradient reaching a typical query is smaller without the scale"
                     : "The gradient reaching a typical key is smaller without the scale";
    v.statement = fmt::format("The median over rows of {} without the scale is smaller than with 1/√d_k.",
                              k == 1 ? "‖dQ_i‖" : "‖dK_j‖");
    v.theory_text = "ratio without/with the scale < 1";
    v.measured_text = fmt::format("ratio by d_k: {}", ratio_list(c, *curves[k]));
    v.method = "The same rule as the claim's, on this gradient.";
    v.plain = fmt::format("Smaller without the scale {}{}.", where_smaller(c, v),
                          k == 2 ? " (a key collects gradient from every query row, so it falls later than a query's)" : "");
  }
  return out;
}

}  // namespace attnlab::lab
