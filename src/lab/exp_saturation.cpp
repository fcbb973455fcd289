// Experiment `saturation` (C3): softmax(a·x) as the scale a grows, for seed 001's
// x = (1, 1, 2, 4) and for random x. Theory: d s_max/da = s_max (x_max − E_s[x]) ≥ 0
// and dH/da = −a Var_s(x) ≤ 0, so the largest probability rises monotonically to 1
// (one-hot on a unique argmax) and the entropy falls to 0; as a → 0, s → uniform
// (max 1/n, entropy ln n).
#include <fmt/format.h>

#include <cmath>

#include "attnlab/softmax.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct SaturationConfig {
  std::vector<double> x{1, 1, 2, 4};  // seed 001
  double a_min = 1e-3, a_max = 1e3;
  int64_t grid = 61;
  std::vector<double> bar_scales{0.1, 0.5, 1, 2, 4, 8};
  int64_t random_vectors = 500;
  int64_t random_length = 16;
  double one_hot_tolerance = 1e-6;   // at a_max: |s_max − 1| and entropy must be below this
  double uniform_tolerance = 1e-2;   // at a_min: |s_max − 1/n|·n and |H − ln n|/ln n below this
  void bind(Params& p) {
    using namespace rules;
    p.add("x", x, "the logits x of softmax(a·x) (seed 001: 1,1,2,4)", at_least_items(2));
    p.add("a_min", a_min, "smallest scale a", positive());
    p.add("a_max", a_max, "largest scale a");
    p.add("grid", grid, "points of the log grid of a", at_least(2));
    p.add("bar_scales", bar_scales, "scales shown as bar charts (small multiples)", each(positive()));
    p.add("random_vectors", random_vectors, "random x ~ N(0,1) drawn for the band", positive());
    p.add("random_length", random_length, "length of the random x", at_least(2));
    p.add("one_hot_tolerance", one_hot_tolerance, "at a_max, 1 − s_max and H must be below this");
    p.add("uniform_tolerance", uniform_tolerance, "at a_min, relative distance of s_max and H from uniform's");
    p.check({"a_min", "a_max"}, "a_min < a_max", [this] { return a_max > a_min; });
  }
};

struct Point {
  double max_prob, entropy;
};

Point at_scale(const std::vector<double>& x, double a, std::vector<double>* probs = nullptr) {
  std::vector<double> ax(x.size()), s(x.size());
  for (size_t i = 0; i < x.size(); ++i) ax[i] = a * x[i];
  softmax<double>(ax, s);
  if (probs) *probs = s;
  return {*std::max_element(s.begin(), s.end()), entropy<double>(s)};
}

std::string logits_text(const std::vector<double>& x) {
  std::string xs_text;
  for (size_t i = 0; i < x.size(); ++i) xs_text += (i ? ", " : "") + fmt::format("{:g}", x[i]);
  return xs_text;
}

// ---- measure ------------------------------------------------------------------

// softmax(a·x) over the log grid of a, for seed 001's x and for random vectors.
struct Curves {
  Table table{"saturation_curve", {"a", "max_prob", "entropy", "random_max_median", "random_max_p05",
                                   "random_max_p95", "random_entropy_median", "random_entropy_p05",
                                   "random_entropy_p95"}};
  std::vector<double> grid;
  std::vector<Point> seed_points;               // x along the grid
  std::vector<std::vector<double>> random_x;    // [random_vectors][random_length]
  std::vector<double> final_random_max;         // each random x's max s at a_max
  std::vector<double> first_random_entropy;     // each random x's entropy at a_min
  bool monotone = true;                          // x's max s never falls and H never rises along the grid
};

Curves measure_curves(const SaturationConfig& c, RunContext& ctx) {
  Curves cu;
  cu.grid = util::log_grid(c.a_min, c.a_max, static_cast<int>(c.grid));
  auto g = util::rng(ctx.seed, "saturation/random");
  std::normal_distribution<double> normal(0, 1);
  cu.random_x.assign(static_cast<size_t>(c.random_vectors), std::vector<double>(static_cast<size_t>(c.random_length)));
  for (auto& v : cu.random_x)
    for (auto& e : v) e = normal(g);
  ctx.report(fmt::format("{} scales × {} random vectors", cu.grid.size(), cu.random_x.size()));
  Point prev{0, INFINITY};
  for (size_t gi = 0; gi < cu.grid.size(); ++gi) {
    const double a = cu.grid[gi];
    const Point p = at_scale(c.x, a);
    // Monotone up to rounding: a relative slack of 1e-12.
    if (p.max_prob < prev.max_prob * (1 - 1e-12) || p.entropy > prev.entropy + 1e-12) cu.monotone = false;
    prev = p;
    cu.seed_points.push_back(p);
    std::vector<double> mx, en;
    for (const auto& v : cu.random_x) {
      const Point r = at_scale(v, a);
      mx.push_back(r.max_prob);
      en.push_back(r.entropy);
    }
    if (gi + 1 == cu.grid.size()) cu.final_random_max = mx;
    if (gi == 0) cu.first_random_entropy = en;
    cu.table.add_row({a, p.max_prob, p.entropy, util::median(mx), util::quantile(mx, 0.05), util::quantile(mx, 0.95),
                      util::median(en), util::quantile(en, 0.05), util::quantile(en, 0.95)});
  }
  return cu;
}

// softmax(a·x) at the few scales drawn as bar charts.
struct Bars {
  Table table{"saturation_bars", {"a", "index", "probability"}};
  std::vector<std::vector<double>> s;  // per bar scale
  std::vector<Point> points;
};

Bars measure_bars(const SaturationConfig& c) {
  Bars b;
  for (double a : c.bar_scales) {
    std::vector<double> s;
    b.points.push_back(at_scale(c.x, a, &s));
    for (size_t i = 0; i < s.size(); ++i) b.table.add_row({a, static_cast<double>(i + 1), s[i]});
    b.s.push_back(s);
  }
  return b;
}

// ---- figures ------------------------------------------------------------------

Figure figure_bars(const SaturationConfig& c, const Bars& bars, const Words& words) {
  const double n = static_cast<double>(c.x.size());
  Figure bf;
  bf.name = "saturation_bars";
  bf.title = "";
  words.fill(bf, "bars", {{"logits", logits_text(c.x)}});
  for (size_t k = 0; k < c.bar_scales.size(); ++k) {
    const std::vector<double>& s = bars.s[k];
    const Point& p = bars.points[k];
    std::vector<double> idx;
    for (size_t i = 0; i < s.size(); ++i) idx.push_back(static_cast<double>(i + 1));
    Panel pa = util::panel(words("bars.panel", {{"a", c.bar_scales[k]}, {"max_prob", p.max_prob}}), "position i",
                           "weight s_i");
    pa.series.push_back(util::series("s_i", Style::bars, idx, s, "#0072B2"));
    pa.series.push_back(util::series("uniform 1/n", Style::theory, {0.5, n + 0.5}, {1 / n, 1 / n}, "#D55E00"));
    pa.y_min = 0;
    pa.y_max = 1.05;
    pa.x_min = 0.5;
    pa.x_max = n + 0.5;
    pa.x_tics = idx;
    pa.legend_position = "below";
    bf.panels.push_back(pa);
  }
  util::stack_panels(bf);
  return bf;
}

Figure figure_curves(const SaturationConfig& c, const Curves& cu, const Words& words) {
  const double n = static_cast<double>(c.x.size()), nr = static_cast<double>(c.random_length);
  const auto& grid = cu.grid;
  const auto& t = cu.table;
  const std::string xs_text = logits_text(c.x);
  Figure cf;
  cf.name = "saturation_curves";
  cf.title = "";
  words.fill(cf, "curves",
             {{"logits", xs_text}, {"random_vectors", c.random_vectors}, {"random_length", c.random_length}});
  Panel pm = util::panel("largest weight", "scale a", "max_i s_i", true, false);
  Panel pe = util::panel("entropy (nats)", "scale a", "H(s)", true, false);
  std::vector<double> smax, sent;
  for (const auto& p : cu.seed_points) smax.push_back(p.max_prob), sent.push_back(p.entropy);
  pm.series.push_back(util::band("random x: 5–95 %", grid, t.column("random_max_p05"), t.column("random_max_p95"), "#56B4E9"));
  pm.series.push_back(util::series("random x: median", Style::lines, grid, t.column("random_max_median"), "#0072B2"));
  pm.series.push_back(util::series("x = (" + xs_text + ")", Style::points, grid, smax, "#D55E00"));
  pm.series.push_back(util::series("limit a→∞: 1", Style::theory, {grid.front(), grid.back()}, {1, 1}, "#000000"));
  pm.series.push_back(util::series(fmt::format("limit a→0: 1/{:g}", n), Style::theory, {grid.front(), grid.back()}, {1 / n, 1 / n}, "#D55E00"));
  pm.series.push_back(util::series(fmt::format("limit a→0: 1/{:g}", nr), Style::theory, {grid.front(), grid.back()}, {1 / nr, 1 / nr}, "#0072B2"));
  pm.y_min = 0;
  pm.y_max = 1.08;
  pm.legend_position = "below";
  pe.series.push_back(util::band("random x: 5–95 %", grid, t.column("random_entropy_p05"), t.column("random_entropy_p95"), "#56B4E9"));
  pe.series.push_back(util::series("random x: median", Style::lines, grid, t.column("random_entropy_median"), "#0072B2"));
  pe.series.push_back(util::series("x = (" + xs_text + ")", Style::points, grid, sent, "#D55E00"));
  pe.series.push_back(util::series(fmt::format("limit a→0: ln {:g}", n), Style::theory, {grid.front(), grid.back()}, {std::log(n), std::log(n)}, "#D55E00"));
  pe.series.push_back(util::series(fmt::format("limit a→0: ln {:g}", nr), Style::theory, {grid.front(), grid.back()}, {std::log(nr), std::log(nr)}, "#0072B2"));
  pe.series.push_back(util::series("limit a→∞: 0", Style::theory, {grid.front(), grid.back()}, {0, 0}, "#000000"));
  pe.y_min = -0.05;
  pe.legend_position = "below";
  cf.panels = {pm, pe};
  util::stack_panels(cf);
  return cf;
}

// ---- verdicts -----------------------------------------------------------------

// One-hot at a_max (seed x and every random x), uniform at a_min, monotone between.
Verdict verdict_c3(const SaturationConfig& c, const Curves& cu, const Words& words) {
  const double n = static_cast<double>(c.x.size()), nr = static_cast<double>(c.random_length);
  const Point hi = cu.seed_points.back(), lo = cu.seed_points.front();
  // A random x may have two nearly tied largest logits; theory then bounds how far
  // from one-hot it may still be: 1 − max s ≤ (n − 1)·exp(−a·gap), gap = x_(1) − x_(2).
  double worst_random_one_hot = 0;
  int random_one_hot = 0;
  for (size_t i = 0; i < cu.random_x.size(); ++i) {
    std::vector<double> sorted = cu.random_x[i];
    std::sort(sorted.rbegin(), sorted.rend());
    const double bound = (nr - 1) * std::exp(-c.a_max * (sorted[0] - sorted[1]));
    const double excess = (1 - cu.final_random_max[i]) - bound;
    worst_random_one_hot = std::max(worst_random_one_hot, excess);
    if (1 - cu.final_random_max[i] <= c.one_hot_tolerance) ++random_one_hot;
  }
  double worst_random_uniform = 0;
  for (double h : cu.first_random_entropy) worst_random_uniform = std::max(worst_random_uniform, std::abs(h - std::log(nr)) / std::log(nr));
  std::vector<double> s_hi;
  at_scale(c.x, c.a_max, &s_hi);
  std::string s_hi_text;
  for (size_t i = 0; i < s_hi.size(); ++i) s_hi_text += (i ? ", " : "") + fmt::format("{:.3g}", s_hi[i]);
  const bool one_hot = 1 - hi.max_prob <= c.one_hot_tolerance && hi.entropy <= c.one_hot_tolerance &&
                       worst_random_one_hot <= c.one_hot_tolerance;
  const bool uniform = std::abs(lo.max_prob - 1 / n) * n <= c.uniform_tolerance &&
                       std::abs(lo.entropy - std::log(n)) / std::log(n) <= c.uniform_tolerance &&
                       worst_random_uniform <= c.uniform_tolerance;
  Verdict v = make_verdict("C3");
  v.theory = 1.0;
  v.measured = hi.max_prob;
  v.tolerance = c.one_hot_tolerance;
  v.outcome = util::outcome_of(one_hot && uniform && cu.monotone);
  v.figure = "saturation_curves";
  words.fill(v, "c3",
             {{"a_max", c.a_max},
              {"a_min", c.a_min},
              {"weights", s_hi_text},
              {"entropy_hi", hi.entropy},
              {"max_n", lo.max_prob * n},
              {"entropy_ratio", lo.entropy / std::log(n)},
              {"random_one_hot", random_one_hot},
              {"random_count", cu.random_x.size()},
              {"worst_excess", worst_random_one_hot},
              {"monotone", words(cu.monotone ? "c3.monotone" : "c3.not_monotone")},
              {"one_hot_tolerance", c.one_hot_tolerance},
              {"uniform_tolerance", c.uniform_tolerance},
              {"random_vectors", c.random_vectors},
              {"logits", logits_text(c.x)},
              {"max_lo", lo.max_prob},
              {"max_hi", hi.max_prob},
              {"n", n}});
  return v;
}

Result run_saturation(const SaturationConfig& c, RunContext& ctx) {
  const Curves curves = measure_curves(c, ctx);
  const Bars bars = measure_bars(c);

  const Words words("saturation");
  Result result;
  result.tables = {curves.table, bars.table};
  result.figures = {figure_curves(c, curves, words), figure_bars(c, bars, words)};
  result.verdicts = {verdict_c3(c, curves, words)};
  return result;
}

}  // namespace

Experiment saturation_experiment() {
  return make_experiment<SaturationConfig>("saturation",
                                                "softmax(a·x) turns one-hot as a grows and uniform as a → 0",
                                                {"C3"}, run_saturation,
                                                {{"grid", "25"}, {"random_vectors", "100"}});
}

}  // namespace attnlab::lab
