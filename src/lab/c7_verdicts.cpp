#include "lab/c7_verdicts.hpp"

#include <algorithm>
#include <cmath>

#include "lab/claims_data.hpp"
#include "lab/lab_util.hpp"

namespace attnlab::lab {
namespace {

// "16: 2.5, 32: 2.4, …"
std::string ratio_list(const TypicalRowRatios& c, const std::vector<double>& ratio, const Words& words) {
  std::string s;
  for (size_t i = 0; i < ratio.size(); ++i)
    s += (i ? ", " : "") + words("c7.ratio_item", {{"d_k", c.dims[i]}, {"ratio", ratio[i]}});
  return s;
}

// One quantity's verdict: its outcome at each d_k, by range, and overall.
Verdict ratio_verdict(const TypicalRowRatios& c, const std::vector<double>& ratio, const Words& words) {
  const double limit = claim_threshold("C7", "ratio");
  Verdict v = make_verdict("C7");
  v.theory = limit;
  v.tolerance = limit;
  words.fill(v, "c7.ratio");
  v.range_variable = "d_k";
  for (size_t i = 0; i < c.dims.size(); ++i) {
    const Outcome o = ratio[i] < limit ? Outcome::confirmed : Outcome::refuted;
    const std::string text = words(ratio[i] < limit ? "c7.range_smaller" : "c7.range_larger",
                                   {{"d_k", c.dims[i]}, {"ratio", util::pretty(ratio[i])}});
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
std::string where_smaller(const TypicalRowRatios& c, const Verdict& v, const Words& words) {
  if (v.outcome == Outcome::confirmed)
    return words("c7.where_every", {{"d_first", c.dims.front()}, {"d_last", c.dims.back()}});
  if (v.outcome == Outcome::refuted) return words("c7.where_none", {{"d_last", c.dims.back()}});
  const auto& last = v.ranges.back();
  return last.outcome == Outcome::confirmed ? words("c7.where_from", {{"from", last.from}})
                                            : words("c7.where_up_to", {{"to", v.ranges[v.ranges.size() - 2].to}});
}

}  // namespace

std::vector<Verdict> c7_verdicts(const TypicalRowRatios& c, const Words& words) {
  const std::vector<double>* curves[3] = {&c.jacobian, &c.query, &c.key};
  std::vector<Verdict> out;
  for (const auto* q : curves) out.push_back(ratio_verdict(c, *q, words));
  Verdict& j = out[0];
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < c.dims.size(); ++i)
    if (c.dims[i] >= c.model_lo && c.dims[i] <= c.model_hi)
      lo = std::min(lo, c.jacobian[i]), hi = std::max(hi, c.jacobian[i]);
  const std::string at_model =
      std::isfinite(lo)
          ? words("c7.at_model", {{"lo", c.model_lo}, {"hi", c.model_hi}, {"ratio_lo", lo}, {"ratio_hi", hi}})
          : std::string();
  words.fill(j, "c7",
             {{"base", c.base},
              {"remedy", c.remedy},
              {"jacobian", ratio_list(c, c.jacobian, words)},
              {"query", ratio_list(c, c.query, words)},
              {"key", ratio_list(c, c.key, words)},
              {"total", ratio_list(c, c.total_query, words)},
              {"limit", claim_threshold("C7", "ratio")},
              {"where_jacobian", where_smaller(c, j, words)},
              {"at_model", at_model},
              {"where_query", where_smaller(c, out[1], words)},
              {"where_key", where_smaller(c, out[2], words)}});
  for (size_t k = 1; k < 3; ++k) {
    Verdict& v = out[k];
    const std::string prefix = k == 1 ? "c7.query" : "c7.key";
    v.check = k == 1 ? "query_gradient" : "key_gradient";
    v.title = words(prefix + ".title");
    v.statement = words(prefix + ".statement");
    const WordArgs args{{"ratios", ratio_list(c, *curves[k], words)}, {"where", where_smaller(c, v, words)}};
    words.fill(v, "c7.gradient", args);
    words.fill(v, prefix, args);
  }
  return out;
}

}  // namespace attnlab::lab
