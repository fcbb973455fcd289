#pragma once
// Independent training runs on OpenMP threads, one run per thread at a time, handed out in
// order as threads come free (runs differ in cost by 10-100x): the toy study's and the
// language-model study's loop. Each run is a function of its configuration alone, so neither
// the thread count nor the schedule changes a result. Ctrl-C (lab/interrupt.hpp): the runs not
// yet started are skipped, those running stop at their next step, and the pool throws
// Interrupted. The first run (or progress callback) that throws stops the pool; the exception
// of the lowest index that threw is rethrown once every thread has finished (lab/parallel.hpp).
#include <cstdint>
#include <functional>
#include <vector>

namespace attnlab::train {

struct PoolProgress {
  int64_t done = 0, total = 0;
  double elapsed_seconds = 0, eta_seconds = 0;  // the ETA weighted by the runs' costs
  int64_t index = 0;                            // the run just finished
};

// Calls run(i) for every i in [0, costs.size()) on `threads` threads, then done(progress) after
// each, one call at a time, from the thread that ran it.
void run_pool(const std::vector<double>& costs, int threads, const std::function<void(int64_t)>& run,
              const std::function<void(const PoolProgress&)>& done);

}  // namespace attnlab::train
