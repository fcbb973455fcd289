// Experiment `classifier` (C10): the classifier's softmax gradient does not vanish when it is confidently wrong.
//
// With softmax + cross-entropy the gradient at the logits is p − y. Make the logits
// a·u for random u ~ N(0,1) over `classes` classes and let a grow (a confident model):
// if the target is the argmax (confident and right) p − y → 0; if it is not
// (confident and wrong) p → e_argmax, so ‖p − y‖ → ‖e_argmax − e_target‖ = √2.
// Attention's softmax passes back J g instead, which goes to 0 either way.
// loss = softmax_mse (squared error on the probabilities, gradient J(p − y)·2) is the
// configuration where the claim must fail: a confident wrong prediction gets no gradient.
#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "attnlab/softmax.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct ClassifierConfig {
  int64_t classes = 10;
  int64_t trials = 400;
  double a_min = 0.01, a_max = 1000;
  int64_t grid = 41;
  std::string loss = "cross_entropy";  // or softmax_mse
  double tolerance = 1e-3;             // at a_max: |‖g_wrong‖ − √2|, ‖g_right‖, ‖J g‖/‖g‖
  void bind(Params& p) {
    using namespace rules;
    p.add("classes", classes, "number of classes", at_least(2));
    p.add("trials", trials, "random logit directions u per scale", positive());
    p.add("a_min", a_min, "smallest logit scale a", positive());
    p.add("a_max", a_max, "largest logit scale a");
    p.add("grid", grid, "points of the log grid of a", at_least(2));
    p.add("loss", loss, "cross_entropy (the classifier's), or softmax_mse (squared error on p: the claim must then fail)", one_of({"cross_entropy", "softmax_mse"}));
    p.add("tolerance", tolerance, "agreement at a_max with √2 (wrong), 0 (right) and 0 (attention's J g)");
    p.check({"a_min", "a_max"}, "a_min < a_max", [this] { return a_max > a_min; });
  }
};

// Gradient of the loss at the logits.
std::vector<double> logit_gradient(const std::vector<double>& z, int64_t target, const std::string& loss) {
  std::vector<double> g(z.size());
  if (loss == "cross_entropy") {
    softmax_cross_entropy<double>(z, target, g);
    return g;
  }
  // L = ‖p − y‖²: ∂L/∂z = Jᵀ 2(p − y).
  std::vector<double> p(z.size()), r(z.size());
  softmax<double>(z, p);
  for (size_t i = 0; i < p.size(); ++i) r[i] = 2 * (p[i] - (static_cast<int64_t>(i) == target ? 1.0 : 0.0));
  softmax_vjp<double>(p, r, g);
  return g;
}

double norm(const std::vector<double>& v) { return std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0)); }

// ---- measure ------------------------------------------------------------------

// One random logit direction u, a unit upstream gradient for attention's J g, and two targets.
struct Trial {
  std::vector<double> u, upstream;
  int64_t right, wrong;  // target = argmax u, and a random other class
};

std::vector<Trial> make_trials(const ClassifierConfig& c, uint64_t seed) {
  auto g = util::rng(seed, "classifier");
  std::normal_distribution<double> normal(0, 1);
  const size_t n = static_cast<size_t>(c.classes);
  std::vector<Trial> trials(static_cast<size_t>(c.trials));
  for (auto& t : trials) {
    t.u.resize(n);
    t.upstream.resize(n);
    for (auto& x : t.u) x = normal(g);
    for (auto& x : t.upstream) x = normal(g);
    const double un = norm(t.upstream);
    for (auto& x : t.upstream) x /= un;  // unit upstream gradient for attention's J g
    t.right = std::max_element(t.u.begin(), t.u.end()) - t.u.begin();
    t.wrong = (t.right + 1 + std::uniform_int_distribution<int64_t>(0, c.classes - 2)(g)) % c.classes;
  }
  return trials;
}

// Per scale a of the logits a·u: the gradient norms at the logits (median and 5–95 %).
Table measure_gradients(const ClassifierConfig& c, const std::vector<Trial>& trials, RunContext& ctx) {
  ctx.report(fmt::format("{} scales × {} trials", c.grid, c.trials));
  const size_t n = static_cast<size_t>(c.classes);
  Table t("classifier", {"a", "wrong_median", "wrong_p05", "wrong_p95", "right_median", "right_p05", "right_p95",
                         "attention_median", "attention_p05", "attention_p95"});
  for (double a : util::log_grid(c.a_min, c.a_max, static_cast<int>(c.grid))) {
    std::vector<double> wrong, right, att;
    for (const auto& tr : trials) {
      std::vector<double> z(n), p(n), jg(n);
      for (size_t i = 0; i < n; ++i) z[i] = a * tr.u[i];
      wrong.push_back(norm(logit_gradient(z, tr.wrong, c.loss)));
      right.push_back(norm(logit_gradient(z, tr.right, c.loss)));
      softmax<double>(z, p);
      softmax_vjp<double>(p, tr.upstream, jg);
      att.push_back(norm(jg));
    }
    t.add_row({a, util::median(wrong), util::quantile(wrong, 0.05), util::quantile(wrong, 0.95), util::median(right),
               util::quantile(right, 0.05), util::quantile(right, 0.95), util::median(att), util::quantile(att, 0.05),
               util::quantile(att, 0.95)});
  }
  return t;
}

// ---- figures ------------------------------------------------------------------

Figure figure_gradients(const ClassifierConfig& c, const Table& t, const Words& words) {
  const auto& grid = t.column("a");
  Figure f;
  f.name = "classifier_gradient";
  f.title = words("figure.title." + c.loss);
  words.fill(f, "figure", {{"trials", c.trials}, {"classes", c.classes}});
  const std::string lname = c.loss == "cross_entropy" ? "‖p − y‖" : "‖J·2(p − y)‖";
  for (int log_y = 0; log_y < 2; ++log_y) {
    Panel p = util::panel(words(log_y ? "figure.panel_log" : "figure.panel_linear"), "logit scale a (confidence)",
                          "gradient norm at the logits", true, log_y == 1);
    p.series.push_back(util::band("", grid, t.column("wrong_p05"), t.column("wrong_p95"), util::colour(1)));
    p.series.push_back(util::series("classifier, wrong: " + lname, Style::linespoints, grid, t.column("wrong_median"), util::colour(1)));
    p.series.push_back(util::band("", grid, t.column("right_p05"), t.column("right_p95"), util::colour(0)));
    p.series.push_back(util::series("classifier, right: " + lname, Style::linespoints, grid, t.column("right_median"), util::colour(0)));
    p.series.push_back(util::band("", grid, t.column("attention_p05"), t.column("attention_p95"), util::colour(2)));
    p.series.push_back(util::series("attention: ‖J g‖, ‖g‖ = 1", Style::linespoints, grid, t.column("attention_median"), util::colour(2)));
    p.series.push_back(util::series("theory, wrong: √2", Style::theory, {grid.front(), grid.back()}, {std::sqrt(2.0), std::sqrt(2.0)}, "#000000"));
    if (log_y) {
      p.y_min = 1e-12;
      p.y_max = 10;
      p.legend_position = "below";
    } else {
      p.y_min = 0;
      p.y_max = 2.2;
      p.legend_position = "below";
    }
    f.panels.push_back(p);
  }
  util::stack_panels(f);
  return f;
}

// ---- verdicts -----------------------------------------------------------------

Verdict verdict_c10(const ClassifierConfig& c, const Table& t, const Words& words) {
  const double wrong_end = t.column("wrong_median").back(), right_end = t.column("right_median").back();
  const double att_end = t.column("attention_p95").back();
  const double wrong_low = t.column("wrong_p05").back();
  Verdict v = make_verdict("C10");
  v.theory = std::sqrt(2.0);
  v.measured = wrong_end;
  v.tolerance = c.tolerance;
  v.outcome = util::outcome_of(std::abs(wrong_end - std::sqrt(2.0)) <= c.tolerance &&
                               std::abs(wrong_low - std::sqrt(2.0)) <= c.tolerance && right_end <= c.tolerance &&
                               att_end <= c.tolerance);
  v.figure = "classifier_gradient";
  words.fill(v, "c10",
             {{"a_max", c.a_max},
              {"wrong", wrong_end},
              {"wrong_low", wrong_low},
              {"right", right_end},
              {"attention", att_end},
              {"loss", c.loss},
              {"tolerance", c.tolerance},
              {"loss_words", words("c10.loss." + c.loss)},
              {"right_pretty", util::pretty(right_end, 1)},
              {"attention_pretty", util::pretty(att_end, 1)},
              {"conclusion", words("c10.conclusion." + c.loss)}});
  return v;
}

Result run_classifier(const ClassifierConfig& c, RunContext& ctx) {
  const std::vector<Trial> trials = make_trials(c, ctx.seed);
  const Words words("classifier");
  Result result;
  result.tables = {measure_gradients(c, trials, ctx)};
  result.figures = {figure_gradients(c, result.tables[0], words)};
  result.verdicts = {verdict_c10(c, result.tables[0], words)};
  return result;
}

}  // namespace

Experiment classifier_experiment() {
  return make_experiment<ClassifierConfig>("classifier",
                                                "Gradient p − y of softmax + cross-entropy against the logit scale",
                                                {"C10"}, run_classifier, {{"trials", "100"}, {"grid", "21"}});
}

}  // namespace attnlab::lab
