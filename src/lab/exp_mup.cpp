// Experiment `mup` (C16): the 1/d attention scale of μP (Yang et al., Tensor Programs V),
// by μP's own test, the coordinate check: how the attention logits' size depends on width,
// at initialisation and through the first steps of training at one learning rate.
//
// The training study's model (attnlab/train.hpp; docs/training.md) on associative recall,
// one attention block, d_model fixed, the head width d_k swept: only the attention widens.
// Per (policy, d_k, seed): train::trace_logits, the RMS of the logits S = scale·q·k on the
// held-out batch at init and after each of the first steps (Adam, constant learning rate),
// and the RMS of S_t − S_0.
//
// Theory. At init q, k have unit-variance components (W ~ N(0, 1/D) after LayerNorm), so
// q·k has spread √d_k: S ~ d_k^0 under 1/√d_k, d_k^−½ under 1/d_k. Adam moves every weight
// by about the learning rate, in the direction of its gradient; the changes of q line up
// with k, so Δ(q·k) adds d_k aligned terms: ΔS ~ d_k^{+½} under 1/√d_k and d_k^0 under 1/d_k,
// which is μP's reason for 1/d: a learning rate tuned at one width moves the logits as much
// at any other. With SGD the update is proportional to the gradient, which carries the
// scale itself: ΔS ~ scale²·d_k, i.e. d_k^0 under 1/√d_k and d_k^−1 under 1/d_k (the
// breaking configuration: 1/d is tied to Adam-like updates).
#include <fmt/format.h>

#include <cmath>

#include "attnlab/train.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct MupConfig {
  std::vector<int64_t> widths{16, 32, 64, 128, 256, 512, 1024};
  int64_t d_model = 32;
  int64_t steps = 10;
  int64_t seeds = 3;
  std::string optimizer = "adam";
  double lr = 3e-3;
  int64_t batch = 32;
  int64_t probe = 256;            // held-out examples the logits are measured on
  double slope_tolerance = 0.15;  // fitted power of d_k within this of the theory
  void bind(Params& p) {
    using namespace rules;
    p.add("widths", widths, "head widths d_k (d_model stays fixed: only the attention widens)", at_least_items(2) & each(at_least(1)) & increasing());
    p.add("d_model", d_model, "residual width of the model", positive());
    p.add("steps", steps, "optimiser steps traced from initialisation", positive());
    p.add("seeds", seeds, "seeds per (policy, width)", positive());
    p.add("optimizer", optimizer, "adam (μP's setting) or sgd (the breaking configuration)", util::optimizer_rule());
    p.add("lr", lr, "constant learning rate, shared by every width and policy", positive());
    p.add("batch", batch, "training batch", positive());
    p.add("probe", probe, "held-out examples the logits are measured on", positive());
    p.add("slope_tolerance", slope_tolerance, "a fitted power of d_k agrees with the theory within this", positive());
  }
};

struct Policy {
  ScalePolicy scale;
  double init_power;    // theory: RMS logit at init ∝ d_k^init_power
  double change_power;  // theory, with Adam: RMS change after the first steps ∝ d_k^change_power
};

std::vector<Policy> policies() {
  return {{ScalePolicy::inv_sqrt_d(), 0.0, 0.5}, {ScalePolicy::inv_d(), -0.5, 0.0}};
}

struct Measured {
  Table table{"mup_logits", {"policy", "d_k", "seed", "step", "rms_logit", "rms_change"}};
  // [policy][width] the mean over seeds, per step
  std::vector<std::vector<std::vector<double>>> rms, change;
  bool diverged = false;
};

Measured measure(const MupConfig& c, train::OptimizerKind optimizer, RunContext& ctx) {
  const auto pol = policies();
  const size_t np = pol.size(), nw = c.widths.size(), ns = static_cast<size_t>(c.seeds);
  const auto steps = static_cast<size_t>(c.steps);
  std::vector<train::LogitTrace> traces(np * nw * ns);
  ctx.report(fmt::format("{} policies × d_k = {}..{} × {} seeds, {} steps each", np, c.widths.front(), c.widths.back(),
                         c.seeds, c.steps));
  util::parallel_for(static_cast<int64_t>(traces.size()), ctx.threads, [&](int64_t i) {
    const size_t pi = static_cast<size_t>(i) / (nw * ns), wi = static_cast<size_t>(i) / ns % nw, si = static_cast<size_t>(i) % ns;
    train::RunConfig r;
    r.task.kind = train::TaskKind::associative_recall;
    r.model.d_model = c.d_model;
    r.model.d_k = c.widths[wi];
    r.model.scale = pol[pi].scale;
    r.optimizer = optimizer;
    r.lr = c.lr;
    r.steps = c.steps;
    r.warmup = 0;
    r.batch = c.batch;
    r.eval_examples = c.probe;
    r.seed = ctx.seed * 1000 + si + 1;
    traces[static_cast<size_t>(i)] = train::trace_logits(r, c.steps);
  });
  Measured m;
  m.rms.assign(np, std::vector<std::vector<double>>(nw, std::vector<double>(steps + 1, 0)));
  m.change = m.rms;
  for (size_t pi = 0; pi < np; ++pi)
    for (size_t wi = 0; wi < nw; ++wi)
      for (size_t si = 0; si < ns; ++si) {
        const auto& t = traces[(pi * nw + wi) * ns + si];
        m.diverged = m.diverged || t.diverged;
        for (size_t step = 0; step <= steps; ++step) {
          const double rms = step < t.rms.size() ? t.rms[step] : NAN, change = step < t.change.size() ? t.change[step] : NAN;
          m.rms[pi][wi][step] += rms / static_cast<double>(ns);
          m.change[pi][wi][step] += change / static_cast<double>(ns);
          m.table.add_row({static_cast<double>(pi), static_cast<double>(c.widths[wi]), static_cast<double>(si),
                           static_cast<double>(step), rms, change});
        }
      }
  return m;
}

const char* optimizer_name(const MupConfig& c) { return c.optimizer == "sgd" ? "SGD" : "Adam"; }

std::vector<double> at_step(const std::vector<std::vector<double>>& per_width, size_t step) {
  std::vector<double> out;
  for (const auto& w : per_width) out.push_back(w[step]);
  return out;
}

// A theory line of the given power through the measured value at the smallest width.
std::vector<double> power_line(const std::vector<double>& xs, double y0, double power) {
  std::vector<double> out;
  for (double x : xs) out.push_back(y0 * std::pow(x / xs.front(), power));
  return out;
}

Figure figure_mup(const MupConfig& c, const Measured& m, const Words& words) {
  const auto pol = policies();
  const auto xs = util::to_double(c.widths);
  Figure f;
  f.name = "mup_coordinate_check";
  words.fill(
      f, "figure",
      {{"d_model", c.d_model}, {"seeds", c.seeds}, {"optimizer", optimizer_name(c)}, {"lr", c.lr}, {"steps", c.steps}});
  const size_t last = static_cast<size_t>(c.steps);
  struct View {
    std::string title;
    bool change;
    size_t step;
  };
  for (const View& view : {View{"at initialisation", false, 0}, View{"change after step 1", true, 1},
                           View{words("figure.panel_last", {{"steps", c.steps}}), true, last}}) {
    Panel p = util::panel(view.title, "d_k (head width)", view.change ? "RMS of S_t − S_0" : "RMS logit", true, true);
    std::vector<Series> theory;
    for (size_t pi = 0; pi < pol.size(); ++pi) {
      const auto ys = at_step(view.change ? m.change[pi] : m.rms[pi], view.step);
      const std::string col = util::policy_colour(pol[pi].scale);
      p.series.push_back(util::series(util::policy_label(pol[pi].scale), Style::linespoints, xs, ys, col));
      theory.push_back(util::series("", Style::theory, xs,
                                    power_line(xs, ys.front(), view.change ? pol[pi].change_power : pol[pi].init_power), col));
    }
    p.series.insert(p.series.end(), theory.begin(), theory.end());
    p.legend_position = "below";
    f.panels.push_back(p);
  }
  util::stack_panels(f);
  return f;
}

Verdict verdict_c16(const MupConfig& c, const Measured& m, const Words& words) {
  const auto pol = policies();
  const auto xs = util::to_double(c.widths);
  const size_t last = static_cast<size_t>(c.steps);
  std::vector<double> init_slope, change_slope;
  for (size_t pi = 0; pi < pol.size(); ++pi) {
    init_slope.push_back(util::loglog_slope(xs, at_step(m.rms[pi], 0)));
    change_slope.push_back(util::loglog_slope(xs, at_step(m.change[pi], last)));
  }
  bool all_agree = true;
  for (size_t pi = 0; pi < pol.size(); ++pi)
    all_agree = all_agree && std::abs(init_slope[pi] - pol[pi].init_power) <= c.slope_tolerance &&
                std::abs(change_slope[pi] - pol[pi].change_power) <= c.slope_tolerance;
  // What μP is for: 1/d_k's change depends less on width than 1/√d_k's.
  const bool flatter = std::abs(change_slope[1]) < std::abs(change_slope[0]) &&
                       std::abs(change_slope[1]) <= c.slope_tolerance;
  Verdict v = make_verdict("C16");
  v.theory = pol[1].change_power;
  v.measured = change_slope[1];
  v.tolerance = c.slope_tolerance;
  v.outcome = !flatter ? Outcome::refuted : all_agree ? Outcome::confirmed : Outcome::inconclusive;
  v.figure = "mup_coordinate_check";
  const double w0 = xs.front(), w1 = xs.back();
  auto growth = [&](size_t pi) { return std::pow(w1 / w0, change_slope[pi]); };
  auto times = [&](double g) {
    return g >= 1 ? words("times_more", {{"factor", util::pretty(g)}})
                  : words("times_less", {{"factor", util::pretty(1 / g)}});
  };
  words.fill(v, "c16",
             {{"d_first", c.widths.front()},
              {"d_last", c.widths.back()},
              {"steps", c.steps},
              {"optimizer_key", c.optimizer},
              {"optimizer", optimizer_name(c)},
              {"lr", c.lr},
              {"seeds", c.seeds},
              {"init_sqrt", init_slope[0]},
              {"init_d", init_slope[1]},
              {"change_sqrt", change_slope[0]},
              {"change_d", change_slope[1]},
              {"diverged", m.diverged ? words("c16.diverged") : ""},
              {"tolerance", c.slope_tolerance},
              {"growth_sqrt", times(growth(0))},
              {"growth_d", times(growth(1))},
              {"conclusion", words(flatter ? "c16.flatter" : "c16.not_flatter")}});
  return v;
}

Result run_mup(const MupConfig& c, RunContext& ctx) {
  const train::OptimizerKind optimizer = train::parse_optimizer(c.optimizer);
  const Measured m = measure(c, optimizer, ctx);
  const Words words("mup");
  Result r;
  r.setup = words("setup", {{"d_model", c.d_model},
                            {"d_first", c.widths.front()},
                            {"d_last", c.widths.back()},
                            {"optimizer_long", c.optimizer == "sgd" ? "SGD with momentum" : "Adam"},
                            {"lr", c.lr},
                            {"batch", c.batch},
                            {"seeds", c.seeds},
                            {"probe", c.probe}});
  r.tables = {m.table};
  r.notes.push_back(words("note"));
  r.figures = {figure_mup(c, m, words)};
  r.verdicts = {verdict_c16(c, m, words)};
  return r;
}

}  // namespace

Experiment mup_experiment() {
  return make_experiment<MupConfig>("mup", "μP's 1/d attention scale: a coordinate check of the logits across head widths in the first steps of training",
                                    {"C16"}, run_mup, {{"widths", "16,64,256,1024"}, {"seeds", "2"}, {"steps", "5"}});
}

}  // namespace attnlab::lab
