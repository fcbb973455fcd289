#include "lab/train_full.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "lab/lab_util.hpp"
#include "lab/train_figures.hpp"

extern "C" {
extern const char attnlab_train_full_begin[], attnlab_train_full_end[];
}

namespace attnlab::lab::train_full {
namespace {

using train::CellSummary;
using train::InitMode;
using train::OptimizerKind;
using train::Scaling;

// The full sweep's budget (docs/training.md, "Full sweep"): the CSV holds the cells, not the run's settings.
constexpr int64_t kSteps = 800;
constexpr double kThreshold = 0.9;

// The CSV's scale codes (exp_train.cpp): 0 none, 1 1/√d_k, 2 1/d_k, 3 qk-norm.
Scaling scaling_of(int code) {
  switch (code) {
    case 0: return ScalePolicy::none();
    case 1: return ScalePolicy::inv_sqrt_d();
    case 2: return ScalePolicy::inv_d();
    case 3: return Scaling::qk_norm_temperature();
  }
  throw Error(fmt::format("docs/training/full_cells.csv: unknown scale code {}", code));
}

std::vector<CellSummary> parse() {
  std::istringstream in(std::string(attnlab_train_full_begin, attnlab_train_full_end));
  std::string line;
  std::getline(in, line);  // the header
  std::vector<CellSummary> out;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<double> v;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) v.push_back(std::stod(f));
    if (v.size() < 21) throw Error("docs/training/full_cells.csv: a row of " + std::to_string(v.size()) + " fields, 21 expected");
    CellSummary c;
    c.task = train::TaskKind::associative_recall;
    c.init = static_cast<InitMode>(static_cast<int>(v[1]));
    c.optimizer = v[2] == 0 ? OptimizerKind::adam : OptimizerKind::sgd;
    c.d_k = static_cast<int64_t>(v[3]);
    c.scale = scaling_of(static_cast<int>(v[4]));
    c.lr = v[5];
    c.runs = static_cast<int64_t>(v[6]);
    c.reached = static_cast<int64_t>(v[7]);
    c.median_steps = v[8];
    c.median_censored = v[9] != 0;
    c.mean_final_accuracy = v[10];
    c.min_final_accuracy = v[11];
    c.mean_max_prob_start = v[16];
    out.push_back(c);
  }
  return out;
}

const CellSummary* find(const std::vector<CellSummary>& cells, InitMode init, OptimizerKind opt, int64_t d_k,
                        const Scaling& scale) {
  for (const auto& c : cells)
    if (c.init == init && c.optimizer == opt && c.d_k == d_k && c.scale == scale) return &c;
  return nullptr;
}

std::vector<int64_t> dims_of(const std::vector<CellSummary>& cells) {
  std::vector<int64_t> d;
  for (const auto& c : cells)
    if (std::find(d.begin(), d.end(), c.d_k) == d.end()) d.push_back(c.d_k);
  std::sort(d.begin(), d.end());
  return d;
}

const char* optimizer_key(OptimizerKind o) { return o == OptimizerKind::adam ? "optimizer.adam" : "optimizer.sgd"; }

}  // namespace

const std::vector<CellSummary>& cells() {
  static const std::vector<CellSummary> parsed = parse();
  return parsed;
}

std::vector<Figure> figures(const Words& words) {
  const auto& all = cells();
  const auto dims = dims_of(all);
  const auto xs = util::to_double(dims);
  const Scaling scales[] = {ScalePolicy::none(), ScalePolicy::inv_sqrt_d(), ScalePolicy::inv_d(),
                            Scaling::qk_norm_temperature()};
  std::vector<Figure> out;
  for (InitMode init : {InitMode::unit, InitMode::small}) {
    Figure f;
    f.name = fmt::format("train_full_{}", train::to_string(init));
    words.fill(f, "full", {{"init", train::to_string(init)}, {"steps", kSteps}, {"percent", 100 * kThreshold}});
    for (OptimizerKind opt : {OptimizerKind::adam, OptimizerKind::sgd}) {
      Panel p = util::panel(words("full.panel", {{"optimizer", words(optimizer_key(opt))}, {"steps", kSteps}}), "d_k",
                            "seeds reaching 90 %", true, false);
      int64_t runs = 0;
      for (const auto& sc : scales) {
        std::vector<double> y;
        for (int64_t d : dims) {
          const CellSummary* c = find(all, init, opt, d, sc);
          y.push_back(c ? static_cast<double>(c->reached) : NAN);
          if (c) runs = std::max(runs, c->runs);
        }
        p.series.push_back(util::series(train_figures::policy_label(sc), Style::linespoints, xs, y,
                                        train_figures::policy_colour(sc)));
      }
      p.x_tics = xs;
      p.y_min = -0.2;
      p.y_max = static_cast<double>(runs) + 0.2;
      p.legend_position = opt == OptimizerKind::adam ? "below" : "off";  // one legend for the two panels
      f.panels.push_back(std::move(p));
    }
    util::stack_panels(f);
    out.push_back(std::move(f));
  }
  return out;
}

Verdict verdict(const std::vector<CellSummary>& live, const Words& words) {
  const auto& all = cells();
  const auto dims = dims_of(all);
  const int64_t d_max = dims.back();
  const Scaling none = ScalePolicy::none(), sqrt = ScalePolicy::inv_sqrt_d();
  Verdict v = make_verdict("C8");
  v.check = "full_sweep";
  v.title = words("full.verdict_title", {{"steps", kSteps}});
  v.figure = "train_full_unit";
  // The rule at the largest d_k of each setting; the claim fails in this sweep where any setting refutes it.
  std::string settings;
  int refuted = 0, confirmed = 0, judged = 0;
  std::string refuted_text;
  for (InitMode init : {InitMode::unit, InitMode::small})
    for (OptimizerKind opt : {OptimizerKind::adam, OptimizerKind::sgd}) {
      const CellSummary *n = find(all, init, opt, d_max, none), *s = find(all, init, opt, d_max, sqrt);
      if (!n || !s) continue;
      const Outcome o = train::c8_outcome(*n, *s);
      ++judged;
      refuted += o == Outcome::refuted;
      confirmed += o == Outcome::confirmed;
      const std::string one = words("full.setting", {{"init", train::to_string(init)},
                                                      {"optimizer", words(optimizer_key(opt))},
                                                      {"outcome", to_string(o)},
                                                      {"none_reached", n->reached},
                                                      {"none_steps", n->median_censored ? fmt::format(">{}", kSteps)
                                                                                        : fmt::format("{:g}", n->median_steps)},
                                                      {"sqrt_reached", s->reached},
                                                      {"sqrt_steps", fmt::format("{:g}", s->median_steps)},
                                                      {"runs", n->runs}});
      if (!settings.empty()) settings += "; ";
      settings += one;
      if (o == Outcome::refuted) {
        if (!refuted_text.empty()) refuted_text += " ";
        refuted_text += words("full.refutes", {{"setting", one}, {"d_k", d_max}, {"steps", kSteps}});
      }
    }
  v.outcome = judged == 0 ? Outcome::inconclusive : refuted > 0 ? Outcome::refuted
                                                 : confirmed == judged ? Outcome::confirmed
                                                                       : Outcome::inconclusive;
  // "Slows, not stops": the unscaled unit-init cells at the largest d_k below d_max where some seeds still learn.
  std::string slows;
  for (int64_t d : dims) {
    if (d == d_max) continue;
    const CellSummary *a = find(all, InitMode::unit, OptimizerKind::adam, d, none),
                      *g = find(all, InitMode::unit, OptimizerKind::sgd, d, none),
                      *s = find(all, InitMode::unit, OptimizerKind::adam, d, sqrt);
    if (a && g && s && a->reached < a->runs && (a->reached > 0 || g->reached > 0))
      slows = words("full.slows", {{"d_k", d},
                                   {"adam", a->reached},
                                   {"sgd", g->reached},
                                   {"runs", a->runs},
                                   {"sqrt", s->reached},
                                   {"percent", 100 * kThreshold},
                                   {"steps", kSteps}});
  }
  // This run's unscaled SGD at its smallest d_k: a failure without a saturated row is not saturation's doing.
  std::string unsaturated;
  const CellSummary *ln = nullptr, *ls = nullptr;
  for (const auto& c : live)
    if (c.init == InitMode::unit && c.optimizer == OptimizerKind::sgd && (!ln || c.d_k <= ln->d_k) && c.scale == none)
      ln = &c;
  if (ln)
    for (const auto& c : live)
      if (c.init == InitMode::unit && c.optimizer == OptimizerKind::sgd && c.d_k == ln->d_k && c.scale == sqrt) ls = &c;
  if (ln && ls && train::c8_outcome(*ln, *ls) == Outcome::confirmed && ln->mean_max_prob_start < 0.9)
    unsaturated = words("full.unsaturated", {{"d_k", ln->d_k},
                                             {"reached", ln->reached},
                                             {"runs", ln->runs},
                                             {"max_p", ln->mean_max_prob_start}});
  words.fill(v, "full", {{"steps", kSteps},
                         {"d_k", d_max},
                         {"settings", settings},
                         {"slows", slows},
                         {"refutes", refuted_text},
                         {"unsaturated", unsaturated},
                         {"percent", 100 * kThreshold}});
  v.measured = refuted;
  v.theory = 0;
  v.tolerance = 0;
  return v;
}

}  // namespace attnlab::lab::train_full
