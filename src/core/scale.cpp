#include "attnlab/scale.hpp"

#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include "attnlab/error.hpp"

namespace attnlab {

ScalePolicy ScalePolicy::fixed(double value) {
  if (!std::isfinite(value)) throw Error(fmt::format("scale: fixed value {} is not finite", value));
  return ScalePolicy(Kind::fixed, value);
}

ScalePolicy ScalePolicy::scalable_softmax(double s) {
  if (!std::isfinite(s)) throw Error(fmt::format("scale: ssmax parameter s = {} is not finite", s));
  // s scales log n / sqrt(d): zero or negative would flatten or invert attention, not sharpen it.
  if (!(s > 0)) throw Error(fmt::format("scale: ssmax parameter s = {} must be positive", s));
  return ScalePolicy(Kind::scalable_softmax, s);
}

double ScalePolicy::operator()(int64_t d, int64_t n_visible) const {
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double log_n = n_visible > 1 ? std::log(static_cast<double>(n_visible)) : 0.0;
  switch (kind_) {
    case Kind::inv_sqrt_d: return inv_sqrt_d;
    case Kind::fixed: return param_;
    case Kind::none: return 1.0;
    case Kind::inv_d: return 1.0 / static_cast<double>(d);
    case Kind::entropy_invariant: return log_n / std::log(512.0) * inv_sqrt_d;
    case Kind::scalable_softmax: return param_ * log_n * inv_sqrt_d;
  }
  return inv_sqrt_d;
}

std::string ScalePolicy::name() const {
  switch (kind_) {
    case Kind::inv_sqrt_d: return "inv_sqrt_d";
    case Kind::fixed: return fmt::format("{}", param_);
    case Kind::none: return "none";
    case Kind::inv_d: return "inv_d";
    case Kind::entropy_invariant: return "entropy_invariant";
    case Kind::scalable_softmax: return fmt::format("ssmax:{}", param_);
  }
  return "inv_sqrt_d";
}

namespace {
bool parse_double(std::string_view text, double& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  // A number beyond double's range (1e-400, 1e400) is a number: say so, not "unknown policy".
  if (ec == std::errc::result_out_of_range && ptr == end)
    throw Error(fmt::format("scale: {} is outside the range of a double (about 2.2e-308 to 1.8e308)", text));
  return ec == std::errc() && ptr == end;
}
}  // namespace

ScalePolicy ScalePolicy::parse(std::string_view text) {
  if (text == "inv_sqrt_d" || text == "default") return inv_sqrt_d();
  if (text == "none") return none();
  if (text == "inv_d") return inv_d();
  if (text == "entropy_invariant" || text == "log512") return entropy_invariant();
  if (text == "ssmax") return scalable_softmax();
  double value = 0;
  if (text.starts_with("ssmax:")) {
    if (!parse_double(text.substr(6), value))
      throw Error(fmt::format("scale: cannot read the ssmax parameter in '{}'", text));
    return scalable_softmax(value);
  }
  if (parse_double(text, value)) return fixed(value);
  throw Error(fmt::format("scale: unknown policy '{}' (expected inv_sqrt_d, none, inv_d, entropy_invariant, "
                          "ssmax, ssmax:S, or a number)", text));
}

}  // namespace attnlab
