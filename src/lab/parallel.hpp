#pragma once
// Static parallel-for over [0, n) on a few std::threads (private to the library).
// Task t always gets the same indices, so results combined per task in task order
// are reproducible for a given thread count.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace attnlab::lab::util {

inline int lab_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hc == 0 ? 1u : hc, 1u, 8u));
}

// Calls body(task, begin, end) for `tasks` contiguous chunks of [0, n), concurrently.
inline void parallel_chunks(int64_t n, int tasks, const std::function<void(int, int64_t, int64_t)>& body) {
  tasks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tasks, n)));
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(tasks));
  for (int t = 0; t < tasks; ++t) {
    const int64_t b = n * t / tasks, e = n * (t + 1) / tasks;
    threads.emplace_back([&, t, b, e] {
      try {
        body(t, b, e);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace attnlab::lab::util
