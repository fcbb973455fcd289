#include "lab/lm_figures.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/statistics.hpp"
#include "lab/lab_util.hpp"
#include "lab/seed_band.hpp"

namespace attnlab::lab::lm_figures {

using namespace attnlab::train::lm;

namespace {

std::string optimizer_words(LmOptimizer o, const Words& words) {
  return words(o == LmOptimizer::adamw ? "optimizer.adamw" : "optimizer.sgd");
}

// The runs of one cell (group, d_k, arm) of the evaluation study.
std::vector<const LmRunResult*> runs_of(const LmStudyResult& s, size_t group, int64_t d_k, const Arm& arm) {
  const std::vector<RunPlace> where = places(s.config);
  std::vector<const LmRunResult*> out;
  for (size_t i = 0; i < s.runs.size(); ++i)
    if (where[i].group == group && where[i].arm == arm && s.runs[i].config.model.d_k == d_k) out.push_back(&s.runs[i]);
  return out;
}

// The median over seeds and its range, along training.
template <class F>
SeedBand aggregate(const std::vector<const LmRunResult*>& runs, F field) {
  return seed_band(runs, field, [](const std::vector<double>& v) { return stats::median(v); });
}

// One group's validation loss along training at one d_k (one panel: a figure per d_k keeps
// each under a screen's height).
Figure curves(const LmStudyResult& s, size_t gi, int64_t d_k, double bigram, const Words& words) {
  const LmGroup& g = s.config.groups[gi];
  const auto& b = s.config.base;
  Figure f;
  f.name = curves_name(g, d_k);
  words.fill(f, "curves",
             {{"init", to_string(g.init)},
              {"optimizer", optimizer_words(g.optimizer, words)},
              {"d_k", d_k},
              {"steps", b.steps},
              {"batch", b.batch},
              {"context", b.model.context},
              {"seeds", s.config.seeds},
              {"bigram", bigram}});
  Panel p = util::panel("", "step", "validation bits per character");
  // From just under the lowest loss reached (or the baseline) to 1.5 bits above the baseline:
  // the start, near log₂ of the alphabet, is cut off so that the differences at the end show.
  double lowest = bigram - 0.3;
  p.legend_position = "below";
  for (const Arm& arm : g.arms) {
    const SeedBand a = aggregate(runs_of(s, gi, d_k, arm), [](const LmCurvePoint& c) { return c.val_bpc; });
    for (double y : a.lo) lowest = std::min(lowest, y - 0.1);
    p.series.push_back(util::band("", a.step, a.lo, a.hi, arm_colour(arm)));
    p.series.push_back(util::series(arm.label(), Style::lines, a.step, a.centre, arm_colour(arm)));
  }
  p.y_min = std::max(0.0, lowest);
  p.y_max = bigram + 1.5;
  p.series.push_back(
      util::series("bigram baseline", Style::theory, {0.0, static_cast<double>(b.steps)}, {bigram, bigram}, "#777777"));
  f.panels.push_back(std::move(p));
  util::stack_panels(f, 260);
  return f;
}

// One group's final loss against d_k.
Figure final_loss(const LmStudyResult& s, const std::vector<LmCell>& cells, size_t gi, double bigram,
                  const Words& words) {
  const LmGroup& g = s.config.groups[gi];
  Figure f;
  f.name = fmt::format("lm_final_{}_{}", to_string(g.init), to_string(g.optimizer));
  words.fill(f, "final",
             {{"init", to_string(g.init)},
              {"optimizer", optimizer_words(g.optimizer, words)},
              {"steps", s.config.base.steps},
              {"batch", s.config.base.batch},
              {"seeds", s.config.seeds}});
  const std::vector<double> xs = util::to_double(s.config.d_ks);
  // Room for the highest final loss above the baseline; a diverged run is drawn at the top
  // edge, one bit above the baseline, so that it shows.
  double top = bigram + 0.1;
  for (const auto& c : cells)
    if (c.group == gi)
      for (double y : {c.median_final, c.min_final, c.max_final})
        top = std::isfinite(y) ? std::max(top, std::min(y + 0.1, bigram + 1)) : bigram + 1;
  auto clipped = [top](double y) { return std::isfinite(y) ? std::min(y, top) : top; };  // diverged: the top edge
  Panel p = util::panel("", "d_k", "final validation bpc", true, false);
  p.x_tics = xs;
  p.y_max = top;
  p.legend_position = "below";
  for (const Arm& arm : g.arms) {
    std::vector<double> med, lo, hi;
    for (int64_t d : s.config.d_ks) {
      double m = kNaN, l = kNaN, h = kNaN;
      for (const auto& c : cells)
        if (c.group == gi && c.d_k == d && c.arm == arm)
          m = clipped(c.median_final), l = clipped(c.min_final), h = clipped(c.max_final);
      med.push_back(m), lo.push_back(l), hi.push_back(h);
    }
    p.series.push_back(util::band("", xs, lo, hi, arm_colour(arm)));
    p.series.push_back(util::series(arm.label(), Style::linespoints, xs, med, arm_colour(arm)));
  }
  p.series.push_back(util::series("bigram baseline", Style::theory, {xs.front(), xs.back()}, {bigram, bigram}, "#777777"));
  f.panels.push_back(std::move(p));
  util::stack_panels(f, 260);
  return f;
}

// Per layer, entropy and largest weight along training at the largest d_k, for one group's arm.
Figure attention(const LmStudyResult& s, size_t gi, const Arm& arm, const Words& words) {
  const LmGroup& g = s.config.groups[gi];
  const int64_t d_max = *std::max_element(s.config.d_ks.begin(), s.config.d_ks.end());
  Figure f;
  f.name = fmt::format("lm_attention_{}_{}_{}", to_string(g.init), to_string(g.optimizer), arm.name());
  words.fill(f, "attention",
             {{"d_k", d_max},
              {"init", to_string(g.init)},
              {"optimizer", optimizer_words(g.optimizer, words)},
              {"eval_every", s.config.base.eval_every},
              {"seeds", s.config.seeds},
              {"steps", s.config.base.steps}});
  const auto runs = runs_of(s, gi, d_max, arm);
  const size_t layers = static_cast<size_t>(s.config.base.model.n_layers);
  for (int which = 0; which < 2; ++which) {
    Panel p = util::panel(words(which == 0 ? "attention.panel_entropy" : "attention.panel_max", {{"arm", arm.label()}}),
                          "step", which == 0 ? "entropy (nats)" : "largest weight");
    p.y_min = 0;
    if (which == 1) p.y_max = 1.02;
    p.legend_position = "below";
    for (size_t l = 0; l < layers; ++l) {
      const SeedBand a = aggregate(runs, [l, which](const LmCurvePoint& c) {
        const auto& v = which == 0 ? c.entropy : c.max_prob;
        return l < v.size() ? v[l] : kNaN;
      });
      p.series.push_back(util::series(fmt::format("layer {}", l + 1), Style::linespoints, a.step, a.centre, util::colour(l)));
    }
    f.panels.push_back(std::move(p));
  }
  util::stack_panels(f, 220);
  return f;
}

Figure gradients(const LmStudyResult& s, const Words& words) {
  const int64_t d_max = *std::max_element(s.config.d_ks.begin(), s.config.d_ks.end());
  Figure f;
  f.name = "lm_gradients";
  words.fill(f, "gradients", {{"d_k", d_max}, {"seeds", s.config.seeds}, {"steps", s.config.base.steps}});
  for (size_t gi = 0; gi < s.config.groups.size(); ++gi) {
    const LmGroup& g = s.config.groups[gi];
    Panel p = util::panel(words("group", {{"init", to_string(g.init)}, {"optimizer", optimizer_words(g.optimizer, words)}}),
                          "step", "||dL/dW||_F", false, true);
    p.legend_position = "below";
    for (const Arm& arm : g.arms) {
      if (!(arm == Arm::none() || arm == Arm::inv_sqrt_d())) continue;  // C8's pair: the other arms are in lm_curves.csv
      const auto runs = runs_of(s, gi, d_max, arm);
      const SeedBand q = aggregate(runs, [](const LmCurvePoint& c) { return c.grad_norm_q > 0 ? c.grad_norm_q : kNaN; });
      const SeedBand k = aggregate(runs, [](const LmCurvePoint& c) { return c.grad_norm_k > 0 ? c.grad_norm_k : kNaN; });
      p.series.push_back(util::series(arm.label() + ", W_q", Style::lines, q.step, q.centre, arm_colour(arm)));
      p.series.push_back(util::series(arm.label() + ", W_k", Style::linespoints, k.step, k.centre, arm_colour(arm)));
    }
    f.panels.push_back(std::move(p));
  }
  util::stack_panels(f, 200);
  return f;
}

}  // namespace

std::string curves_name(const LmGroup& g, int64_t d_k) {
  return fmt::format("lm_curves_{}_{}_dk{}", to_string(g.init), to_string(g.optimizer), d_k);
}

std::string arm_colour(const Arm& arm) {
  switch (arm.kind) {
    case Arm::Kind::inv_sqrt_d: return util::policy_colour(ScalePolicy::inv_sqrt_d());
    case Arm::Kind::none: return util::policy_colour(ScalePolicy::none());
    case Arm::Kind::inv_d: return util::policy_colour(ScalePolicy::inv_d());
    case Arm::Kind::alpha_sqrt: return arm.alpha <= 2 ? "#56B4E9" : "#CC79A7";  // sky blue, then reddish purple
    case Arm::Kind::qk_norm: return "#000000";
  }
  return "#000000";
}

std::vector<Figure> all(const LmStudyResult& s, const std::vector<LmCell>& cells, double bigram, const Words& words) {
  std::vector<Figure> out;
  for (size_t gi = 0; gi < s.config.groups.size(); ++gi)
    for (int64_t d : s.config.d_ks) out.push_back(curves(s, gi, d, bigram, words));
  if (s.config.d_ks.size() > 1)
    for (size_t gi = 0; gi < s.config.groups.size(); ++gi) out.push_back(final_loss(s, cells, gi, bigram, words));
  out.push_back(gradients(s, words));
  for (size_t gi = 0; gi < s.config.groups.size(); ++gi)
    for (const Arm& arm : s.config.groups[gi].arms)
      if (s.config.groups[gi].optimizer == LmOptimizer::adamw && (arm == Arm::none() || arm == Arm::inv_sqrt_d()))
        out.push_back(attention(s, gi, arm, words));
  return out;
}

}  // namespace attnlab::lab::lm_figures
