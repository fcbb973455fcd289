#pragma once
// The one median and quantile of the applications (lab, training study, benchmarks):
// linear interpolation between order statistics (numpy's and R's default, type 7), so
// the median of an even count is the mean of the middle two. Empty input gives NaN.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnlab::stats {

inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

}  // namespace attnlab::stats
