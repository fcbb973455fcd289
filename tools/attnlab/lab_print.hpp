#pragma once
// Printing shared by `attnlab run` and `attnlab report`: verdict tables and progress on stderr.
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::cli {

inline void print_verdicts(const std::vector<attnlab::lab::Verdict>& verdicts) {
  if (verdicts.empty()) return;
  fmt::print("\n{:<4} {:<13} {:<24} {:<24} {}\n", "id", "verdict", "theory", "measured", "title");
  for (const auto& v : verdicts) {
    auto show = [](double x, const std::string& text) {
      std::string s = std::isfinite(x) ? fmt::format("{:.4g}", x) : text;
      if (s.size() > 23) s = s.substr(0, 20) + "...";
      return s;
    };
    fmt::print("{:<4} {:<13} {:<24} {:<24} {}\n", v.claim, attnlab::lab::to_string(v.outcome),
               show(v.theory, v.theory_text), show(v.measured, v.measured_text), v.title);
  }
}

// Progress lines on stderr, each prefixed with the elapsed time.
inline std::function<void(const std::string&)> stderr_progress(const std::string& prefix) {
  const auto start = std::chrono::steady_clock::now();
  return [start, prefix](const std::string& message) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print(stderr, "[{:6.1f}s] {}: {}\n", t, prefix, message);
    std::fflush(stderr);
  };
}

}  // namespace attnlab::cli
