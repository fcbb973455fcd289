#pragma once
// Parallel loops of the lab (private to the library), on OpenMP like the engine.
//
// The lab's numbers must not depend on the machine: each index of a loop is one
// unit of work that writes only its own output slot, and the caller combines the
// slots in index order afterwards. How many threads run the loop, and which thread
// gets which index, then changes the speed and never a bit of the result.
#include <omp.h>

#include <cstdint>
#include <exception>

#include <attnlab/attention_options.hpp>

#include "lab/interrupt.hpp"

namespace attnlab::lab::util {

// Calls body(i) for every i in [0, n), on `threads` OpenMP threads (0: OpenMP's
// default, as attnlab::team_size clamps it). If bodies throw, the exception of the lowest index is rethrown, so the
// error a caller sees does not depend on the thread count either. Once the run is asked
// to stop (interrupt.hpp), no further body starts and Interrupted is thrown.
template <class Body>
void parallel_for(int64_t n, int threads, const Body& body) {
  std::exception_ptr error;
  int64_t error_index = n;
  const int team = attnlab::team_size(threads);  // the library's one thread-count rule
  RunStop* const run = t_run_stop;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
  for (int64_t i = 0; i < n; ++i) {
    const RunStopScope scope(run);
    if (stop_requested()) continue;
    try {
      body(i);
    } catch (...) {
#pragma omp critical(attnlab_lab_parallel_error)
      if (i < error_index) {
        error_index = i;
        error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  throw_if_stop_requested();
}

}  // namespace attnlab::lab::util
