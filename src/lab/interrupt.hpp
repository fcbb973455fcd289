#pragma once
// Ctrl-C in the lab (private to the applications): the running experiment's
// RunContext::interrupt, asked by the thread that runs it (at most every 10 ms, as the
// engine does: core/interrupt_poll.hpp), and its answer shared with the threads of its
// loops (parallel.hpp, the training study), which stop taking work and make the run
// throw attnlab::Interrupted. Each run has its own stop, so concurrent runs (Python
// threads) do not stop one another.
#include <atomic>
#include <functional>
#include <thread>

#include "attnlab/error.hpp"
#include "core/interrupt_poll.hpp"

namespace attnlab::lab::util {

class RunStop {
 public:
  explicit RunStop(const std::function<bool()>* interrupt)
      : poll_(interrupt), owner_(std::this_thread::get_id()) {}
  // True once the interrupt answered true; only the owning thread asks it.
  bool requested() {
    if (!stopped_.load(std::memory_order_relaxed) && std::this_thread::get_id() == owner_ && poll_.ask())
      stopped_.store(true, std::memory_order_relaxed);
    return stopped_.load(std::memory_order_relaxed);
  }

 private:
  detail::InterruptPoll poll_;
  std::thread::id owner_;
  std::atomic<bool> stopped_{false};
};

// The stop of the run this thread works for (nullptr outside a run).
inline thread_local RunStop* t_run_stop = nullptr;

// Makes `stop` this thread's for the scope: lab::run on its thread, and each loop body on
// the worker threads that run it.
class RunStopScope {
 public:
  explicit RunStopScope(RunStop* stop) : saved_(t_run_stop) { t_run_stop = stop; }
  ~RunStopScope() { t_run_stop = saved_; }
  RunStopScope(const RunStopScope&) = delete;
  RunStopScope& operator=(const RunStopScope&) = delete;

 private:
  RunStop* saved_;
};

inline bool stop_requested() { return t_run_stop != nullptr && t_run_stop->requested(); }

// For long loops (a training run's steps): throws Interrupted once the run is asked to stop.
inline void throw_if_stop_requested() {
  if (stop_requested()) throw Interrupted("interrupted");
}

}  // namespace attnlab::lab::util
