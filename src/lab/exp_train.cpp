// Experiment `train` (C8): the training study of attnlab/train.hpp registered
// with the lab. `attnlab run train` runs the quick sweep (the report's default),
// `attnlab run train --full` the whole sweep of issue 5. Any sweep parameter left
// empty (or 0) takes the chosen preset's value.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/train.hpp"
#include "lab/lab_util.hpp"
#include "lab/experiments.hpp"

namespace attnlab::lab {
namespace {

using namespace attnlab::train;

struct TrainExperimentConfig {
  bool full = false;
  std::vector<std::string> tasks;
  std::vector<int64_t> dims;
  std::vector<std::string> policies;
  std::vector<std::string> optimizers;
  std::vector<std::string> inits;
  int64_t seeds = 0, steps = 0, batch = 0, eval_every = 0, threads = 0;
  int64_t d_model = 0, layers = 0;
  double adam_lr = 0, sgd_lr = 0;
  double threshold = 0.9;
  bool layernorm = true;
  void bind(Params& p) {
    p.add("full", full, "run the whole sweep of issue 5 (else the quick one); empty parameters below take the preset's values");
    p.add("tasks", tasks, "tasks: recall, copy (quick: recall; full: recall,copy)");
    p.add("dims", dims, "d_k values (quick: 16,256; full: 16,64,256,1024)");
    p.add("policies", policies, "scale policies: none, inv_sqrt_d, inv_d, qknorm (default: these four), or any other "
                                "attnlab policy: entropy_invariant, ssmax[:S], a number");
    p.add("optimizers", optimizers, "adam, sgd (default: both)");
    p.add("inits", inits, "W_q/W_k init: unit (q, k components of variance 1), small (variance 1/d_k) (quick: unit; full: unit,small)");
    p.add("seeds", seeds, "seeds per cell (quick 3, full 5)");
    p.add("steps", steps, "optimiser steps per run (quick 300, full 800)");
    p.add("batch", batch, "sequences per step (default 32)");
    p.add("eval_every", eval_every, "steps between held-out evaluations (default 20)");
    p.add("threads", threads, "runs trained in parallel (default 2)");
    p.add("d_model", d_model, "embedding and residual width D (default 32)");
    p.add("layers", layers, "attention blocks, 1 or 2 (default 1)");
    p.add("adam_lr", adam_lr, "Adam's peak learning rate (default 3e-3)");
    p.add("sgd_lr", sgd_lr, "SGD's peak learning rate (default 0.03)");
    p.add("threshold", threshold, "held-out accuracy that counts as learnt");
    p.add("layernorm", layernorm, "pre-LN in each block and before the classifier");
  }
};

template <class E, class F>
std::vector<E> parse_list(const std::vector<std::string>& names, F parse, const std::vector<E>& preset) {
  if (names.empty()) return preset;
  std::vector<E> out;
  for (const auto& n : names) out.push_back(parse(n));
  return out;
}

StudyConfig study_of(const TrainExperimentConfig& c, uint64_t seed) {
  StudyConfig s = c.full ? full_study() : quick_study();
  std::vector<TaskKind> kinds;
  for (const auto& t : s.tasks) kinds.push_back(t.kind);
  kinds = parse_list<TaskKind>(c.tasks, parse_task, kinds);
  s.tasks.clear();
  for (TaskKind k : kinds) {
    TaskConfig t;
    t.kind = k;
    s.tasks.push_back(t);
  }
  if (!c.dims.empty()) {
    util::require_positive("dims", c.dims);
    s.d_ks = c.dims;
  }
  s.scales = parse_list<Scaling>(c.policies, Scaling::parse, s.scales);
  s.optimizers = parse_list<OptimizerKind>(c.optimizers, parse_optimizer, s.optimizers);
  s.inits = parse_list<InitMode>(c.inits, parse_init_mode, s.inits);
  auto set = [](const char* key, int64_t value, int64_t& field) {
    if (value < 0) throw Error(fmt::format("{}: {} is negative (0 = the preset's value)", key, value));
    if (value > 0) field = value;
  };
  set("seeds", c.seeds, s.seeds);
  set("steps", c.steps, s.base.steps);
  set("batch", c.batch, s.base.batch);
  set("eval_every", c.eval_every, s.base.eval_every);
  set("d_model", c.d_model, s.base.model.d_model);
  set("layers", c.layers, s.base.model.n_layers);
  int64_t threads = s.threads;
  set("threads", c.threads, threads);
  s.threads = static_cast<int>(std::min<int64_t>(threads, 64));
  s.base.warmup = std::min(s.base.warmup, s.base.steps / 10);
  if (!(c.adam_lr >= 0) || !(c.sgd_lr >= 0)) throw Error("adam_lr, sgd_lr: must be ≥ 0 (0 = default)");
  s.adam_lr = c.adam_lr;
  s.sgd_lr = c.sgd_lr;
  if (!(c.threshold > 0 && c.threshold <= 1)) throw Error(fmt::format("threshold: {} is not in (0, 1]", c.threshold));
  s.base.threshold = c.threshold;
  s.base.model.layernorm = c.layernorm;
  s.first_seed = 1 + 1000 * seed;  // lab --seed N shifts every run's seed
  return s;
}

double code(TaskKind t) { return t == TaskKind::associative_recall ? 0 : 1; }
double code(InitMode i) { return i == InitMode::unit ? 0 : 1; }
double code(OptimizerKind o) { return o == OptimizerKind::adam ? 0 : 1; }
// The study's four scalings keep the codes 0–3 they have always had; the other
// policies follow (the notes say which is which).
double code(const Scaling& s) {
  if (s.qk_norm) return 3;
  switch (s.policy.kind()) {
    case ScalePolicy::Kind::none: return 0;
    case ScalePolicy::Kind::inv_sqrt_d: return 1;
    case ScalePolicy::Kind::inv_d: return 2;
    case ScalePolicy::Kind::entropy_invariant: return 4;
    case ScalePolicy::Kind::scalable_softmax: return 5;
    case ScalePolicy::Kind::fixed: return 6;
  }
  return kNaN;
}

std::string policy_label(const Scaling& s) {
  if (s.qk_norm) return "qk-norm + learned temperature";
  switch (s.policy.kind()) {
    case ScalePolicy::Kind::none: return "none (unscaled)";
    case ScalePolicy::Kind::inv_sqrt_d: return "1/sqrt(d_k)";
    case ScalePolicy::Kind::inv_d: return "1/d_k";
    default: return s.policy.name();
  }
}

struct Group {  // one (task, init, optimiser)
  TaskKind task;
  InitMode init;
  OptimizerKind opt;
  std::string tag() const { return fmt::format("{}_{}_{}", to_string(task), to_string(init), to_string(opt)); }
};

std::vector<const RunResult*> runs_of(const StudyResult& s, const Group& g, int64_t d_k, const Scaling& scale) {
  std::vector<const RunResult*> out;
  for (const auto& r : s.runs)
    if (r.config.task.kind == g.task && r.config.model.init == g.init && r.config.optimizer == g.opt &&
        r.config.model.d_k == d_k && r.config.model.scale == scale)
      out.push_back(&r);
  return out;
}

// Mean and min..max over seeds of one curve field, on the evaluation steps of the
// first run (runs that diverged stop early: their missing points are left out).
struct Aggregate {
  std::vector<double> step, mean, lo, hi;
};
template <class F>
Aggregate aggregate(const std::vector<const RunResult*>& runs, F field) {
  Aggregate a;
  size_t longest = 0;
  for (const auto* r : runs) longest = std::max(longest, r->curve.size());
  for (size_t i = 0; i < longest; ++i) {
    std::vector<double> v;
    double step = 0;
    for (const auto* r : runs)
      if (i < r->curve.size() && std::isfinite(field(r->curve[i]))) {
        v.push_back(field(r->curve[i]));
        step = static_cast<double>(r->curve[i].step);
      }
    if (v.empty()) continue;
    a.step.push_back(step);
    a.mean.push_back(util::mean(v));
    a.lo.push_back(*std::min_element(v.begin(), v.end()));
    a.hi.push_back(*std::max_element(v.begin(), v.end()));
  }
  return a;
}

Figure learning_curves(const StudyResult& s, const Group& g) {
  Figure f;
  f.name = "train_curves_" + g.tag();
  f.title = fmt::format("C8: held-out accuracy while training ({} task, {} init, {})", to_string(g.task),
                        to_string(g.init), to_string(g.opt));
  f.caption = fmt::format(
      "Mean over {} seeds (line) and min..max (band) of the held-out accuracy, one panel per d_k. Without the scale "
      "the curve stays near chance longer as d_k grows if C8 holds.",
      s.config.seeds);
  f.layout_rows = 1;
  f.layout_cols = static_cast<int>(s.config.d_ks.size());
  f.width = std::max(900, 380 * f.layout_cols);
  f.height = 420;
  for (size_t di = 0; di < s.config.d_ks.size(); ++di) {
    const int64_t d = s.config.d_ks[di];
    Panel p = util::panel(fmt::format("d_k = {}", d), "step", "held-out accuracy");
    p.y_min = 0;
    p.y_max = 1.05;
    p.legend_position = di == 0 ? "bottom right" : "off";
    for (size_t si = 0; si < s.config.scales.size(); ++si) {
      const Scaling& sc = s.config.scales[si];
      const Aggregate a = aggregate(runs_of(s, g, d, sc), [](const CurvePoint& c) { return c.eval_accuracy; });
      p.series.push_back(util::band("", a.step, a.lo, a.hi, util::colour(si)));
      p.series.push_back(util::series(policy_label(sc), Style::lines, a.step, a.mean, util::colour(si)));
    }
    f.panels.push_back(std::move(p));
  }
  return f;
}

Figure steps_figure(const StudyResult& s, const std::vector<Group>& groups, const std::vector<CellSummary>& cells) {
  Figure f;
  f.name = "train_steps_to_threshold";
  f.title = fmt::format("C8: steps to {:.0f}% held-out accuracy against d_k", 100 * s.config.base.threshold);
  const double censor = static_cast<double>(s.config.base.steps + s.config.base.eval_every);
  f.caption = fmt::format(
      "Median over seeds (points) and min..max (band). A run that never reached the threshold within {} steps is "
      "drawn at {:.0f} (the dashed budget line): a point on that line means most seeds never learnt.",
      s.config.base.steps, censor);
  f.layout_cols = static_cast<int>(std::min<size_t>(groups.size(), 2));
  f.layout_rows = static_cast<int>((groups.size() + 1) / 2);
  f.width = 1000;
  f.height = 420 * f.layout_rows;
  const std::vector<double> xs = util::to_double(s.config.d_ks);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    Panel p = util::panel(fmt::format("{} task, {} init, {}", to_string(g.task), to_string(g.init), to_string(g.opt)),
                          "d_k", "steps to threshold", true, false);
    p.x_tics = xs;
    p.y_min = 0;
    p.y_max = censor * 1.08;
    p.legend_position = gi == 0 ? "top left" : "off";
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
      p.series.push_back(util::band("", xs, lo, hi, util::colour(si)));
      p.series.push_back(util::series(policy_label(sc), Style::linespoints, xs, med, util::colour(si)));
    }
    p.series.push_back(util::series("budget (never reached)", Style::theory, {xs.front(), xs.back()}, {censor, censor},
                                    "#777777"));
    f.panels.push_back(std::move(p));
  }
  return f;
}

// Attention entropy and mean ‖J‖_F along training at the largest d_k: the mechanism.
Figure diagnostics_figure(const StudyResult& s, TaskKind task, InitMode init) {
  const int64_t d_max = *std::max_element(s.config.d_ks.begin(), s.config.d_ks.end());
  Figure f;
  f.name = fmt::format("train_attention_{}_{}", to_string(task), to_string(init));
  f.title = fmt::format("C8: the attention of the classifying position while training, d_k = {} ({} task, {} init)",
                        d_max, to_string(task), to_string(init));
  f.caption =
      "Mean over seeds of the attention entropy (nats) and of ||diag(p) - p p^T||_F of the rows that feed the "
      "classifier, from the engine's row diagnostics on the held-out set. A saturated softmax has entropy and "
      "||J||_F near 0 and passes almost no gradient to W_q and W_k.";
  f.layout_rows = static_cast<int>(s.config.optimizers.size());
  f.layout_cols = 2;
  f.width = 1000;
  f.height = 380 * f.layout_rows;
  for (size_t oi = 0; oi < s.config.optimizers.size(); ++oi) {
    const Group g{task, init, s.config.optimizers[oi]};
    for (int which = 0; which < 2; ++which) {
      Panel p = util::panel(fmt::format("{}: {}", to_string(g.opt), which == 0 ? "attention entropy" : "mean ||J||_F"),
                            "step", which == 0 ? "entropy (nats)" : "||J||_F");
      p.y_min = 0;
      p.legend_position = oi == 0 && which == 0 ? "top right" : "off";
      for (size_t si = 0; si < s.config.scales.size(); ++si) {
        const Scaling& sc = s.config.scales[si];
        const Aggregate a = aggregate(runs_of(s, g, d_max, sc), [which](const CurvePoint& c) {
          return which == 0 ? c.entropy : c.jacobian_fro;
        });
        p.series.push_back(util::series(policy_label(sc), Style::lines, a.step, a.mean, util::colour(si)));
      }
      f.panels.push_back(std::move(p));
    }
  }
  return f;
}

Table cells_table(const std::vector<CellSummary>& cells) {
  Table t("train_cells", {"task", "init", "optimizer", "d_k", "scale", "runs", "reached", "median_steps",
                          "median_censored", "mean_final_accuracy", "min_final_accuracy", "entropy_start",
                          "entropy_end", "jacobian_fro_start", "jacobian_fro_end", "grad_qk_first", "diverged"});
  for (const auto& c : cells)
    t.add_row({code(c.task), code(c.init), code(c.optimizer), static_cast<double>(c.d_k), code(c.scale),
               static_cast<double>(c.runs), static_cast<double>(c.reached), c.median_steps,
               c.median_censored ? 1.0 : 0.0, c.mean_final_accuracy, c.min_final_accuracy, c.mean_entropy_start,
               c.mean_entropy_end, c.mean_jacobian_start, c.mean_jacobian_end, c.mean_grad_qk_first,
               static_cast<double>(c.diverged)});
  return t;
}

Table runs_table(const StudyResult& s) {
  Table t("train_runs", {"task", "init", "optimizer", "d_k", "scale", "seed", "lr", "steps_to_threshold",
                         "final_accuracy", "final_loss", "diverged", "entropy_init", "jacobian_fro_init",
                         "grad_qk_first"});  // no run time here: data files are a function of the seed
  for (const auto& r : s.runs) {
    const auto& c = r.config;
    t.add_row({code(c.task.kind), code(c.model.init), code(c.optimizer), static_cast<double>(c.model.d_k),
               code(c.model.scale), static_cast<double>(c.seed), c.lr > 0 ? c.lr : default_lr(c.optimizer),
               r.steps_to_threshold >= 0 ? static_cast<double>(r.steps_to_threshold) : kNaN, r.final_accuracy,
               r.final_loss, r.diverged ? 1.0 : 0.0, r.curve.front().entropy, r.curve.front().jacobian_fro,
               r.first_trained_point() ? r.first_trained_point()->grad_qk : kNaN});
  }
  return t;
}

Table curves_table(const StudyResult& s) {
  Table t("train_curves", {"task", "init", "optimizer", "d_k", "scale", "seed", "step", "train_loss", "eval_loss",
                           "eval_accuracy", "entropy", "jacobian_fro", "max_prob", "grad_qk", "temperature"});
  for (const auto& r : s.runs) {
    const auto& c = r.config;
    for (const auto& p : r.curve)
      t.add_row({code(c.task.kind), code(c.model.init), code(c.optimizer), static_cast<double>(c.model.d_k),
                 code(c.model.scale), static_cast<double>(c.seed), static_cast<double>(p.step), p.train_loss,
                 p.eval_loss, p.eval_accuracy, p.entropy, p.jacobian_fro, p.max_prob, p.grad_qk, p.temperature});
  }
  return t;
}

// The steps-to-threshold table as text, one block per (task, init): rows d_k × policy, columns optimisers.
std::vector<std::string> steps_table_text(const StudyResult& s, const std::vector<CellSummary>& cells) {
  std::vector<std::string> lines;
  for (const auto& task : s.config.tasks)
    for (InitMode init : s.config.inits) {
      lines.push_back(fmt::format("steps to {:.0f}% (median over {} seeds; reached/runs), {} task, {} init:",
                                  100 * s.config.base.threshold, s.config.seeds, to_string(task.kind), to_string(init)));
      std::string head = fmt::format("  {:>6}  {:<12}", "d_k", "policy");
      for (OptimizerKind o : s.config.optimizers) head += fmt::format("  {:>18}", to_string(o));
      lines.push_back(head);
      for (int64_t d : s.config.d_ks)
        for (const Scaling& sc : s.config.scales) {
          std::string row = fmt::format("  {:>6}  {:<12}", d, sc.name());
          for (OptimizerKind o : s.config.optimizers)
            for (const auto& c : cells)
              if (c.task == task.kind && c.init == init && c.optimizer == o && c.d_k == d && c.scale == sc) {
                const std::string med = c.median_censored ? fmt::format(">{}", s.config.base.steps)
                                                          : fmt::format("{:.0f}", c.median_steps);
                row += fmt::format("  {:>10} ({}/{})", med, c.reached, c.runs);
              }
          lines.push_back(row);
        }
    }
  return lines;
}

Result run_train(const TrainExperimentConfig& c, RunContext& ctx) {
  const StudyConfig config = study_of(c, ctx.seed);
  const StudyResult study = run_study(config, [&ctx](const StudyProgress& p) {
    const auto& rc = p.last->config;
    ctx.report(fmt::format("{}/{} runs ({} {} {} d_k={} {} seed {}: {}), {:.0f} s elapsed, ETA {:.0f} s", p.done,
                           p.total, to_string(rc.task.kind), to_string(rc.model.init), to_string(rc.optimizer),
                           rc.model.d_k, rc.model.scale.name(), rc.seed,
                           p.last->steps_to_threshold >= 0 ? fmt::format("90% at step {}", p.last->steps_to_threshold)
                                                           : fmt::format("final acc {:.2f}", p.last->final_accuracy),
                           p.elapsed_seconds, p.eta_seconds));
  });
  const auto cells = summarise(study);

  Result r;
  r.tables = {cells_table(cells), runs_table(study), curves_table(study)};
  std::vector<Group> groups;
  for (const auto& t : config.tasks)
    for (InitMode i : config.inits)
      for (OptimizerKind o : config.optimizers) groups.push_back({t.kind, i, o});
  for (const auto& g : groups) r.figures.push_back(learning_curves(study, g));
  r.figures.push_back(steps_figure(study, groups, cells));
  for (const auto& t : config.tasks)
    for (InitMode i : config.inits) r.figures.push_back(diagnostics_figure(study, t.kind, i));

  r.notes.push_back(
      "Codes in the train_* tables: task 0 recall, 1 copy; init 0 unit, 1 small; optimizer 0 adam, 1 sgd; scale 0 none, "
      "1 inv_sqrt_d, 2 inv_d, 3 qknorm. steps_to_threshold is empty (NaN) when a run never reached the threshold.");
  if (std::any_of(config.scales.begin(), config.scales.end(), [](const Scaling& sc) { return code(sc) > 3; }))
    r.notes.push_back("Further scale codes: 4 entropy_invariant, 5 ssmax:S, 6 a fixed scale (the policies' names are "
                      "in the steps table below).");
  for (auto& line : steps_table_text(study, cells)) r.notes.push_back(std::move(line));
  r.notes.push_back(fmt::format("train: {} runs in {:.1f} s on {} threads (engine: {})", study.runs.size(),
                                study.seconds, config.threads, engine::target_name()));

  // C8's verdicts: one per optimiser on the first task and init of the sweep (the
  // headline), the other settings' supplementary; all shown by the steps figure.
  for (lab::Verdict& v : verdicts(study)) {
    v.figure = "train_steps_to_threshold";
    r.verdicts.push_back(std::move(v));
  }
  return r;
}

}  // namespace

Experiment train_experiment() {
  return make_experiment<TrainExperimentConfig>("train", "Train a small attention model with each scale policy, optimiser and d_k: does learning slow without 1/√d_k?",
    {"C8"}, run_train, {{"full", "false"}});
}

}  // namespace attnlab::lab
