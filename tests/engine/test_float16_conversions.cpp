// bfloat16 and float16 conversions (attnlab/float16.hpp): exact to float; round to nearest
// even from float, checked against an independent oracle (the nearest of all finite 16-bit
// values, ties to the even pattern) on every midpoint between neighbours and its float
// neighbours, and on random floats; overflow to ±inf, NaN kept. The engine's vector rounding
// of rows (engine/round_rows.hpp) gives from_float's bits on every SIMD target.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "attnlab/float16.hpp"
#include "engine/round_rows.hpp"
#include "hwy/targets.h"

namespace al = attnlab;
using al::bfloat16;
using al::float16;

namespace {

// Every finite value of T, ascending, with its bit pattern: the oracle's table.
template <class T>
std::vector<std::pair<double, uint16_t>> finite_values() {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const T x = T::from_bits(static_cast<uint16_t>(b));
    if (x.is_finite() && b != 0x8000) v.emplace_back(static_cast<double>(x.to_float()), static_cast<uint16_t>(b));
  }
  std::sort(v.begin(), v.end());
  return v;
}

// The oracle: x rounded to T by search (nearest finite value, ties to the even pattern,
// ±inf past the largest finite value by half an ulp or more), as bits. x finite.
template <class T>
uint16_t oracle_round(const std::vector<std::pair<double, uint16_t>>& table, float xf, uint16_t inf_bits) {
  const double x = xf;
  const double top = table.back().first, ulp_top = top - table[table.size() - 2].first;
  const uint16_t sign = std::signbit(xf) ? 0x8000 : 0;
  if (std::abs(x) >= top + ulp_top / 2) {
    // Exactly halfway past the top rounds to even: the top's pattern is odd (…fff), so inf.
    return static_cast<uint16_t>(sign | inf_bits);
  }
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(x, uint16_t{0}));
  if (it == table.end()) return table.back().second;  // within half an ulp above the top
  if (it == table.begin()) return it->second;         // within half an ulp below the bottom
  if (it->first == x) return x == 0 ? (sign | it->second) : it->second;
  const auto hi = *it, lo = *(it - 1);
  const double dl = x - lo.first, dh = hi.first - x;
  uint16_t r = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) == 0 ? lo.second : hi.second);
  if (r == 0 || r == 0x8000) r = sign;  // rounded to zero: keeps x's sign
  return r;
}

// Every midpoint between neighbouring finite values of T, its float neighbours and the upper
// value, then 2,000,000 random finite floats.
template <class T>
std::vector<float> rounding_inputs(const std::vector<std::pair<double, uint16_t>>& table) {
  std::vector<float> xs;
  for (size_t n = 1; n < table.size(); ++n) {
    const double mid = (table[n - 1].first + table[n].first) / 2;
    const auto m = static_cast<float>(mid);  // exact: 16-bit midpoints have ≤ 12 significant bits
    xs.insert(xs.end(),
              {m, std::nextafter(m, -INFINITY), std::nextafter(m, INFINITY), static_cast<float>(table[n].first)});
  }
  std::mt19937 rng(7);
  for (int n = 0; n < 2000000; ++n) {
    const auto x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(x)) xs.push_back(x);
  }
  return xs;
}

template <class T>
void check_rounding(uint16_t inf_bits) {
  const auto table = finite_values<T>();
  const std::vector<float> xs = rounding_inputs<T>(table);
  int64_t wrong = 0;
  for (float x : xs) {
    const uint16_t want = oracle_round<T>(table, x, inf_bits), got = T::from_float(x).bits;
    if (got != want && ++wrong <= 5)
      ADD_FAILURE() << "x = " << x << ": got 0x" << std::hex << got << ", want 0x" << want;
  }
  EXPECT_EQ(wrong, 0) << "of " << xs.size();
}

}  // namespace

TEST(Float16Types, EveryPatternConvertsToFloatAndBackExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const bfloat16 x = bfloat16::from_bits(bits);
    const float16 y = float16::from_bits(bits);
    if (std::isnan(x.to_float()))
      EXPECT_TRUE(std::isnan(bfloat16::from_float(x.to_float()).to_float()));
    else
      EXPECT_EQ(bfloat16::from_float(x.to_float()).bits, bits);
    if (std::isnan(y.to_float()))
      EXPECT_TRUE(std::isnan(float16::from_float(y.to_float()).to_float()));
    else
      EXPECT_EQ(float16::from_float(y.to_float()).bits, bits);
    EXPECT_EQ(x.is_finite(), std::isfinite(x.to_float()));
    EXPECT_EQ(y.is_finite(), std::isfinite(y.to_float()));
  }
  EXPECT_EQ(float16::from_bits(0x7bff).to_float(), 65504.0f);
  EXPECT_EQ(float16::from_bits(0x0001).to_float(), std::ldexp(1.0f, -24));
  EXPECT_EQ(bfloat16::from_bits(0x3f80).to_float(), 1.0f);
}

TEST(Float16Types, BFloat16RoundsToNearestEven) { check_rounding<bfloat16>(0x7f80); }
TEST(Float16Types, Float16RoundsToNearestEven) { check_rounding<float16>(0x7c00); }

TEST(Float16Types, OverflowInfinityAndNaN) {
  EXPECT_EQ(float16::from_float(65519.0f).bits, 0x7bff);
  EXPECT_EQ(float16::from_float(65520.0f).bits, 0x7c00);
  EXPECT_EQ(float16::from_float(-1e30f).bits, 0xfc00);
  EXPECT_EQ(bfloat16::from_float(3.4e38f).bits, 0x7f80);  // past bfloat16's largest, 3.39e38
  EXPECT_EQ(bfloat16::from_float(-INFINITY).bits, 0xff80);
  EXPECT_TRUE(std::isnan(float16::from_float(NAN).to_float()));
  EXPECT_TRUE(std::isnan(bfloat16::from_float(NAN).to_float()));
  EXPECT_TRUE(std::isnan(bfloat16::from_float(std::bit_cast<float>(0x7f800001u)).to_float()));  // not inf
}

namespace {

// round_rows against from_float, bit for bit, on each SIMD target compiled and supported: the
// rounding inputs above, the specials (zeros, infinities, NaNs with payloads, float
// subnormals, the largest floats), each row started at several offsets so that every lane
// position meets every value and the tails are taken.
template <class T>
void check_row_rounding() {
  std::vector<float> xs = rounding_inputs<T>(finite_values<T>());
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                        0x7fa5a5a5u, 0xffbfffffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x477fffffu,
                        0x47800000u, 0x387fffffu, 0x38800000u, 0x33000000u, 0x33000001u, 0xb3800000u})
    xs.push_back(std::bit_cast<float>(bits));
  std::vector<uint16_t> want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) want[i] = T::from_float(xs[i]).bits;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t offset : {size_t{0}, size_t{1}, size_t{7}, size_t{13}}) {
      std::vector<T> got(xs.size() - offset);
      al::engine::round_rows(xs.data() + offset, got.data(), static_cast<int64_t>(got.size()));
      int64_t wrong = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i].bits != want[i + offset] && ++wrong <= 3)
          ADD_FAILURE() << hwy::TargetName(target) << ", offset " << offset << ": x = " << xs[i + offset] << " (0x"
                        << std::hex << std::bit_cast<uint32_t>(xs[i + offset]) << "): got 0x" << got[i].bits
                        << ", from_float 0x" << want[i + offset] << std::dec;
      EXPECT_EQ(wrong, 0) << hwy::TargetName(target) << ", offset " << offset;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace

TEST(Float16Types, EngineRowsRoundAsFromFloatOnEveryTarget) {
  check_row_rounding<bfloat16>();
  check_row_rounding<float16>();
}
