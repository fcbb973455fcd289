// The opening of the report as a view model (story.mustache fills in the words): the answer,
// the argument in five steps (variance → saturation → Jacobian → gradient → learning), and one
// figure per step, each a single panel that stays legible at a phone's width. Every number is
// read from this run's tables; a step whose experiment did not run keeps its words and loses
// its numbers. The direction of each statement the data could reverse (larger or smaller,
// where a ratio crosses 1) is computed here and given to the template as a flag.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lab/lab_util.hpp"
#include "lab/report/view.hpp"
#include "lab/report_page.hpp"

namespace attnlab::lab::page {
namespace {

// The sizes of attention heads in the models people train (BERT, GPT-2: 64; LLaMA and
// most recent language models: 128; a few use 256).
constexpr double kModelDkLow = 64, kModelDkHigh = 256;

// (x, y) of the rows of a table where some columns have given values.
struct Curve {
  std::vector<double> x, y;
  bool empty() const { return x.empty(); }
  double at(double where) const {  // NaN if not measured there
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] == where) return y[i];
    return NAN;
  }
};
using Where = std::vector<std::pair<std::string, double>>;

Curve curve(const Table* t, const Where& where, const std::string& x, const std::string& y) {
  Curve c;
  if (t == nullptr) return c;
  try {
    const auto& xs = t->column(x);
    const auto& ys = t->column(y);
    for (size_t r = 0; r < t->rows(); ++r) {
      bool match = true;
      for (const auto& [col, value] : where) match = match && t->column(col)[r] == value;
      if (match) c.x.push_back(xs[r]), c.y.push_back(ys[r]);
    }
  } catch (const Error&) {
    return {};  // a table of another layout (an older experiment): no numbers
  }
  return c;
}

// A policy's code in a result's CSV tables: its index in the `policies` setting; −1 if absent.
double policy_code(const Result* r, const std::string& name) {
  if (r == nullptr || !r->config.count("policies")) return -1;
  std::stringstream list(r->config.at("policies"));
  std::string item;
  for (int i = 0; std::getline(list, item, ','); ++i)
    if (item == name) return i;
  return -1;
}

// min..max of y over the model sizes (64–256) among the measured x.
struct Span {
  double lo = INFINITY, hi = -INFINITY;
  bool ok() const { return std::isfinite(lo); }
};
Span over_model_sizes(const Curve& c) {
  Span s;
  for (size_t i = 0; i < c.x.size(); ++i)
    if (c.x[i] >= kModelDkLow && c.x[i] <= kModelDkHigh && std::isfinite(c.y[i]))
      s.lo = std::min(s.lo, c.y[i]), s.hi = std::max(s.hi, c.y[i]);
  return s;
}

// y_a / y_b point by point (same x).
Curve ratio(const Curve& a, const Curve& b) {
  Curve r;
  for (size_t i = 0; i < a.x.size(); ++i) {
    const double yb = b.at(a.x[i]);
    if (std::isfinite(yb) && yb != 0) r.x.push_back(a.x[i]), r.y.push_back(a.y[i] / yb);
  }
  return r;
}

// ---- what each experiment measured, as curves against d_k ----------------------------

struct Measured {
  Curve spread_raw, spread_scaled;                // std of q·k (gaussian, σ = 1)
  Curve saturated_none, saturated_scaled;         // fraction of rows with max p > 0.99
  Curve jacobian_none, jacobian_scaled;           // median ‖J‖_F
  Curve query_grad_none, query_grad_scaled;       // median ‖dQ_i‖
  Curve reached_none, reached_scaled;             // train, Adam: fraction of runs reaching the threshold
  Curve maxp_none, maxp_scaled;                   // train, Adam: max attention probability at init
  Curve grad_none, grad_scaled, grad_inv_d;       // train, Adam: ‖dL/dW_qk‖ in the first steps
  Curve reached_inv_d;
  std::string gradflow_keys = "128";              // keys per row in gradflow
};

Curve sqrt_of(Curve c) {
  for (auto& y : c.y) y = std::sqrt(y);
  return c;
}

Measured measure(const std::vector<Result>& results) {
  Measured m;
  if (const Result* r = find_result(results, "variance")) {
    const Table* t = find_table(results, "variance", "variance_by_dim");
    const bool gaussian_first = r->config.count("distributions") && r->config.at("distributions").rfind("gaussian", 0) == 0;
    const bool sqrt_scale = r->config.count("scale_exponent") && std::stod(r->config.at("scale_exponent")) == 0.5;
    if (gaussian_first) {
      m.spread_raw = sqrt_of(curve(t, {{"distribution", 0}, {"sigma", 1}}, "d_k", "var_whole"));
      if (sqrt_scale) m.spread_scaled = sqrt_of(curve(t, {{"distribution", 0}, {"sigma", 1}}, "d_k", "var_scaled"));
    }
  }
  if (const Result* r = find_result(results, "gradflow")) {
    const Table* t = find_table(results, "gradflow", "gradflow");
    const double none = policy_code(r, "none"), scaled = policy_code(r, "inv_sqrt_d");
    if (r->config.count("n_keys")) m.gradflow_keys = r->config.at("n_keys");
    if (none >= 0 && scaled >= 0) {
      m.saturated_none = curve(t, {{"policy", none}}, "d_k", "saturated_fraction");
      m.saturated_scaled = curve(t, {{"policy", scaled}}, "d_k", "saturated_fraction");
      m.jacobian_none = curve(t, {{"policy", none}}, "d_k", "median_J_fro");
      m.jacobian_scaled = curve(t, {{"policy", scaled}}, "d_k", "median_J_fro");
      m.query_grad_none = curve(t, {{"policy", none}}, "d_k", "median_row_dQ");
      m.query_grad_scaled = curve(t, {{"policy", scaled}}, "d_k", "median_row_dQ");
    }
  }
  if (find_result(results, "train")) {
    // The headline setting: recall task (0), unit init (0), Adam (0); scale codes 0 none, 1 1/√d_k, 2 1/d_k.
    const Table* t = find_table(results, "train", "train_cells");
    auto cell = [&](double scale, const std::string& column) {
      return curve(t, {{"task", 0}, {"init", 0}, {"optimizer", 0}, {"scale", scale}}, "d_k", column);
    };
    auto fraction = [&](double scale) {
      Curve reached = cell(scale, "reached");
      const Curve runs = cell(scale, "runs");
      for (size_t i = 0; i < reached.y.size(); ++i) reached.y[i] /= runs.y[i];
      return reached;
    };
    m.reached_none = fraction(0), m.reached_scaled = fraction(1), m.reached_inv_d = fraction(2);
    m.maxp_none = cell(0, "max_prob_start"), m.maxp_scaled = cell(1, "max_prob_start");
    m.grad_none = cell(0, "grad_qk_first"), m.grad_scaled = cell(1, "grad_qk_first"), m.grad_inv_d = cell(2, "grad_qk_first");
  }
  return m;
}

// The first d_k from which the ratio stays below 1 (NaN if it never does).
double crossing(const Curve& ratio) {
  double from = NAN;
  for (size_t i = 0; i < ratio.x.size(); ++i) {
    if (ratio.y[i] < 1 && std::isnan(from)) from = ratio.x[i];
    if (ratio.y[i] >= 1) from = NAN;
  }
  return from;
}

// A share in per cent, the sign kept on the number's line (a no-break space).
std::string percent(double x) { return fmt::format("{:.0f}\u00a0%", 100 * x); }
std::string size(double d) { return fmt::format("{:g}", d); }

// ---- the five steps, as fields for steps.mustache ------------------------------------

using nlohmann::json;

// [{value, d_k, first}] of a curve at the given sizes (those measured), for "x at d_k = …" lists.
nlohmann::json at_sizes(const Curve& c, const std::vector<double>& sizes, std::string (*format)(double)) {
  nlohmann::json out = nlohmann::json::array();
  for (double d : sizes)
    if (std::isfinite(c.at(d))) out.push_back({{"value", format(c.at(d))}, {"d_k", size(d)}, {"first", out.empty()}});
  return out;
}
std::string two_digits(double x) { return readable(x); }

nlohmann::json step_spread(const Measured& m) {
  nlohmann::json s = nlohmann::json::object();
  if (const json raw = at_sizes(m.spread_raw, {64, 1024}, [](double x) { return readable(x, 3); }); !raw.empty())
    s["raw"] = {{"items", raw}};
  if (!m.spread_scaled.empty()) {
    const auto [lo, hi] = std::minmax_element(m.spread_scaled.y.begin(), m.spread_scaled.y.end());
    s["scaled"] = {{"low", readable(*lo, 3)},
                   {"high", readable(*hi, 3)},
                   {"from", size(m.spread_scaled.x.front())},
                   {"to", size(m.spread_scaled.x.back())}};
  }
  return s;
}

nlohmann::json step_saturation(const std::vector<Result>& results, const Measured& m) {
  nlohmann::json s = nlohmann::json::object();
  const Curve bars = curve(find_table(results, "saturation", "saturation_bars"), {}, "a", "probability");
  double at1 = 0, at4 = 0;
  for (size_t i = 0; i < bars.x.size(); ++i) {
    if (bars.x[i] == 1) at1 = std::max(at1, bars.y[i]);
    if (bars.x[i] == 4) at4 = std::max(at4, bars.y[i]);
  }
  if (at1 > 0 && at4 > 0) s["seed_input"] = {{"at_1", readable(at1, 3)}, {"at_4", fmt::format("{:.4f}", at4)}};
  if (!m.saturated_none.empty()) {
    const double scaled_max = *std::max_element(m.saturated_scaled.y.begin(), m.saturated_scaled.y.end());
    s["random"] = {{"keys", m.gradflow_keys},
                   {"unscaled", at_sizes(m.saturated_none, {64, 256, m.saturated_none.x.back()}, percent)},
                   {"scaled_never", scaled_max == 0},
                   {"scaled_max", percent(scaled_max)}};
  }
  return s;
}

nlohmann::json step_jacobian(const Measured& m) {
  nlohmann::json s = nlohmann::json::object();
  // The spread-out extreme for comparison: uniform weight over n keys gives ‖J‖_F = √(n − 1)/n.
  const double n = std::stod(m.gradflow_keys);
  s["uniform"] = {{"keys", m.gradflow_keys}, {"value", readable(std::sqrt(n - 1) / n)}};
  if (!m.jacobian_none.empty() && !m.jacobian_scaled.empty())
    s["typical"] = {{"scaled", readable(util::median(m.jacobian_scaled.y))},
                    {"unscaled", at_sizes(m.jacobian_none, {64, 256, m.jacobian_none.x.back()}, two_digits)}};
  return s;
}

nlohmann::json step_gradient(const Measured& m) {
  nlohmann::json s = nlohmann::json::object();
  const Curve r = ratio(m.query_grad_none, m.query_grad_scaled);
  const Span model = over_model_sizes(r);
  if (!model.ok()) return s;
  const double from = crossing(r);
  s["query"] = {{"ratios", at_sizes(r, {kModelDkLow, 128, kModelDkHigh}, two_digits)},
                {"larger", model.lo >= 1},
                {"smaller", model.hi < 1},
                {"crossing", std::isfinite(from) ? nlohmann::json(size(from)) : nlohmann::json(false)}};
  return s;
}

nlohmann::json step_learning(const Measured& m) {
  nlohmann::json s = nlohmann::json::object();
  if (m.reached_none.empty() || m.reached_scaled.empty()) return s;
  const double d = m.reached_none.x.back();
  const double g = m.grad_none.at(d) / m.grad_scaled.at(d);
  s["train"] = {{"d_k", size(d)},
                {"unscaled", percent(m.reached_none.at(d))},
                {"scaled", percent(m.reached_scaled.at(d))},
                {"weight_unscaled", readable(m.maxp_none.at(d))},
                {"weight_scaled", readable(m.maxp_scaled.at(d))},
                {"gradient_ratio", readable(g)},
                {"gradient_larger", g >= 1}};
  if (!m.grad_inv_d.empty()) {
    const double gi = m.grad_inv_d.at(d) / m.grad_scaled.at(d);
    if (gi < 1 && m.reached_inv_d.at(d) >= m.reached_scaled.at(d))
      s["inverse_d"] = {{"gradient_ratio", readable(gi)}, {"reached", percent(m.reached_inv_d.at(d))}};
  }
  return s;
}

// The first screen's answer: the two numbers that carry it, when they were measured.
nlohmann::json answer(const Measured& m) {
  nlohmann::json a = nlohmann::json::object();
  if (!m.saturated_none.empty() && std::isfinite(m.saturated_none.at(kModelDkHigh)))
    a["saturated"] = {{"share", percent(m.saturated_none.at(kModelDkHigh))}, {"d_k", size(kModelDkHigh)}};
  if (!m.reached_none.empty() && !m.reached_scaled.empty()) {
    const double d = m.reached_none.x.back();
    a["learning"] = {
        {"d_k", size(d)}, {"unscaled", percent(m.reached_none.at(d))}, {"scaled", percent(m.reached_scaled.at(d))}};
  }
  return a;
}

// Where the scale comes from: Vaswani et al.'s own words (§3.2.1), from the claims' quotes.
nlohmann::json origin_quote() {
  for (const auto& c : claims())
    for (const auto& q : c.quotes)
      if (q.seed == "vaswani" && q.lang == "en") {
        const SourceInfo& s = source(q.seed);
        return {{"text", q.original}, {"cite", s.cite}, {"url", s.url}, {"claim", c.id}};
      }
  return false;
}

// ---- one figure per step ---------------------------------------------------------------

// One panel against d_k, without the scale (orange) and with 1/√d_k (blue), the head sizes
// models use shaded. 440 × 300 on the page: its 13-pixel text is still 11 pixels when a
// phone shows it 388 pixels wide.
std::optional<Figure> step_figure(const std::string& name, const std::string& y_label, bool log_y, double y_low,
                                  double y_high, const Curve& none, const Curve& scaled, std::string alt,
                                  std::string legend = "top left") {
  if (none.empty() && scaled.empty()) return std::nullopt;
  Figure f;
  f.name = name;
  f.width = 440;
  f.height = 300;
  f.alt = std::move(alt);
  Panel p = util::panel("", "head size d_k", y_label, true, log_y);
  p.y_min = y_low;
  p.y_max = y_high;
  p.legend_position = std::move(legend);
  if (!none.empty())
    p.series.push_back(util::series("no scale", Style::linespoints, none.x, none.y, util::policy_colour(ScalePolicy::none())));
  if (!scaled.empty())
    p.series.push_back(
        util::series("1/√d_k", Style::linespoints, scaled.x, scaled.y, util::policy_colour(ScalePolicy::inv_sqrt_d())));
  for (double x : !none.empty() ? none.x : scaled.x)
    if (static_cast<int>(std::log2(x)) % 2 == 0 && std::exp2(std::floor(std::log2(x))) == x) p.x_tics.push_back(x);
  util::shade_x_range(p, kModelDkLow, kModelDkHigh, "");
  f.panels = {p};
  return f;
}

// What a step figure shows, with its values at the largest d_k measured (the data decide the words).
std::string alt_text(const std::string& what, const Curve& none, const Curve& scaled, std::string (*format)(double)) {
  const Curve& any = !none.empty() ? none : scaled;
  if (any.empty()) return what;
  const double d = any.x.back();
  std::string alt = fmt::format("{} against the head size d_k, from {} to {}", what, size(any.x.front()), size(d));
  if (!none.empty() && std::isfinite(none.at(d)))
    alt += fmt::format("; at d_k = {}: {} without the scale", size(d), format(none.at(d)));
  if (!scaled.empty() && std::isfinite(scaled.at(d))) alt += fmt::format(", {} with 1/√d_k", format(scaled.at(d)));
  return alt + ".";
}

struct StepFigure {
  const char* name;
  const char* y_label;
  bool log_y;
  double y_low, y_high;
  const Curve &none, &scaled;
  const char* what;  // the alt text's opening
  std::string (*format)(double);
  const char* legend;
};

std::optional<Figure> draw(const StepFigure& f) {
  return step_figure(f.name, f.y_label, f.log_y, f.y_low, f.y_high, f.none, f.scaled,
                     alt_text(f.what, f.none, f.scaled, f.format), f.legend);
}

void add_step(nlohmann::json& steps, std::vector<Figure>& figures, const char* key, nlohmann::json fields,
              const StepFigure& spec) {
  if (const auto figure = draw(spec)) {
    fields["figure"] = figure_view(*figure, /*lazy=*/false);
    figures.push_back(*figure);
  }
  steps[key] = std::move(fields);
}

}  // namespace

Story story(const std::vector<Result>& results) {
  const Measured m = measure(results);
  Story s;
  nlohmann::json steps = nlohmann::json::object();
  add_step(steps, s.figures, "spread", step_spread(m),
           {"step_spread", "standard deviation of q·k", true, 0.5, 64, m.spread_raw, m.spread_scaled,
            "Standard deviation of the scores q·k", two_digits, "top left"});
  add_step(steps, s.figures, "saturation", step_saturation(results, m),
           {"step_saturation", "share of saturated rows", false, -0.02, 1.02, m.saturated_none, m.saturated_scaled,
            "Share of softmax rows whose largest weight exceeds 0.99", percent, "top left"});
  add_step(steps, s.figures, "jacobian", step_jacobian(m),
           {"step_jacobian", "‖J‖_F, typical row", true, 1e-7, 1, m.jacobian_none, m.jacobian_scaled,
            "Size ‖J‖_F of the softmax Jacobian on a typical row", two_digits, "bottom left"});
  add_step(steps, s.figures, "gradient", step_gradient(m),
           {"step_gradient", "‖dQ_i‖, typical query", true, 1e-6, 10, m.query_grad_none, m.query_grad_scaled,
            "Size of the gradient reaching a typical query", two_digits, "bottom left"});
  add_step(steps, s.figures, "learning", step_learning(m),
           {"step_init", "largest attention weight", false, 0, 1.02, m.maxp_none, m.maxp_scaled,
            "Largest attention weight at initialisation in a small model trained on a recall task", two_digits,
            "bottom right"});
  s.view = {{"answer", answer(m)}, {"steps", steps}, {"origin", origin_quote()}};
  // The language models answer first (C8's main evidence); the toy's figure only without them.
  if (const auto lm = lm_answer(results, s.figures)) {
    s.view["lm"] = *lm;
    return s;
  }
  if (const auto main =
          draw({"main_learning", "share of runs that learn", false, -0.02, 1.05, m.reached_none, m.reached_scaled,
                "Share of training runs that reach 90 % held-out accuracy on a recall task", percent, "bottom left"})) {
    s.view["main_figure"] = figure_view(*main, /*lazy=*/false);
    s.figures.push_back(*main);
  }
  return s;
}

}  // namespace attnlab::lab::page
