// The sweep d_k × scale policy × optimiser × learning rate × seed (× task × init), trained on
// OpenMP threads, with progress and a cost-weighted ETA.
#include <chrono>
#include <cmath>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"
#include "train/run_pool.hpp"

namespace attnlab::train {

StudyConfig quick_study() {
  StudyConfig s;
  s.tasks = {TaskConfig{}};  // associative recall, 4 pairs (sequence length 9)
  s.d_ks = {16, 64, 256};
  s.inits = {InitMode::unit};
  s.seeds = 5;
  s.base.steps = 300;
  s.base.warmup = 20;
  s.base.batch = 32;
  s.base.eval_every = 20;
  s.base.eval_examples = 192;
  s.tuned = cached_rates();
  s.threads = 2;
  return s;
}

StudyConfig full_study() {
  StudyConfig s = quick_study();
  s.d_ks = {16, 64, 128, 256, 1024};
  s.inits = {InitMode::unit, InitMode::small};
  s.seeds = 5;
  s.base.steps = 800;
  s.base.warmup = 40;
  s.base.eval_examples = 256;
  s.tuned.clear();  // the experiment tunes the rates first (tune_rates)
  return s;
}

namespace {

// The peak learning rates a cell's runs use: the sweep axis, else its tuned rate, else
// the fixed rate, else the optimiser's default.
std::vector<double> rates_of(const StudyConfig& config, const TaskConfig& task, InitMode init, OptimizerKind opt,
                             int64_t d_k, const Scaling& scale) {
  const auto& axis = opt == OptimizerKind::adam ? config.adam_lrs : config.sgd_lrs;
  if (!axis.empty()) return axis;
  for (const auto& t : config.tuned)
    if (t.task == task.kind && t.init == init && t.optimizer == opt && t.d_k == d_k && t.scale == scale.name())
      return {t.lr};
  const double fixed = opt == OptimizerKind::adam ? config.adam_lr : config.sgd_lr;
  return {fixed > 0 ? fixed : default_lr(opt)};
}

}  // namespace

std::vector<RunConfig> expand(const StudyConfig& config) {
  if (config.tasks.empty() || config.d_ks.empty() || config.scales.empty() || config.optimizers.empty() ||
      config.inits.empty())
    throw Error("study: every sweep axis needs at least one value");
  if (config.seeds < 1 || config.seeds > 1000) throw Error("study: seeds must be in [1, 1000]");
  for (const auto* axis : {&config.adam_lrs, &config.sgd_lrs})
    for (double lr : *axis)
      if (!(std::isfinite(lr) && lr > 0)) throw Error("study: every learning rate of the sweep must be > 0");
  std::vector<RunConfig> runs;
  for (const auto& task : config.tasks)
    for (InitMode init : config.inits)
      for (OptimizerKind opt : config.optimizers)
        for (int64_t d_k : config.d_ks)
          for (const Scaling& scale : config.scales)
            for (double lr : rates_of(config, task, init, opt, d_k, scale))
              for (int64_t s = 0; s < config.seeds; ++s) {
                RunConfig r = config.base;
                r.task = task;
                r.model.init = init;
                r.optimizer = opt;
                r.model.d_k = d_k;
                r.model.scale = scale;
                r.seed = config.first_seed + static_cast<uint64_t>(s);
                r.lr = lr;
                runs.push_back(r);
              }
  return runs;
}

// Relative cost of a run: the q/k projections dominate (∝ d_k), the rest ∝ D.
double run_cost(const RunConfig& r) {
  return static_cast<double>(r.steps) * static_cast<double>(sequence_length(r.task)) *
         static_cast<double>(r.model.d_k + 4 * r.model.d_model);
}

StudyResult run_study(const StudyConfig& config, const std::function<void(const StudyProgress&)>& progress,
                      const std::vector<int64_t>* only) {
  const std::vector<RunConfig> all = expand(config);
  for (const auto& r : all) validate(r.task);
  std::vector<int64_t> picked = only ? *only : std::vector<int64_t>{};
  if (!only)
    for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) picked.push_back(i);
  std::vector<RunConfig> runs;
  for (int64_t i : picked) {
    if (i < 0 || i >= static_cast<int64_t>(all.size()))
      throw Error("run_study: run " + std::to_string(i) + " of a sweep of " + std::to_string(all.size()));
    runs.push_back(all[static_cast<size_t>(i)]);
  }
  StudyResult result;
  result.config = config;
  result.runs.resize(all.size());
  std::vector<RunResult> trained(runs.size());
  std::vector<double> costs;
  for (const auto& r : runs) costs.push_back(run_cost(r));
  const auto start = std::chrono::steady_clock::now();
  run_pool(
      costs, config.threads, [&](int64_t i) { trained[static_cast<size_t>(i)] = train_run(runs[static_cast<size_t>(i)]); },
      [&](const PoolProgress& pool) {
        if (!progress) return;
        StudyProgress p;
        p.done = pool.done;
        p.total = pool.total;
        p.elapsed_seconds = pool.elapsed_seconds;
        p.eta_seconds = pool.eta_seconds;
        p.last = &trained[static_cast<size_t>(pool.index)];
        progress(p);
      });
  for (size_t u = 0; u < runs.size(); ++u) result.runs[static_cast<size_t>(picked[u])] = std::move(trained[u]);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace attnlab::train
