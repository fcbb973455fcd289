#pragma once
// The caller's ComputeConfig::interrupt, asked at most every 10 ms: often enough that
// Ctrl-C feels immediate, rarely enough that a poll which takes a lock (Python's GIL)
// costs nothing measurable. One thread asks; the engine shares the answer (plan.hpp).
#include <chrono>
#include <functional>

namespace attnlab::detail {

class InterruptPoll {
 public:
  explicit InterruptPoll(const std::function<bool()>* interrupt) : interrupt_(interrupt) {}
  // True once the interrupt has answered true (and from then on).
  bool ask() {
    if (stopped_ || interrupt_ == nullptr || !*interrupt_) return stopped_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_asked_ < std::chrono::milliseconds(10)) return false;
    last_asked_ = now;
    stopped_ = (*interrupt_)();
    return stopped_;
  }

 private:
  const std::function<bool()>* interrupt_;
  std::chrono::steady_clock::time_point last_asked_{};
  bool stopped_ = false;
};

}  // namespace attnlab::detail
