// Scale policies: values, parsing, and the per-row n under causality and padding.
#include <gtest/gtest.h>

#include <cmath>

#include "attnlab/error.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/scale.hpp"
#include "core/attention_results.hpp"

namespace al = attnlab;
using al::ScalePolicy;

TEST(Scale, PolicyValues) {
  EXPECT_DOUBLE_EQ(ScalePolicy()(64, 10), 0.125);
  EXPECT_DOUBLE_EQ(ScalePolicy::none()(64, 10), 1.0);
  EXPECT_DOUBLE_EQ(ScalePolicy::inv_d()(64, 10), 1.0 / 64);
  EXPECT_DOUBLE_EQ(ScalePolicy::fixed(0.3)(64, 10), 0.3);
  EXPECT_DOUBLE_EQ(ScalePolicy::entropy_invariant()(64, 512), 0.125);  // log₅₁₂ 512 = 1
  EXPECT_NEAR(ScalePolicy::entropy_invariant()(16, 4096), (4.0 / 3.0) / 4.0, 1e-15);
  EXPECT_DOUBLE_EQ(ScalePolicy::scalable_softmax(0.5)(4, 100), 0.5 * std::log(100.0) / 2);
  EXPECT_EQ(ScalePolicy::entropy_invariant()(64, 1), 0.0);
  EXPECT_TRUE(ScalePolicy::entropy_invariant().depends_on_n());
  EXPECT_FALSE(ScalePolicy::none().depends_on_n());
}

TEST(Scale, ParseRoundTripsAndRejectsNonsense) {
  for (const auto& p : {ScalePolicy(), ScalePolicy::none(), ScalePolicy::inv_d(), ScalePolicy::entropy_invariant(),
                        ScalePolicy::scalable_softmax(0.25), ScalePolicy::fixed(0.125)}) {
    const ScalePolicy r = ScalePolicy::parse(p.name());
    EXPECT_EQ(r.kind(), p.kind()) << p.name();
    EXPECT_EQ(r.parameter(), p.parameter()) << p.name();
  }
  EXPECT_THROW(ScalePolicy::parse("sqrt"), al::Error);
  EXPECT_THROW(ScalePolicy::parse("ssmax:x"), al::Error);
  EXPECT_THROW(ScalePolicy::parse("nan"), al::Error);
  EXPECT_THROW(ScalePolicy::fixed(INFINITY), al::Error);
}

TEST(Scale, LogNPoliciesUseEachRowsVisibleKeys) {
  // With causal top-left, row i sees i + 1 keys; with identical keys the output
  // is independent of the scale, but the L = m + log l reveals it: all scores
  // of row i equal scale_i · q·k, so L_i = scale_i · q·k + log(i + 1).
  const int64_t N = 6, d = 4;
  al::Tensor<double> q({1, 1, N, d}, 1.0), k({1, 1, N, d}, 1.0), v({1, 1, N, 1}, 1.0);
  al::AttentionOptions<double> opt;
  opt.scale = ScalePolicy::entropy_invariant();
  opt.causal = al::Causal::top_left;
  const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), opt);
  for (int64_t i = 0; i < N; ++i) {
    const double n = static_cast<double>(i + 1);
    const double scale = std::log(n) / std::log(512.0) / 2.0;
    EXPECT_NEAR(f.lse(0, 0, i, 0), scale * d + std::log(n), 1e-14) << i;
  }
}
