#pragma once
// Small helpers shared by the experiments (private to the library): seeded random
// streams, sample statistics, fits, and shorthands for building figures and verdicts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <new>

#include "attnlab/error.hpp"
#include "attnlab/lab.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/statistics.hpp"
#include "attnlab/train.hpp"

namespace attnlab::lab::util {

// An independent random stream per (seed, purpose): experiments stay reproducible
// when one of them changes how many numbers another part draws.
inline std::mt19937_64 rng(uint64_t seed, std::string_view stream) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the stream name
  for (char c : stream) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(h),
                    static_cast<uint32_t>(h >> 32)};
  return std::mt19937_64(seq);
}

// Draws with mean 0 and standard deviation sigma: "gaussian" or "uniform" (on ±σ√3).
struct Distribution {
  std::string kind = "gaussian";
  double sigma = 1.0;
  template <class G>
  double operator()(G& g) const {
    if (kind == "uniform") return std::uniform_real_distribution<double>(-sigma * std::sqrt(3.0), sigma * std::sqrt(3.0))(g);
    return std::normal_distribution<double>(0.0, sigma)(g);
  }
};
inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
inline double variance(const std::vector<double>& v) {  // unbiased
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}
using stats::median;
using stats::quantile;

// Least-squares slope of log y against log x (points with x, y > 0).
inline double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!(x[i] > 0 && y[i] > 0)) continue;
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly, ++n;
  }
  if (n < 2) return NAN;
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// Standard error of that slope when log y_i has standard error rel_se_i (a relative error of y_i).
inline double loglog_slope_se(const std::vector<double>& x, const std::vector<double>& rel_se) {
  double mean_lx = 0;
  for (double v : x) mean_lx += std::log(v) / static_cast<double>(x.size());
  double sxx = 0, num = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double dx = std::log(x[i]) - mean_lx;
    sxx += dx * dx;
    num += dx * dx * rel_se[i] * rel_se[i];
  }
  return sxx > 0 ? std::sqrt(num) / sxx : NAN;
}

inline std::vector<double> log_grid(double lo, double hi, int points) {
  std::vector<double> g;
  for (int i = 0; i < points; ++i)
    g.push_back(lo * std::pow(hi / lo, points == 1 ? 0.0 : static_cast<double>(i) / (points - 1)));
  return g;
}

inline std::vector<double> to_double(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// A number for a reader: `digits` significant digits, and very small or large ones as
// 2.5·10⁸ rather than 2.5e+08.
inline std::string pretty(double x, int digits = 2) {
  if (x == 0) return "0";
  if (!std::isfinite(x)) return x != x ? "—" : (x > 0 ? "∞" : "−∞");
  const double ax = std::abs(x);
  char buf[64];
  if (ax >= 1e-3 && ax < 1e4) {
    if (ax >= std::pow(10.0, digits)) std::snprintf(buf, sizeof buf, "%.0f", x);
    else std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    return buf;
  }
  int exponent = static_cast<int>(std::floor(std::log10(ax)));
  // The mantissa rounded to `digits` significant digits; 9.96 to one digit carries to 10.
  const double unit = std::pow(10.0, digits - 1);
  double mantissa = std::round(x / std::pow(10.0, exponent) * unit) / unit;
  if (std::abs(mantissa) >= 10) ++exponent, mantissa /= 10;
  std::snprintf(buf, sizeof buf, "%.*g", digits, mantissa);
  static const char* const kSuper[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string e = exponent < 0 ? "⁻" : "";
  for (char ch : std::to_string(std::abs(exponent))) e += kSuper[ch - '0'];
  return (std::string(buf) == "1" ? std::string() : std::string(buf) + "·") + "10" + e;
}

// A working buffer of rows × cols values, or OutOfMemory naming `what` and its size (a
// bare std::bad_alloc names nothing; an overflowing size is refused the same way).
template <class T>
std::vector<T> buffer(const std::string& what, int64_t rows, int64_t cols = 1) {
  int64_t count = 0, bytes = 0;
  const bool too_large = rows < 0 || cols < 0 || __builtin_mul_overflow(rows, cols, &count) ||
                         __builtin_mul_overflow(count, static_cast<int64_t>(sizeof(T)), &bytes);
  const std::string size = cols == 1 ? fmt::format("{} values", rows) : fmt::format("{} × {} values", rows, cols);
  // A zero-filled buffer beyond the machine's memory would meet the OOM killer, not bad_alloc
  // (overcommit), and AddressSanitizer's operator new dies rather than throw: ask first.
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  try {
    if (!too_large && !(memory > 0 && static_cast<double>(bytes) > memory))
      return std::vector<T>(static_cast<size_t>(count));
  } catch (const std::bad_alloc&) {
  }
  if (too_large) throw OutOfMemory(fmt::format("{}: {} of {} bytes is beyond any memory", what, size, sizeof(T)));
  throw OutOfMemory(fmt::format("{}: cannot allocate {} of {} bytes ({:.3g} GiB)", what, size, sizeof(T),
                                static_cast<double>(bytes) / (1 << 30)));
}

inline void require_positive(const std::string& key, const std::vector<int64_t>& v) {
  if (v.empty()) throw Error(key + ": empty list");
  for (int64_t x : v)
    if (x <= 0) throw Error(key + ": " + std::to_string(x) + " is not positive");
}
inline void require_positive(const std::string& key, const std::vector<double>& v) {
  if (v.empty()) throw Error(key + ": empty list");
  for (double x : v)
    if (!(x > 0) || !std::isfinite(x)) throw Error(fmt::format("{}: {} is not positive", key, x));
}
inline void require_positive(const std::string& key, int64_t v) {
  if (v <= 0) throw Error(key + ": " + std::to_string(v) + " is not positive");
}
inline void require_positive(const std::string& key, double v) {
  if (!(v > 0)) throw Error(key + ": " + std::to_string(v) + " is not positive");
}


// Rules of parameters that name a scale policy, a scaling of the training study, an optimiser.
inline Rule scale_policy_rule() {
  return rules::parses_as("a scale policy (none, inv_sqrt_d, inv_d, entropy_invariant, ssmax, or a number)",
                          [](const std::string& s) { ScalePolicy::parse(s); });
}
inline Rule scaling_rule() {
  return rules::parses_as("a scaling (qknorm, or a scale policy)", [](const std::string& s) { train::Scaling::parse(s); });
}
inline Rule optimizer_rule() {
  return rules::parses_as("an optimiser (adam, sgd)", [](const std::string& s) { train::parse_optimizer(s); });
}

// The scale policies named by a list parameter; a bad name is an Error naming the key.
inline std::vector<ScalePolicy> parse_policies(const std::string& key, const std::vector<std::string>& names) {
  std::vector<ScalePolicy> policies;
  for (const auto& name : names) {
    try {
      policies.push_back(ScalePolicy::parse(name));
    } catch (const Error& e) {
      throw Error(key + ": " + e.what());
    }
  }
  return policies;
}

// A parameter as a reader writes it: 0.5, 2, 0.125 (no trailing zeros or point).
inline std::string trimmed_number(double x) {
  std::string s = std::to_string(x);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// A policy as the report's reader should see it (legends, verdict texts): the formula, not
// the parameter name ("1/√d_k", not "inv_sqrt_d").
inline std::string policy_label(const ScalePolicy& p) {
  switch (p.kind()) {
    case ScalePolicy::Kind::none: return "no scale";
    case ScalePolicy::Kind::inv_sqrt_d: return "1/√d_k";
    case ScalePolicy::Kind::inv_d: return "1/d_k";
    case ScalePolicy::Kind::entropy_invariant: return "log₅₁₂(n)/√d_k";
    case ScalePolicy::Kind::scalable_softmax:
      return "SSMax " + trimmed_number(p.parameter()) + "·ln(n)/√d_k";
    case ScalePolicy::Kind::fixed:
      return "fixed " + trimmed_number(p.parameter());
  }
  return p.name();
}

// One colour per policy on every figure of the report (Okabe–Ito): no scale orange, 1/√d_k
// blue, 1/d_k green, the log n-aware scales purple and yellow.
inline std::string policy_colour(const ScalePolicy& p) {
  switch (p.kind()) {
    case ScalePolicy::Kind::none: return "#D55E00";
    case ScalePolicy::Kind::inv_sqrt_d: return "#0072B2";
    case ScalePolicy::Kind::inv_d: return "#009E73";
    case ScalePolicy::Kind::entropy_invariant: return "#CC79A7";
    case ScalePolicy::Kind::scalable_softmax: return "#E69F00";
    case ScalePolicy::Kind::fixed: return "#56B4E9";
  }
  return "#000000";
}

// "0 = none, 1 = inv_sqrt_d, ...": what the policy codes of a CSV column mean.
inline std::string policy_legend(const std::vector<ScalePolicy>& policies) {
  std::string legend;
  for (size_t i = 0; i < policies.size(); ++i)
    legend += (i ? ", " : "") + std::to_string(i) + " = " + policies[i].name();
  return legend;
}

// ---- figures ----------------------------------------------------------------
inline Series series(std::string label, Style style, std::vector<double> x, std::vector<double> y,
                     std::string color = "") {
  Series s;
  s.label = std::move(label);
  s.style = style;
  s.x = std::move(x);
  s.y = std::move(y);
  s.color = std::move(color);
  return s;
}
inline Series band(std::string label, std::vector<double> x, std::vector<double> lo, std::vector<double> hi,
                   std::string color = "") {
  Series s;
  s.label = std::move(label);
  s.style = Style::band;
  s.x = std::move(x);
  s.y_low = std::move(lo);
  s.y_high = std::move(hi);
  s.color = std::move(color);
  return s;
}
inline Panel panel(std::string title, std::string x_label, std::string y_label, bool log_x = false,
                   bool log_y = false) {
  Panel p;
  p.title = std::move(title);
  p.x_label = std::move(x_label);
  p.y_label = std::move(y_label);
  p.log_x = log_x;
  p.log_y = log_y;
  return p;
}

// Lays a figure's panels out in one column, 640 px wide (its text then stays legible on a phone,
// see plot_gnuplot.cpp). gnuplot's layout gives every panel the same height: that of the panel
// needing most, its plot plus the rows its legend below takes.
inline void stack_panels(Figure& f, double plot_px = 290) {
  f.layout_cols = 1;
  f.layout_rows = static_cast<int>(f.panels.size());
  f.width = 640;
  double panel_px = 0;
  for (const Panel& p : f.panels) {
    size_t named = 0, longest = 0;
    for (const Series& s : p.series)
      if (!s.label.empty()) ++named, longest = std::max(longest, s.label.size());
    // A legend entry is its sample plus its text, ~10 px a character at the figure's text size.
    const double entry_px = 10.0 * static_cast<double>(std::min<size_t>(longest, 60) + 5);
    const size_t columns = std::max<size_t>(1, static_cast<size_t>(f.width / entry_px));
    const size_t rows = p.legend_position == "off" || p.heatmap ? 0 : (named + columns - 1) / columns;
    // A heatmap is square: taller, so that its cells (and the values printed in them) get room.
    panel_px = std::max(panel_px, (p.heatmap ? 1.6 * plot_px : plot_px) + 22.0 * static_cast<double>(rows));
  }
  f.height = static_cast<int>(std::ceil((f.title.empty() ? 0 : 40) + panel_px * f.layout_rows));
}

// The tallest a figure may be: a screen (the viewport of a 1920 × 1080 display; figures are shown at
// their own width, 640 px, so their height is shown as it is).
inline constexpr int kScreenPx = 1000;

// A stacked figure cut into parts of at most `per` panels, so that none is taller than a screen:
// the first keeps its name; part k (from 2) is named <name>_<k> and its caption says it continues
// the one above. The report shows every part wherever the first is shown.
inline std::vector<Figure> split_stack(const Figure& f, size_t per) {
  std::vector<Figure> parts;
  for (size_t start = 0; start < f.panels.size(); start += per) {
    Figure part = f;
    part.panels.assign(f.panels.begin() + static_cast<std::ptrdiff_t>(start),
                       f.panels.begin() + static_cast<std::ptrdiff_t>(std::min(f.panels.size(), start + per)));
    if (start > 0) {
      part.name = f.name + "_" + std::to_string(parts.size() + 1);
      part.title = "";
      part.caption = "Continued from the figure above.";
      part.alt = "Continued: " + f.alt;
    }
    // Each part keeps a legend: a stack whose later panels leave theirs to the first gives its first panel's.
    const bool any_legend = std::any_of(part.panels.begin(), part.panels.end(),
                                        [](const Panel& p) { return p.legend_position != "off"; });
    if (!any_legend) part.panels.front().legend_position = f.panels.front().legend_position;
    stack_panels(part);
    parts.push_back(std::move(part));
  }
  return parts;
}

// The figures with every stack taller than a screen cut into parts that fit (split_stack): the one
// place that decides it, applied by run() to every experiment's figures.
inline std::vector<Figure> fit_to_screen(std::vector<Figure> figures) {
  std::vector<Figure> out;
  for (auto& f : figures) {
    if (f.height <= kScreenPx || f.panels.size() < 2 || f.layout_cols != 1) {
      out.push_back(std::move(f));
      continue;
    }
    const double title_px = f.title.empty() ? 0 : 40;
    const double panel_px = (f.height - title_px) / std::max(1, f.layout_rows);
    const auto per = static_cast<size_t>(std::max(1.0, std::floor((kScreenPx - title_px) / panel_px)));
    for (auto& part : split_stack(f, per)) out.push_back(std::move(part));
  }
  return out;
}

// Shades x in [x_lo, x_hi] behind a panel's curves (e.g. the head sizes models use), as a
// band that spans the panel's y range: the range set on the panel, else its data's, padded.
// Call it after the panel's series are added.
inline void shade_x_range(Panel& p, double x_lo, double x_hi, std::string label) {
  // Within the data's own x range: the band must not widen the axis.
  double data_lo = INFINITY, data_hi = -INFINITY;
  for (const auto& se : p.series)
    for (double x : se.x)
      if (std::isfinite(x)) data_lo = std::min(data_lo, x), data_hi = std::max(data_hi, x);
  x_lo = std::max(x_lo, data_lo);
  x_hi = std::min(x_hi, data_hi);
  if (!(x_lo < x_hi)) return;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& se : p.series)
    for (const auto* ys : {&se.y, &se.y_low, &se.y_high})
      for (double y : *ys)
        if (std::isfinite(y) && (!p.log_y || y > 0)) lo = std::min(lo, y), hi = std::max(hi, y);
  if (!std::isfinite(lo)) return;
  if (p.log_y) {
    lo /= 2, hi *= 2;
  } else {
    const double pad = 0.05 * (hi - lo > 0 ? hi - lo : 1);
    lo -= pad, hi += pad;
  }
  if (!p.y_min) p.y_min = lo;
  if (!p.y_max) p.y_max = hi;
  Series b = band(std::move(label), {x_lo, x_hi}, {*p.y_min, *p.y_min}, {*p.y_max, *p.y_max}, "#e3e3e3");
  b.label.clear();  // the caption says what the grey is: a legend entry would crowd the panel
  p.series.insert(p.series.begin(), std::move(b));
}

// Okabe–Ito colours by index, for pairing a measured series with its theory line.
inline std::string colour(size_t i) {
  static const char* const c[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
  return c[i % 7];
}

inline Outcome outcome_of(bool ok) { return ok ? Outcome::confirmed : Outcome::refuted; }

}  // namespace attnlab::lab::util
