#include "lab/train_figures.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lab/lab_util.hpp"
#include "lab/seed_band.hpp"

namespace attnlab::lab::train_figures {

using namespace attnlab::train;

std::string Group::tag() const { return fmt::format("{}_{}_{}", to_string(task), to_string(init), to_string(opt)); }

std::string policy_label(const Scaling& s) {
  return s.qk_norm ? "qk-norm + learned temperature" : util::policy_label(s.policy);
}
std::string policy_colour(const Scaling& s) { return s.qk_norm ? "#000000" : util::policy_colour(s.policy); }

namespace {

// "Adam" or "SGD", as the figures name the optimiser.
std::string optimizer_name(OptimizerKind o, const Words& words) {
  return words(o == OptimizerKind::adam ? "optimizer.adam" : "optimizer.sgd");
}

// A learning figure's budget for its caption: optimiser, steps, batch, schedule, rates and seeds.
std::string budget_words(const StudyResult& s, OptimizerKind opt, const Words& words) {
  const RunConfig& b = s.config.base;
  const double fixed = opt == OptimizerKind::adam ? s.config.adam_lr : s.config.sgd_lr;
  const std::string rate = !s.config.tuned.empty() ? words("budget.rate_per_cell")
                                                   : words("budget.rate_fixed", {{"lr", fixed > 0 ? fixed : default_lr(opt)}});
  return words("budget", {{"optimizer", optimizer_name(opt, words)},
                          {"steps", b.steps},
                          {"batch", b.batch},
                          {"warmup", b.warmup},
                          {"rate", rate},
                          {"seeds", s.config.seeds}});
}

std::vector<const RunResult*> runs_of(const StudyResult& s, const Group& g, int64_t d_k, const Scaling& scale) {
  std::vector<const RunResult*> out;
  for (const auto& r : s.runs)
    if (r.config.task.kind == g.task && r.config.model.init == g.init && r.config.optimizer == g.opt &&
        r.config.model.d_k == d_k && r.config.model.scale == scale)
      out.push_back(&r);
  return out;
}

// The mean over seeds and its range, along training.
template <class F>
SeedBand aggregate(const std::vector<const RunResult*>& runs, F field) {
  return seed_band(runs, field, [](const std::vector<double>& v) { return util::mean(v); });
}

}  // namespace

Figure learning_curves(const StudyResult& s, const Group& g, const Words& words) {
  Figure f;
  f.name = "train_curves_" + g.tag();
  words.fill(f, "curves",
             {{"task", to_string(g.task)},
              {"init", to_string(g.init)},
              {"optimizer", optimizer_name(g.opt, words)},
              {"budget", budget_words(s, g.opt, words)},
              {"seeds", s.config.seeds}});
  for (size_t di = 0; di < s.config.d_ks.size(); ++di) {
    const int64_t d = s.config.d_ks[di];
    Panel p = util::panel(words("curves.panel", {{"d_k", d}}), "step", "held-out accuracy");
    p.y_min = 0;
    p.y_max = 1.05;
    p.legend_position = "below";
    for (size_t si = 0; si < s.config.scales.size(); ++si) {
      const Scaling& sc = s.config.scales[si];
      const SeedBand a = aggregate(runs_of(s, g, d, sc), [](const CurvePoint& c) { return c.eval_accuracy; });
      p.series.push_back(util::band("", a.step, a.lo, a.hi, policy_colour(sc)));
      p.series.push_back(util::series(policy_label(sc), Style::lines, a.step, a.centre, policy_colour(sc)));
    }
    f.panels.push_back(std::move(p));
  }
  util::stack_panels(f);
  return f;
}

Figure steps_to_threshold(const StudyResult& s, const std::vector<Group>& groups, const std::vector<CellSummary>& cells,
                          const Words& words) {
  Figure f;
  f.name = "train_steps_to_threshold";
  const double censor = static_cast<double>(s.config.base.steps + s.config.base.eval_every);
  std::string budgets;
  for (OptimizerKind opt : s.config.optimizers) {
    if (!budgets.empty()) budgets += "; ";
    budgets += budget_words(s, opt, words);
  }
  words.fill(f, "steps",
             {{"threshold", 100 * s.config.base.threshold},
              {"steps", s.config.base.steps},
              {"censor", censor},
              {"budget", budgets}});
  const std::vector<double> xs = util::to_double(s.config.d_ks);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    Panel p = util::panel(
        words("group", {{"task", to_string(g.task)}, {"init", to_string(g.init)}, {"optimizer", to_string(g.opt)}}),
        "d_k", "steps to threshold", true, false);
    p.x_tics = xs;
    p.y_min = 0;
    p.y_max = censor * 1.08;
    p.legend_position = "below";
    for (size_t si = 0; si < s.config.scales.size(); ++si) {
      const Scaling& sc = s.config.scales[si];
      std::vector<double> med, lo, hi;
      for (int64_t d : s.config.d_ks) {
        double m = kNaN;
        for (const auto& c : cells)
          if (c.task == g.task && c.init == g.init && c.optimizer == g.opt && c.d_k == d && c.scale == sc)
            m = c.median_steps;
        std::vector<double> v;
        for (const auto* r : runs_of(s, g, d, sc))
          v.push_back(r->steps_to_threshold >= 0 ? static_cast<double>(r->steps_to_threshold) : censor);
        med.push_back(m);
        lo.push_back(v.empty() ? kNaN : *std::min_element(v.begin(), v.end()));
        hi.push_back(v.empty() ? kNaN : *std::max_element(v.begin(), v.end()));
      }
      p.series.push_back(util::band("", xs, lo, hi, policy_colour(sc)));
      p.series.push_back(util::series(policy_label(sc), Style::linespoints, xs, med, policy_colour(sc)));
    }
    p.series.push_back(
        util::series("budget (never reached)", Style::theory, {xs.front(), xs.back()}, {censor, censor}, "#777777"));
    f.panels.push_back(std::move(p));
  }
  util::stack_panels(f);
  return f;
}

Figure attention_diagnostics(const StudyResult& s, TaskKind task, InitMode init, const Words& words) {
  const int64_t d_max = *std::max_element(s.config.d_ks.begin(), s.config.d_ks.end());
  Figure f;
  f.name = fmt::format("train_attention_{}_{}", to_string(task), to_string(init));
  std::string budgets;
  for (OptimizerKind opt : s.config.optimizers) {
    if (!budgets.empty()) budgets += "; ";
    budgets += budget_words(s, opt, words);
  }
  words.fill(f, "attention", {{"d_k", d_max}, {"task", to_string(task)}, {"init", to_string(init)}, {"budget", budgets}});
  for (size_t oi = 0; oi < s.config.optimizers.size(); ++oi) {
    const Group g{task, init, s.config.optimizers[oi]};
    for (int which = 0; which < 2; ++which) {
      Panel p = util::panel(
          words(which == 0 ? "attention.panel_entropy" : "attention.panel_jacobian", {{"optimizer", to_string(g.opt)}}),
          "step", which == 0 ? "entropy (nats)" : "||J||_F");
      p.y_min = 0;
      p.legend_position = "below";
      for (size_t si = 0; si < s.config.scales.size(); ++si) {
        const Scaling& sc = s.config.scales[si];
        const SeedBand a = aggregate(runs_of(s, g, d_max, sc),
                                      [which](const CurvePoint& c) { return which == 0 ? c.entropy : c.jacobian_fro; });
        p.series.push_back(util::series(policy_label(sc), Style::lines, a.step, a.centre, policy_colour(sc)));
      }
      f.panels.push_back(std::move(p));
    }
  }
  util::stack_panels(f);
  return f;
}

std::string mechanism_name(TaskKind task, InitMode init, OptimizerKind opt) {
  return fmt::format("train_mechanism_{}_{}_{}", to_string(task), to_string(init), to_string(opt));
}

Figure mechanism(const StudyResult& s, const std::vector<CellSummary>& cells, TaskKind task, InitMode init,
                 OptimizerKind opt, const Words& words) {
  Figure f;
  f.name = mechanism_name(task, init, opt);
  f.title = "";
  words.fill(f, "mechanism",
             {{"seeds", s.config.seeds},
              {"eval_every", s.config.base.eval_every},
              {"budget", budget_words(s, opt, words)}});
  const std::vector<double> xs = util::to_double(s.config.d_ks);
  {
    Panel pm = util::panel(words("mechanism.panel_max_p", {{"optimizer", optimizer_name(opt, words)}}), "d_k",
                           "mean max p", true, false);
    Panel pg = util::panel("gradient on W_q, W_k", "d_k", "||dL/dW||", true, true);
    Panel pa = util::panel("final accuracy", "d_k", "held-out accuracy", true, false);
    for (size_t si = 0; si < s.config.scales.size(); ++si) {
      const Scaling& sc = s.config.scales[si];
      std::vector<double> mp, grad, acc;
      for (int64_t d : s.config.d_ks) {
        double m = kNaN, g = kNaN, a = kNaN;
        for (const auto& c : cells)
          if (c.task == task && c.init == init && c.optimizer == opt && c.d_k == d && c.scale == sc)
            m = c.mean_max_prob_start, g = c.mean_grad_qk_first, a = c.mean_final_accuracy;
        mp.push_back(m), grad.push_back(g), acc.push_back(a);
      }
      const std::string label = policy_label(sc);
      pm.series.push_back(util::series(label, Style::linespoints, xs, mp, policy_colour(sc)));
      pg.series.push_back(util::series(label, Style::linespoints, xs, grad, policy_colour(sc)));
      pa.series.push_back(util::series(label, Style::linespoints, xs, acc, policy_colour(sc)));
    }
    // One legend, under the first panel: the three share their lines, and the figure stays a screen tall.
    for (auto* p : {&pm, &pg, &pa}) {
      p->x_tics = xs;
      p->legend_position = p == &pm ? "below" : "off";
    }
    pm.y_min = 0, pm.y_max = 1.05;
    pa.y_min = 0, pa.y_max = 1.05;
    f.panels.push_back(std::move(pm));
    f.panels.push_back(std::move(pg));
    f.panels.push_back(std::move(pa));
  }
  util::stack_panels(f);
  return f;
}

}  // namespace attnlab::lab::train_figures
