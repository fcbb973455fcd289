// Experiment `train` (C8): the training study of attnlab/train.hpp registered
// with the lab. `attnlab run train` runs the quick sweep (the report's default),
// `attnlab run train --full` the whole sweep of issue 5. Any sweep parameter left
// empty (or 0) takes the chosen preset's value. The figures are drawn in
// lab/train_figures.cpp; the configuration, tables, notes and verdicts are here.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/train.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/study_across.hpp"
#include "lab/train_figures.hpp"
#include "lab/words.hpp"

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
  std::string rates;           // "" = the preset's: cached (quick), tuned (full); or fixed
  int64_t tuning_seeds = 3;
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
    p.add("rates", rates, "learning rates: tuned (a tuning sweep on other seeds first, each cell at its best rate; "
                          "full's default), cached (the rates the full sweep chose; quick's default), fixed (adam_lr, "
                          "sgd_lr for every cell)");
    p.add("tuning_seeds", tuning_seeds, "seeds per cell and rate of the tuning sweep (rates=tuned)");
    p.add("adam_lr", adam_lr, "Adam's peak learning rate for rates=fixed (default 3e-3; setting it implies rates=fixed)");
    p.add("sgd_lr", sgd_lr, "SGD's peak learning rate for rates=fixed (default 0.03; setting it implies rates=fixed)");
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

// How the learning rates are chosen: the parameter, else fixed if a rate was given, else the preset's.
std::string rates_mode(const TrainExperimentConfig& c) {
  if (!c.rates.empty()) {
    if (c.rates != "tuned" && c.rates != "cached" && c.rates != "fixed")
      throw Error("rates: '" + c.rates + "' is not tuned, cached or fixed");
    return c.rates;
  }
  if (c.adam_lr > 0 || c.sgd_lr > 0) return "fixed";
  return c.full ? "tuned" : "cached";
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
  if (rates_mode(c) == "fixed") s.tuned.clear();
  if (rates_mode(c) == "cached") s.tuned = cached_rates();
  util::require_positive("tuning_seeds", c.tuning_seeds);
  if (!(c.threshold > 0 && c.threshold <= 1)) throw Error(fmt::format("threshold: {} is not in (0, 1]", c.threshold));
  s.base.threshold = c.threshold;
  s.base.model.layernorm = c.layernorm;
  s.first_seed = 1 + 1000 * seed;  // lab --seed N shifts every run's seed
  return s;
}

double code(TaskKind t) { return t == TaskKind::associative_recall ? 0 : 1; }
double code(InitMode i) { return static_cast<double>(static_cast<int>(i)); }  // unit 0, small 1, quarter 2
double code(OptimizerKind o) { return o == OptimizerKind::adam ? 0 : 1; }
// The study's four scalings keep the codes 0–3 they have always had; the other
// policies follow (the notes say which is which).
double code(const Scaling& s) {
  if (s.qk_norm) return 3;
  if (s.additive) return 7;
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

double code(Diagnosis d) { return static_cast<double>(d); }

// The 1/√d_k cell beside `cell` (same task, init, optimiser, d_k), or nullptr.
const CellSummary* baseline_of(const std::vector<CellSummary>& cells, const CellSummary& cell) {
  for (const auto& c : cells)
    if (c.task == cell.task && c.init == cell.init && c.optimizer == cell.optimizer && c.d_k == cell.d_k &&
        c.scale == Scaling(ScalePolicy::inv_sqrt_d()))
      return &c;
  return nullptr;
}

Table cells_table(const std::string& name, const std::vector<CellSummary>& cells) {
  Table t(name, {"task", "init", "optimizer", "d_k", "scale", "lr", "runs", "reached", "median_steps",
                 "median_censored", "mean_final_accuracy", "min_final_accuracy", "entropy_start", "entropy_end",
                 "jacobian_fro_start", "jacobian_fro_end", "max_prob_start", "max_prob_end", "grad_qk_first",
                 "diverged", "diagnosis"});
  for (const auto& c : cells) {
    const CellSummary* base = baseline_of(cells, c);
    t.add_row({code(c.task), code(c.init), code(c.optimizer), static_cast<double>(c.d_k), code(c.scale), c.lr,
               static_cast<double>(c.runs), static_cast<double>(c.reached), c.median_steps,
               c.median_censored ? 1.0 : 0.0, c.mean_final_accuracy, c.min_final_accuracy, c.mean_entropy_start,
               c.mean_entropy_end, c.mean_jacobian_start, c.mean_jacobian_end, c.mean_max_prob_start,
               c.mean_max_prob_end, c.mean_grad_qk_first, static_cast<double>(c.diverged),
               base ? code(diagnose(c, *base)) : kNaN});
  }
  return t;
}

Table runs_table(const StudyResult& s) {
  Table t("train_runs", {"task", "init", "optimizer", "d_k", "scale", "seed", "lr", "steps_to_threshold",
                         "final_accuracy", "final_loss", "diverged", "entropy_init", "jacobian_fro_init",
                         "grad_qk_first"});  // no run time here: data files are a function of the seed
  for (const auto& r : s.runs) {
    const auto& c = r.config;
    t.add_row({code(c.task.kind), code(c.model.init), code(c.optimizer), static_cast<double>(c.model.d_k),
               code(c.model.scale), static_cast<double>(c.seed), c.lr,
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
std::vector<std::string> steps_table_text(const StudyResult& s, const std::vector<CellSummary>& cells,
                                          const Words& words) {
  std::vector<std::string> lines;
  for (const auto& task : s.config.tasks)
    for (InitMode init : s.config.inits) {
      lines.push_back(words("note.steps_table", {{"threshold", 100 * s.config.base.threshold},
                                                 {"seeds", s.config.seeds},
                                                 {"task", to_string(task.kind)},
                                                 {"init", to_string(init)}}));
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

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

// The settings the study actually ran with (presets resolved), for the report.
Config settings_of(const StudyConfig& s, const std::string& rates, const Words& words) {
  std::vector<std::string> tasks, dims, policies, optimizers, inits;
  for (const auto& t : s.tasks) tasks.push_back(to_string(t.kind));
  for (int64_t d : s.d_ks) dims.push_back(std::to_string(d));
  for (const auto& sc : s.scales) policies.push_back(sc.name());
  for (OptimizerKind o : s.optimizers) optimizers.push_back(to_string(o));
  for (InitMode i : s.inits) inits.push_back(to_string(i));
  Config c{{"tasks", join(tasks)}, {"dims", join(dims)}, {"policies", join(policies)},
           {"optimizers", join(optimizers)}, {"inits", join(inits)}, {"seeds", std::to_string(s.seeds)},
           {"steps", std::to_string(s.base.steps)}, {"batch", std::to_string(s.base.batch)},
           {"eval_every", std::to_string(s.base.eval_every)}, {"threads", std::to_string(s.threads)},
           {"d_model", std::to_string(s.base.model.d_model)}, {"layers", std::to_string(s.base.model.n_layers)},
           {"rates", rates}};
  if (rates == "fixed") {
    c["adam_lr"] = fmt::format("{:g}", s.adam_lr > 0 ? s.adam_lr : default_lr(OptimizerKind::adam));
    c["sgd_lr"] = fmt::format("{:g}", s.sgd_lr > 0 ? s.sgd_lr : default_lr(OptimizerKind::sgd));
  } else {
    c["adam_lr"] = c["sgd_lr"] = words("config.rates_per_cell");
  }
  return c;
}

// How many of the study's cells have a tuned rate (the others run at the default).
size_t tuned_cells(const StudyConfig& s) {
  size_t n = 0;
  for (const auto& t : s.tasks)
    for (InitMode i : s.inits)
      for (OptimizerKind o : s.optimizers)
        for (int64_t d : s.d_ks)
          for (const auto& sc : s.scales)
            n += std::any_of(s.tuned.begin(), s.tuned.end(), [&](const TunedRate& r) {
              return r.task == t.kind && r.init == i && r.optimizer == o && r.d_k == d && r.scale == sc.name();
            });
  return n;
}

// The learning rates in words: tuned in this run, chosen by the full sweep (for all, none or some cells), or fixed.
std::string rate_words(const StudyConfig& s, const std::string& rates, int64_t tuning_seeds, const Words& words) {
  if (rates == "tuned") return words("setup.rates_tuned", {{"tuning_seeds", tuning_seeds}});
  if (rates != "cached") return words("setup.rates_fixed");
  const size_t cells = s.tasks.size() * s.inits.size() * s.optimizers.size() * s.d_ks.size() * s.scales.size();
  const size_t tuned = tuned_cells(s);
  return words(tuned == cells ? "setup.rates_cached_all"
               : tuned == 0   ? "setup.rates_cached_none"
                              : "setup.rates_cached_some",
               {{"tuned", tuned}, {"cells", cells}});
}

// The task, the model and the training, in plain words.
std::string setup_text(const StudyConfig& s, const std::string& rates, int64_t tuning_seeds, const Words& words) {
  const bool small = std::find(s.inits.begin(), s.inits.end(), InitMode::small) != s.inits.end();
  return words("setup", {{"d_model", s.base.model.d_model},
                         {"small_init", small ? words("setup.small_init") : std::string()},
                         {"steps", s.base.steps},
                         {"batch", s.base.batch},
                         {"rates", rate_words(s, rates, tuning_seeds, words)},
                         {"seeds", s.seeds},
                         {"eval_every", s.base.eval_every}});
}

Result run_train(const TrainExperimentConfig& c, RunContext& ctx) {
  StudyConfig config = study_of(c, ctx.seed);
  const std::string rates = rates_mode(c);
  auto report = [&ctx](const char* phase) {
    return [&ctx, phase](const StudyProgress& p) {
      const auto& rc = p.last->config;
      ctx.report(fmt::format("{}{}/{} runs ({} {} {} d_k={} {} lr {:g} seed {}: {}), {:.0f} s elapsed, ETA {:.0f} s",
                             phase, p.done, p.total, to_string(rc.task.kind), to_string(rc.model.init),
                             to_string(rc.optimizer), rc.model.d_k, rc.model.scale.name(), rc.lr, rc.seed,
                             p.last->steps_to_threshold >= 0 ? fmt::format("90% at step {}", p.last->steps_to_threshold)
                                                             : fmt::format("final acc {:.2f}", p.last->final_accuracy),
                             p.elapsed_seconds, p.eta_seconds));
    };
  };
  Result r;
  std::vector<CellSummary> tuning_cells;
  if (rates == "tuned") {
    const StudyConfig tuning = tuning_study(config, c.tuning_seeds, config.first_seed + 500);
    tuning_cells = summarise(study_across(tuning, ctx, report("tuning: ")));
    config.tuned = best_rates(tuning_cells, config.base.threshold);
  }
  const StudyResult study = study_across(config, ctx, report(""));
  const auto cells = summarise(study);
  const Words words("train");

  r.tables = {cells_table("train_cells", cells), runs_table(study), curves_table(study)};
  if (!tuning_cells.empty()) r.tables.push_back(cells_table("train_tuning", tuning_cells));
  std::vector<train_figures::Group> groups;
  for (const auto& t : config.tasks)
    for (InitMode i : config.inits)
      for (OptimizerKind o : config.optimizers) groups.push_back({t.kind, i, o});
  for (const auto& t : config.tasks)
    for (InitMode i : config.inits) r.figures.push_back(train_figures::mechanism(study, cells, t.kind, i, words));
  for (const auto& g : groups) r.figures.push_back(train_figures::learning_curves(study, g, words));
  r.figures.push_back(train_figures::steps_to_threshold(study, groups, cells, words));
  for (const auto& t : config.tasks)
    for (InitMode i : config.inits) r.figures.push_back(train_figures::attention_diagnostics(study, t.kind, i, words));

  r.notes.push_back(words("note.codes"));
  if (std::any_of(config.scales.begin(), config.scales.end(), [](const Scaling& sc) { return code(sc) > 3; }))
    r.notes.push_back(words("note.further_codes"));
  for (auto& line : steps_table_text(study, cells, words)) r.notes.push_back(std::move(line));
  r.notes.push_back(words("note.timing", {{"runs", study.runs.size()},
                                          {"seconds", study.seconds},
                                          {"threads", config.threads},
                                          {"engine", engine::target_name()}}));
  r.config = settings_of(config, rates, words);
  r.setup = setup_text(config, rates, c.tuning_seeds, words);

  // C8's verdicts: one per optimiser and setting, each shown by its mechanism figure. All stand
  // beside C8's main evidence, the language models of experiment lm: this toy model is the
  // mechanism's clean case, not the test of the claim on the models people train.
  for (lab::Verdict& v : verdicts(study)) {
    v.supplementary = true;
    v.figure = r.figures.front().name;
    for (const auto& t : config.tasks)
      for (InitMode i : config.inits)
        if (v.title.find(fmt::format("{} task, {} init", to_string(t.kind), to_string(i))) != std::string::npos)
          v.figure = fmt::format("train_mechanism_{}_{}", to_string(t.kind), to_string(i));
    r.verdicts.push_back(std::move(v));
  }
  return r;
}

}  // namespace

Experiment train_experiment() {
  return make_experiment<TrainExperimentConfig>("train", "Train a small attention model with each scale policy, optimiser and d_k: does learning slow without 1/√d_k?",
    // --quick (tests, smoke runs): a few short runs, enough for tables, figures and a verdict, in about a second.
    {"C8"}, run_train, {{"dims", "16,64"}, {"seeds", "2"}, {"steps", "100"}, {"eval_every", "20"}});
}

}  // namespace attnlab::lab
