// `attnlab bench`'s warnings (bench_warnings.hpp).
#include "bench_warnings.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace attnlab::bench {

std::optional<std::string> above_yardstick(const std::string& what, double x, double of, const std::string& yardstick,
                                           double load_average) {
  if (!(of > 0) || !(x > of)) return std::nullopt;
  return fmt::format("{} runs at {:.0f} % of the {}: the probe was slowed by other load (load average {:.2f}) or the "
                     "data came from a cache, so that fraction means nothing; rerun on a quieter machine",
                     what, 100.0 * x / of, yardstick, load_average);
}

std::optional<std::string> rounds_disagree(const std::string& what, const std::vector<double>& ms) {
  if (ms.size() < 2) return std::nullopt;
  const auto [fastest, slowest] = std::minmax_element(ms.begin(), ms.end());
  if (!(*fastest > 0) || !(*slowest > 2.0 * *fastest)) return std::nullopt;
  return fmt::format("{}: its {} rounds range from {:.3g} to {:.3g} ms ({:.1f}x): the load changed during the run, "
                     "so the median is less reliable; rerun with more --repeats or on a quieter machine",
                     what, ms.size(), *fastest, *slowest, *slowest / *fastest);
}

}  // namespace attnlab::bench
