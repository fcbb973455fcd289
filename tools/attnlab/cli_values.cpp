// The command line's numbers, seeds and lists (cli_values.hpp).
#include "cli_values.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

#include "attnlab/error.hpp"
#include "attnlab/lab.hpp"

namespace attnlab::cli {
namespace {

// The whole of `text` as a double, or nothing (NaN and infinities included: they are numbers
// here, and the callers refuse them).
std::optional<double> whole_double(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || (errno == ERANGE && std::isinf(v))) return std::nullopt;
  return v;
}

std::optional<int64_t> whole_int(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno == ERANGE) return std::nullopt;
  return v;
}

}  // namespace

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const auto v = whole_double(text);
        // Written so that NaN fails: !(lo <= v && v <= hi) is true for NaN.
        if (!v || std::isnan(*v)) return fmt::format("'{}' is not a number (expected one in [{}, {}])", text, lo, hi);
        if (!(lo <= *v && *v <= hi)) return fmt::format("{} is outside [{}, {}]", text, lo, hi);
        return {};
      },
      fmt::format("NUMBER in [{}, {}]", lo, hi));
}

CLI::Option* add_seed_option(CLI::App& app, const std::string& name, uint64_t& seed, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [&seed, name](const std::string& text) {
            errno = 0;
            char* end = nullptr;
            const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
            // strtoull takes "-1" (as 2^64 - 1) and saturates on overflow: only plain digits are a seed.
            if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
                end != text.c_str() + text.size() || errno == ERANGE)
              throw Error(fmt::format("{}: '{}' is not a seed (an integer in [0, 2^64 - 1] = [0, {}])", name, text,
                                      UINT64_MAX));
            seed = v;
          },
          help)
      ->type_name("UINT64")
      ->default_str(std::to_string(seed));
}

CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                             const std::string& help) {
  return app
      .add_option_function<std::string>(
          name, [&out, name](const std::string& text) { out = lab::split_list(name, text); }, help)
      ->type_name("TEXT,...");
}

CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<double>& out, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [&out, name](const std::string& text) {
            std::vector<double> values;
            for (const auto& item : lab::split_list(name, text)) {
              const auto v = whole_double(item);
              if (!v || !std::isfinite(*v)) throw Error(fmt::format("{}: '{}' is not a finite number", name, item));
              values.push_back(*v);
            }
            out = std::move(values);
          },
          help)
      ->type_name("NUMBER,...");
}

CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<int64_t>& out,
                             const std::string& help, size_t count) {
  return app
      .add_option_function<std::string>(
          name,
          [&out, name, count](const std::string& text) {
            std::vector<int64_t> values;
            for (const auto& item : lab::split_list(name, text)) {
              const auto v = whole_int(item);
              if (!v) throw Error(fmt::format("{}: '{}' is not a 64-bit integer", name, item));
              values.push_back(*v);
            }
            if (count > 0 && values.size() != count)
              throw Error(fmt::format("{}: expected {} comma-separated values, got {}", name, count, values.size()));
            out = std::move(values);
          },
          help)
      ->type_name("INT,...");
}

int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) throw Error(fmt::format("{} overflows a 64-bit integer", what));
  return p;
}

}  // namespace attnlab::cli
