// The kernels' exp (src/engine/exp-inl.h) against exp in double, on every
// float in the range the softmax uses, for the best target and the portable one.
// This measures the error bound that docs/engine.md states; the kernels'
// end-to-end accuracy is test_engine_accuracy's business.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "engine/testing/kernel_pieces.hpp"

namespace {

namespace eng = attnlab::engine::testing;

struct ExpError {
  double max_ulp = 0;     // over results ≥ FLT_MIN, in units of the result's ulp
  double max_tiny = 0;    // largest |error| where the true value is below FLT_MIN
  float worst_x = 0;
  uint64_t count = 0;
};

// Every float x in [−88.1, 0] with bit pattern ≡ 0 mod `step`, plus exact specials.
ExpError MeasureExp(uint32_t step) {
  const uint32_t lo = std::bit_cast<uint32_t>(-0.0f), hi = std::bit_cast<uint32_t>(-88.1f);
  ExpError e;
  std::vector<float> x;
  x.reserve(1 << 16);
  auto flush = [&] {
    while (x.size() % 16 != 0) x.push_back(0.0f);
    std::vector<float> y = x;
    eng::exp_piece(y.data(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      const double err = std::abs(static_cast<double>(y[i]) - want);
      if (want < std::numeric_limits<float>::min()) {
        e.max_tiny = std::max(e.max_tiny, err);
      } else {
        const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
        if (err / ulp > e.max_ulp) {
          e.max_ulp = err / ulp;
          e.worst_x = x[i];
        }
      }
      ++e.count;
    }
    x.clear();
  };
  for (uint64_t b = lo; b <= hi; b += step) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    if (x.size() == (1 << 16)) flush();
  }
  flush();
  return e;
}

// step 7 visits about 1/7 of the ~1.1e9 floats in range (every exponent, every
// residue of the mantissa mod 7): 160 million points, ~1 s on AVX3.
void ExpectBound(const char* target, uint32_t step) {
  const ExpError e = MeasureExp(step);
  std::printf("[%s] exp on [-88.1, 0]: %llu points, max error %.3f ulp (at x = %.9g), "
              "max |error| below FLT_MIN %.3g\n",
              target, static_cast<unsigned long long>(e.count), e.max_ulp, e.worst_x, e.max_tiny);
  EXPECT_LE(e.max_ulp, 2.0) << target << " at x = " << e.worst_x;
  EXPECT_LE(e.max_tiny, static_cast<double>(std::numeric_limits<float>::min())) << target;
}

void ExpectSpecials(const char* target) {
  std::vector<float> x(16, 0.0f);
  x[0] = -std::numeric_limits<float>::infinity();
  x[1] = 0.0f;
  x[2] = -0.0f;
  x[3] = -1e30f;
  x[4] = -std::numeric_limits<float>::denorm_min();
  x[5] = -std::log(2.0f);
  eng::exp_piece(x.data(), x.size());
  EXPECT_EQ(x[0], 0.0f) << target << ": a masked key must get probability exactly 0";
  EXPECT_EQ(x[1], 1.0f) << target << ": the row's max must get exactly 1";
  EXPECT_EQ(x[2], 1.0f) << target;
  EXPECT_EQ(x[3], 0.0f) << target;
  EXPECT_EQ(x[4], 1.0f) << target;
  EXPECT_NEAR(x[5], 0.5f, 1.2e-7f) << target;
}

TEST(EngineExp, MaxErrorOnTheSoftmaxRangeBestTarget) {
  ExpectSpecials(eng::pieces_target_name());
  ExpectBound(eng::pieces_target_name(), 7);
}

TEST(EngineExp, MaxErrorOnTheSoftmaxRangePortableTarget) {
  hwy::SetSupportedTargetsForTest(HWY_EMU128 | HWY_SCALAR);
  const std::string target = eng::pieces_target_name();
  ExpectSpecials(target.c_str());
  ExpectBound(target.c_str(), 97);  // the portable target is slow (no SIMD): a sparser sample
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace

// softcap's tanh (tile_ops-inl.h, SoftcapTanh): its polynomial on every 61st float of
// [0, 1/2) (whole vectors of small values take it), Highway's Tanh beyond, against tanh
// in double. Odd, so the positive half says it all. The bound, 2 ulps, is what
// docs/engine.md states for softcap.
TEST(EngineTanh, WithinTwoUlpsOnBothBranches) {
  for (const auto& [lo, hi, step] : {std::tuple{1e-30f, 0.4999f, 61u}, std::tuple{0.5f, 20.0f, 101u}}) {
    double max_ulp = 0;
    float worst = 0;
    std::vector<float> x;
    for (uint32_t b = std::bit_cast<uint32_t>(lo); b <= std::bit_cast<uint32_t>(hi); b += step)
      x.push_back(std::bit_cast<float>(b));
    while (x.size() % 16 != 0) x.push_back(lo);
    std::vector<float> y = x;
    eng::tanh_piece(y.data(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::tanh(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      const double err = std::abs(static_cast<double>(y[i]) - want) / ulp;
      if (err > max_ulp) max_ulp = err, worst = x[i];
    }
    std::printf("softcap tanh on [%g, %g] (%s): max error %.2f ulp at %g over %zu points\n", lo, hi,
                eng::pieces_target_name(), max_ulp, worst, x.size());
    EXPECT_LE(max_ulp, 2.0) << "at " << worst;
  }
}
