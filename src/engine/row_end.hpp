#pragma once
// How a finished attention row ends, for every forward kernel (the tiled path's FinishRow,
// the decode merge, the paged cache's merge): O = acc / l and L = m + log l, by one set of
// rules for rows whose scores overflowed and rows that saw no key, and one message for the
// overflow. Target-independent: a few scalar operations a row.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace attnlab::engine {

// A row's merged running max m and sum l (decode_merge-inl.h's MergePartials).
struct MergedRow {
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
};

struct RowEnd {
  // A score that overflowed float (|scale·q·k| > 3.4e38, or inf − inf inside the dot
  // product) leaves m = +inf or NaN, l = NaN, or a NaN among hidden keys. Such a row has no
  // answer in float32: the caller reports it (with check_finite) and it gets O = L = NaN
  // (what a caller sees with check_finite off: NaN in, NaN out, as the reference).
  bool overflow = false;
  bool empty = false;  // overflowed, or no visible key: O = 0 (or NaN), L = −inf (or NaN)
  float fill = 0.0f;   // the value of O (and of diagnostics) when empty
  float lse = 0.0f;
};

// Writes O [dv] at orow (stride st) from acc and returns the row's end, L included.
inline RowEnd finish_row(float m, float l, bool nan_score, const float* acc, int64_t dv, float* orow, int64_t st) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  RowEnd e;
  e.overflow = std::isnan(m) || m == std::numeric_limits<float>::infinity() || std::isnan(l) || nan_score;
  e.empty = e.overflow || m == kNegInf || !(l > 0.0f);
  const float inv = e.empty ? 0.0f : 1.0f / l;
  e.fill = e.overflow ? std::numeric_limits<float>::quiet_NaN() : 0.0f;  // NaN in, NaN out
  for (int64_t c = 0; c < dv; ++c) orow[c * st] = e.empty ? e.fill : acc[c] * inv;
  e.lse = e.overflow ? std::numeric_limits<float>::quiet_NaN() : e.empty ? kNegInf : m + std::log(l);
  return e;
}

// The error for an overflowed row [b, h, i] of `operation` (with check_finite).
inline std::string scores_overflow_message(const char* operation, int64_t b, int64_t h, int64_t i) {
  return fmt::format("{}: scores of row [{}, {}, {}] overflow float32 (|scale·q·k| > 3.4e38); scale the inputs down "
                     "or use the double-precision reference",
                     operation, b, h, i);
}

}  // namespace attnlab::engine
