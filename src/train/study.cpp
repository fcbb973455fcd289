// The sweep d_k × scale policy × optimiser × seed (× task × init), trained on a
// small pool of threads, with progress and a cost-weighted ETA.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include <cblas.h>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {

StudyConfig quick_study() {
  StudyConfig s;
  s.tasks = {TaskConfig{}};  // associative recall, 4 pairs (sequence length 9)
  s.d_ks = {16, 256};
  s.inits = {InitMode::unit};
  s.seeds = 3;
  s.base.steps = 300;
  s.base.warmup = 20;
  s.base.batch = 32;
  s.base.eval_every = 20;
  s.base.eval_examples = 192;
  s.threads = 2;
  return s;
}

StudyConfig full_study() {
  StudyConfig s = quick_study();
  TaskConfig copy;
  copy.kind = TaskKind::copy_after_marker;
  s.tasks = {TaskConfig{}, copy};
  s.d_ks = {16, 64, 256, 1024};
  s.inits = {InitMode::unit, InitMode::small};
  s.seeds = 5;
  s.base.steps = 800;
  s.base.warmup = 40;
  s.base.eval_examples = 256;
  return s;
}

std::vector<RunConfig> expand(const StudyConfig& config) {
  if (config.tasks.empty() || config.d_ks.empty() || config.scales.empty() || config.optimizers.empty() ||
      config.inits.empty())
    throw Error("study: every sweep axis needs at least one value");
  if (config.seeds < 1 || config.seeds > 1000) throw Error("study: seeds must be in [1, 1000]");
  std::vector<RunConfig> runs;
  for (const auto& task : config.tasks)
    for (InitMode init : config.inits)
      for (OptimizerKind opt : config.optimizers)
        for (int64_t d_k : config.d_ks)
          for (ScaleMode scale : config.scales)
            for (int64_t s = 0; s < config.seeds; ++s) {
              RunConfig r = config.base;
              r.task = task;
              r.model.init = init;
              r.optimizer = opt;
              r.model.d_k = d_k;
              r.model.scale = scale;
              r.seed = config.first_seed + static_cast<uint64_t>(s);
              const double lr = opt == OptimizerKind::adam ? config.adam_lr : config.sgd_lr;
              if (lr > 0) r.lr = lr;
              runs.push_back(r);
            }
  return runs;
}

namespace {

// OpenBLAS's thread count is process-wide: set for the study's duration, then
// restored, whichever way the study ends.
class OpenBlasThreadsScope {
 public:
  explicit OpenBlasThreadsScope(int threads) : previous_(openblas_get_num_threads()) {
    openblas_set_num_threads(threads);
  }
  ~OpenBlasThreadsScope() { openblas_set_num_threads(previous_); }
  OpenBlasThreadsScope(const OpenBlasThreadsScope&) = delete;
  OpenBlasThreadsScope& operator=(const OpenBlasThreadsScope&) = delete;

 private:
  int previous_;
};

// Relative cost of a run: the q/k projections dominate (∝ d_k), the rest ∝ D.
double cost(const RunConfig& r) {
  return static_cast<double>(r.steps) * static_cast<double>(sequence_length(r.task)) *
         static_cast<double>(r.model.d_k + 4 * r.model.d_model);
}

}  // namespace

StudyResult run_study(const StudyConfig& config, const std::function<void(const StudyProgress&)>& progress) {
  const std::vector<RunConfig> runs = expand(config);
  for (const auto& r : runs) validate(r.task);
  StudyResult result;
  result.config = config;
  result.runs.resize(runs.size());
  double total_cost = 0;
  for (const auto& r : runs) total_cost += cost(r);

  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::mutex mutex;  // guards done, done_cost, first_error and the progress callback
  int64_t done = 0;
  double done_cost = 0;
  std::exception_ptr first_error;
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= runs.size()) return;
      {
        std::lock_guard lock(mutex);
        if (first_error) return;
      }
      try {
        result.runs[i] = train_run(runs[i]);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first_error) first_error = std::current_exception();
        return;
      }
      std::lock_guard lock(mutex);
      ++done;
      done_cost += cost(runs[i]);
      if (progress) {
        StudyProgress p;
        p.done = done;
        p.total = static_cast<int64_t>(runs.size());
        p.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        p.eta_seconds = p.elapsed_seconds * (total_cost - done_cost) / done_cost;
        p.last = &result.runs[i];
        progress(p);
      }
    }
  };
  const int n = std::clamp(config.threads, 1, 64);
  // With several runs in flight, each run's small products go single-threaded
  // in OpenBLAS (the pool already uses the cores); one run alone may use them all.
  const OpenBlasThreadsScope blas_threads(n > 1 ? 1 : openblas_get_num_threads());
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace attnlab::train
