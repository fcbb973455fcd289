#pragma once
// How the command line reads numbers, seeds and lists, for every subcommand: ranges that
// NaN fails (a plain `x < lo || x > hi` lets it through), seeds that are never wrapped or
// saturated, and comma lists whose empty elements are errors (as in `run --set`).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::cli {

// A validator for a number in [lo, hi]: NaN, infinities and text are refused.
CLI::Validator in_range(double lo, double hi);

// --NAME as an unsigned 64-bit seed: a decimal integer in [0, 2^64 - 1], nothing else.
CLI::Option* add_seed_option(CLI::App& app, const std::string& name, uint64_t& seed, const std::string& help);

// --NAME as a comma-separated list; every element must be a number (finite for doubles),
// and an empty element ("1,,2") is an error. `count` > 0 requires exactly that many.
CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                             const std::string& help);
CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<double>& out, const std::string& help);
CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<int64_t>& out,
                             const std::string& help, size_t count = 0);

// a * b * ... in int64, or an error naming `what` if the product overflows.
int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what);

}  // namespace attnlab::cli
