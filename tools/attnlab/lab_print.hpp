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

// The first `width` characters (code points, not bytes) of UTF-8 text, padded with spaces.
inline std::string utf8_cell(const std::string& s, size_t width) {
  std::string out;
  size_t chars = 0, i = 0;
  while (i < s.size() && chars < width) {
    size_t len = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0) len = 4;
    else if (c >= 0xE0) len = 3;
    else if (c >= 0xC0) len = 2;
    if (chars + 1 == width && i + len < s.size()) {
      out += "…";
    } else {
      out += s.substr(i, len);
    }
    i += len;
    ++chars;
  }
  return out + std::string(width - chars, ' ');
}

inline void print_verdicts(const std::vector<attnlab::lab::Verdict>& verdicts) {
  if (verdicts.empty()) return;
  fmt::print("\n{:<4} {:<13} {} {} {}\n", "id", "verdict", utf8_cell("theory", 22), utf8_cell("measured", 30), "title");
  for (const auto& v : verdicts) {
    auto show = [](double x, const std::string& text) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : text; };
    fmt::print("{:<4} {:<13} {} {} {}{}\n", v.claim, attnlab::lab::to_string(v.outcome),
               utf8_cell(show(v.theory, v.theory_text), 22), utf8_cell(show(v.measured, v.measured_text), 30), v.title,
               v.supplementary ? " (supplementary)" : "");
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
