// The first screen's answer from the language-model study (experiment lm, C8's main
// evidence): for each AdamW initialisation at the largest d_k, the final validation loss with
// and without the scale and what C8's rule made of it, and the figure of their validation
// loss along training. Every number is read from the run's lm_* tables; the words are in
// answer.mustache.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "attnlab/statistics.hpp"
#include "lab/lab_util.hpp"
#include "lab/report/view.hpp"
#include "lab/report_page.hpp"

namespace attnlab::lab::page {
namespace {

// The codes of the lm_* tables (exp_lm.cpp): arm 0 is 1/√d_k, 1 no scale; init 0 gpt2, 1 unit;
// optimizer 0 AdamW; comparison 2 slower, 3 as fast, 0 the baseline failed.
constexpr double kScaled = 0, kUnscaled = 1, kAdamW = 0;
constexpr double kSlower = 2, kAsFast = 3, kBaselineFails = 0;

std::string bpc(double x) { return std::isfinite(x) ? fmt::format("{:.2f}", x) : std::string("diverged"); }

// One row of lm_cells as a map from column to value.
std::map<std::string, double> row(const Table& t, size_t r) {
  std::map<std::string, double> out;
  for (size_t c = 0; c < t.column_names.size(); ++c) out[t.column_names[c]] = t.columns[c][r];
  return out;
}

struct Group {
  double index = 0, init = 0;
};

// Median and range over seeds of the validation loss along training, for one group, d_k and arm.
struct Band {
  std::vector<double> step, median, lo, hi;
};
Band band_of(const Table& curves, const Group& g, double d_k, double arm) {
  std::map<double, std::vector<double>> by_step;
  const auto &group = curves.column("group"), &dk = curves.column("d_k"), &a = curves.column("arm");
  const auto &step = curves.column("step"), &val = curves.column("val_bpc");
  for (size_t r = 0; r < curves.rows(); ++r)
    if (group[r] == g.index && dk[r] == d_k && a[r] == arm && std::isfinite(val[r])) by_step[step[r]].push_back(val[r]);
  Band b;
  for (const auto& [s, v] : by_step) {
    b.step.push_back(s);
    b.median.push_back(stats::median(v));
    b.lo.push_back(*std::min_element(v.begin(), v.end()));
    b.hi.push_back(*std::max_element(v.begin(), v.end()));
  }
  return b;
}

Figure main_figure(const Table& curves, const std::vector<Group>& groups, double d_k, double bigram,
                   const Result& r) {
  Figure f;
  f.name = "main_lm";
  f.width = 440;
  for (const Group& g : groups) {
    Panel p = util::panel(g.init == 0 ? "GPT-2's init" : "unit-variance q, k", "step", "validation bits/char");
    double lowest = bigram - 0.3;  // the axis from just under the lowest loss reached, as lm_figures.cpp
    p.y_max = bigram + 1.5;
    p.legend_position = g.index == groups.front().index ? "top right" : "off";
    for (double arm : {kUnscaled, kScaled}) {
      const Band b = band_of(curves, g, d_k, arm);
      for (double y : b.lo) lowest = std::min(lowest, y - 0.1);
      const ScalePolicy policy = arm == kScaled ? ScalePolicy::inv_sqrt_d() : ScalePolicy::none();
      p.series.push_back(util::band("", b.step, b.lo, b.hi, util::policy_colour(policy)));
      p.series.push_back(util::series(arm == kScaled ? "1/√d_k" : "no scale", Style::lines, b.step, b.median,
                                      util::policy_colour(policy)));
    }
    const double steps = std::stod(r.config.at("steps"));
    p.series.push_back(util::series("bigram", Style::theory, {0, steps}, {bigram, bigram}, "#777777"));
    p.y_min = std::max(0.0, lowest);
    for (double y = std::ceil(*p.y_min * 2) / 2; y <= *p.y_max; y += 0.5) p.y_tics.push_back(y);  // legible at 412 px
    f.panels.push_back(std::move(p));
  }
  f.layout_rows = static_cast<int>(f.panels.size());
  f.layout_cols = 1;
  f.height = 250 * f.layout_rows;
  f.alt = fmt::format(
      "Validation bits per character against the training step of a GPT language model at d_k = {:g}, without the "
      "scale (orange) and with 1/√d_k (blue), median over seeds with the seeds' range as a band, one panel per "
      "initialisation; the dashed line is the bigram baseline, {:.2f}.",
      d_k, bigram);
  return f;
}

}  // namespace

std::optional<nlohmann::json> lm_answer(const std::vector<Result>& results, std::vector<Figure>& figures) {
  const Result* r = find_result(results, "lm");
  const Table* cells = find_table(results, "lm", "lm_cells");
  const Table* curves = find_table(results, "lm", "lm_curves");
  const Table* corpus = find_table(results, "lm", "lm_corpus");
  if (r == nullptr || cells == nullptr || curves == nullptr || corpus == nullptr || cells->rows() == 0) return std::nullopt;
  try {
    const auto& dks = cells->column("d_k");
    const double d_k = *std::max_element(dks.begin(), dks.end());
    const double bigram = corpus->column("bigram_bpc").front();
    nlohmann::json inits = nlohmann::json::array();
    std::vector<Group> groups;
    for (size_t i = 0; i < cells->rows(); ++i) {
      const auto none = row(*cells, i);
      if (none.at("optimizer") != kAdamW || none.at("d_k") != d_k || none.at("arm") != kUnscaled) continue;
      std::map<std::string, double> sqrt;
      for (size_t j = 0; j < cells->rows(); ++j) {
        const auto c = row(*cells, j);
        if (c.at("group") == none.at("group") && c.at("d_k") == d_k && c.at("arm") == kScaled) sqrt = c;
      }
      if (sqrt.empty()) continue;
      groups.push_back({none.at("group"), none.at("init")});
      const double cmp = none.at("comparison");
      inits.push_back({{"gpt2", none.at("init") == 0},
                       {"unscaled", bpc(none.at("median_final_bpc"))},
                       {"unscaled_lo", bpc(none.at("min_final_bpc"))},
                       {"unscaled_hi", bpc(none.at("max_final_bpc"))},
                       {"scaled", bpc(sqrt.at("median_final_bpc"))},
                       {"scaled_lo", bpc(sqrt.at("min_final_bpc"))},
                       {"scaled_hi", bpc(sqrt.at("max_final_bpc"))},
                       {"learnt", fmt::format("{:.0f} of {:.0f}", none.at("learnt"), none.at("runs"))},
                       {"diverged", none.at("diverged") > 0},
                       {"diverged_count", fmt::format("{:.0f}", none.at("diverged"))},
                       {"slower", cmp == kSlower},
                       {"as_fast", cmp == kAsFast},
                       {"baseline_fails", cmp == kBaselineFails},
                       {"between", cmp != kSlower && cmp != kAsFast && cmp != kBaselineFails},
                       {"first", inits.empty()}});
    }
    if (groups.empty()) return std::nullopt;
    const Config& c = r->config;
    nlohmann::json view = {{"d_k", fmt::format("{:g}", d_k)},
                           {"layers", c.at("layers")},
                           {"heads", c.at("heads")},
                           {"d_model", c.at("d_model")},
                           {"context", c.at("context")},
                           {"steps", c.at("steps")},
                           {"batch", c.at("batch")},
                           {"seeds", c.at("seeds")},
                           {"bigram", fmt::format("{:.2f}", bigram)},
                           {"inits", inits}};
    const Figure f = main_figure(*curves, groups, d_k, bigram, *r);
    view["figure"] = figure_view(f, /*lazy=*/false);
    figures.push_back(f);
    return view;
  } catch (const std::exception&) {
    return std::nullopt;  // tables of another layout (an older run): the toy's answer stands alone
  }
}

}  // namespace attnlab::lab::page
