#pragma once
// Parallel loops of the lab (private to the library), on OpenMP like the engine.
//
// The lab's numbers must not depend on the machine: each index of a loop is one
// unit of work that writes only its own output slot, and the caller combines the
// slots in index order afterwards. How many threads run the loop, and which thread
// gets which index, then changes the speed and never a bit of the result.
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <exception>

#include <attnlab/attention_options.hpp>

#include "lab/interrupt.hpp"

namespace attnlab::lab::util {

// The error of a parallel region, kept for after it: an exception may not leave an OpenMP
// region (the process would end, and the lab's out-of-memory error naming the parameters
// would never be seen), so everything a region's iteration runs, the run's interrupt
// included, goes through run(), and rethrow() raises the error of the lowest index once
// the threads have joined: the error a caller sees does not depend on the thread count.
class RegionErrors {
 public:
  template <class F>
  void run(int64_t index, const F& f) noexcept {
    try {
      f();
    } catch (...) {
      keep(index, std::current_exception());
    }
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void keep(int64_t index, std::exception_ptr error) noexcept {
#pragma omp critical(attnlab_lab_region_errors)
    if (index < index_) {
      index_ = index;
      error_ = std::move(error);
    }
    failed_.store(true, std::memory_order_relaxed);
  }
  std::exception_ptr error_;
  int64_t index_ = INT64_MAX;
  std::atomic<bool> failed_{false};
};

// Calls body(i) for every i in [0, n), on `threads` OpenMP threads (0: OpenMP's
// default, as attnlab::team_size clamps it). Errors as RegionErrors keeps them. Once the run
// is asked to stop (interrupt.hpp), no further body starts and Interrupted is thrown.
template <class Body>
void parallel_for(int64_t n, int threads, const Body& body) {
  RegionErrors errors;
  const int team = attnlab::team_size(threads);  // the library's one thread-count rule
  RunStop* const run = t_run_stop;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
  for (int64_t i = 0; i < n; ++i)
    errors.run(i, [&] {
      const RunStopScope scope(run);
      if (!stop_requested()) body(i);
    });
  errors.rethrow();
  throw_if_stop_requested();
}

}  // namespace attnlab::lab::util
