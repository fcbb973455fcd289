#include "train/run_pool.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "lab/parallel.hpp"

namespace attnlab::train {

void run_pool(const std::vector<double>& costs, int threads, const std::function<void(int64_t)>& run,
              const std::function<void(const PoolProgress&)>& done) {
  double total_cost = 0;
  for (double c : costs) total_cost += c;
  const auto start = std::chrono::steady_clock::now();
  std::mutex mutex;  // guards finished, done_cost and the callback
  int64_t finished = 0;
  double done_cost = 0;
  lab::util::RegionErrors errors;  // once a run throws, the runs not yet started are skipped
  const auto n = static_cast<int64_t>(costs.size());
  lab::util::RunStop* const run_stop = lab::util::t_run_stop;
#pragma omp parallel for num_threads(std::clamp(threads, 1, 64)) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i)
    errors.run(i, [&] {
      const lab::util::RunStopScope scope(run_stop);
      if (errors.failed() || lab::util::stop_requested()) return;
      run(i);
      std::lock_guard lock(mutex);
      ++finished;
      done_cost += costs[static_cast<size_t>(i)];
      if (!done || errors.failed()) return;
      PoolProgress p;
      p.done = finished;
      p.total = n;
      p.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      p.eta_seconds = done_cost > 0 ? p.elapsed_seconds * (total_cost - done_cost) / done_cost : 0;
      p.index = i;
      done(p);
    });
  errors.rethrow();
  lab::util::throw_if_stop_requested();
}

}  // namespace attnlab::train
