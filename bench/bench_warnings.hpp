#pragma once
// What `attnlab bench` warns about beside its table: figures the reader should not trust.
#include <optional>
#include <string>
#include <vector>

namespace attnlab::bench {

// `what` ran at x, more than the yardstick `of` that its fraction divides by (FMA peak, read
// bandwidth): the probe was slowed by other load or the data came from a cache. Nothing
// when x ≤ of or the yardstick was not measured (of ≤ 0).
std::optional<std::string> above_yardstick(const std::string& what, double x, double of, const std::string& yardstick,
                                           double load_average);

// The timed rounds of one pass more than 2× apart (slowest over fastest): the load changed
// under the run, and the median is less reliable.
std::optional<std::string> rounds_disagree(const std::string& what, const std::vector<double>& ms);

}  // namespace attnlab::bench
