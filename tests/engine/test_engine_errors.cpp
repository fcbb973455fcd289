// The engine rejects exactly what the reference rejects, with the same message,
// and runs correctly on the portable target (EMU128 or SCALAR: no SIMD instructions).
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"

namespace al = attnlab;
using al::Tensor;

namespace {

template <class T>
std::string forward_error(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                          const al::AttentionOptions<T>& opt) {
  try {
    if constexpr (std::is_same_v<T, float>)
      al::detail::allocating_forward(q.view(), k.view(), v.view(), opt);
    else
      al::detail::allocating_forward(q.view(), k.view(), v.view(), opt);
  } catch (const al::Error& e) {
    return e.what();
  }
  return "";
}

struct Case {
  al::Shape q, k, v;
  int option;  // 0 none, 1 bad bool mask, 2 bad additive mask, 3 bad padding, 4 NaN in q, 5 inf mask value
};

}  // namespace

TEST(EngineErrors, SameMessagesAsTheReference) {
  const std::vector<Case> cases = {
      {{2, 4, 5, 64}, {2, 2, 7, 32}, {2, 2, 7, 16}, 0}, {{2, 4, 5, 64}, {3, 2, 7, 64}, {3, 2, 7, 16}, 0},
      {{2, 4, 5, 64}, {2, 2, 7, 64}, {2, 2, 6, 16}, 0}, {{2, 4, 5, 64}, {2, 3, 7, 64}, {2, 3, 7, 16}, 0},
      {{2, 4, 0, 64}, {2, 2, 7, 64}, {2, 2, 7, 16}, 0}, {{2, 4, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, 1},
      {{2, 4, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, 2},   {{2, 4, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, 3},
      {{2, 4, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, 4},   {{2, 4, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, 5},
  };
  for (const Case& c : cases) {
    const Tensor<double> qd(c.q), kd(c.k), vd(c.v);
    const Tensor<float> qf(c.q), kf(c.k), vf(c.v);
    Tensor<uint8_t> bm({1, 3, 5, 7});
    Tensor<double> amd({1, 1, 5, c.option == 5 ? 7 : 6});
    Tensor<float> amf({1, 1, 5, c.option == 5 ? 7 : 6});
    const std::vector<int64_t> lengths{3, 8};
    al::AttentionOptions<double> od;
    al::AttentionOptions<float> of;
    if (c.option == 1) od.bool_mask = of.bool_mask = bm.view();
    if (c.option == 2 || c.option == 5) {
      if (c.option == 5) amd(0, 0, 1, 2) = amf(0, 0, 1, 2) = INFINITY;
      od.additive_mask = amd.view();
      of.additive_mask = amf.view();
    }
    if (c.option == 3) od.key_lengths = of.key_lengths = lengths;
    Tensor<double> qd2 = qd;
    Tensor<float> qf2 = qf;
    if (c.option == 4) qd2(1, 2, 3, 4) = qf2(1, 2, 3, 4) = NAN;
    const std::string want = forward_error(qd2, kd, vd, od);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(forward_error(qf2, kf, vf, of), want);
  }
  // Backward: a wrong dq shape and a NaN in dO.
  const Tensor<float> q({1, 2, 4, 8}), k({1, 1, 6, 8}), v({1, 1, 6, 8});
  const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view());
  Tensor<float> go(f.out.shape()), dq({1, 2, 4, 7}), dk(k.shape()), dv(v.shape());
  const Tensor<double> qd({1, 2, 4, 8}), kd({1, 1, 6, 8}), vd({1, 1, 6, 8});
  const auto fd = al::detail::allocating_forward(qd.view(), kd.view(), vd.view());
  Tensor<double> god(fd.out.shape()), dqd({1, 2, 4, 7}), dkd(kd.shape()), dvd(vd.shape());
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const al::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string want = msg([&] {
    al::reference::attention_backward(qd.view(), kd.view(), vd.view(), fd.out.view(), fd.lse.view(), god.view(), {},
                                      {dqd.view(), dkd.view(), dvd.view()});
  });
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(msg([&] {
              al::attention_backward(q.view(), k.view(), v.view(), f.out.view(), f.lse.view(), go.view(), {},
                                     {dq.view(), dk.view(), dv.view()});
            }),
            want);
  go(0, 1, 2, 3) = NAN;
  god(0, 1, 2, 3) = NAN;
  Tensor<float> dq_ok(q.shape());
  Tensor<double> dqd_ok(qd.shape());
  const std::string want_nan = msg([&] {
    al::reference::attention_backward(qd.view(), kd.view(), vd.view(), fd.out.view(), fd.lse.view(), god.view(), {},
                                      {dqd_ok.view(), dkd.view(), dvd.view()});
  });
  EXPECT_EQ(want_nan, "grad_out: non-finite value nan at [0, 1, 2, 3]");
  EXPECT_EQ(msg([&] {
              al::attention_backward(q.view(), k.view(), v.view(), f.out.view(), f.lse.view(), go.view(), {},
                                     {dq_ok.view(), dk.view(), dv.view()});
            }),
            want_nan);
}

TEST(EngineErrors, EngineOnlyArguments) {
  const Tensor<float> q({1, 2, 4, 8}), k({1, 1, 6, 8}), v({1, 1, 6, 8});
  Tensor<float> out({1, 2, 4, 8}), lse({1, 2, 4, 1}), bad({1, 2, 5, 1});
  const al::RowDiagnostics<float> diag{bad.view(), {}, {}};
  try {
    al::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view(), diag});
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), "diagnostics.max_prob: shape [1, 2, 5, 1] should be [1, 2, 4, 1]");
  }
  try {
    al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, al::ComputeConfig{-1});
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), "engine: threads: -1 is outside [0, 1024] (0 = all cores)");
  }
  // Tens of thousands of threads once crashed inside libgomp: now the same rule's error.
  for (int threads : {al::kMaxThreads + 1, 65536, 99999})
    EXPECT_THROW(al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, al::ComputeConfig{threads}),
                 al::Error);
}

TEST(EngineErrors, ScoresBeyondFloatRangeAreAnErrorNotAMaskedRow) {
  // q·k = 2e40 overflows float32. Found by fuzzing: the kernel used to return O = 0,
  // L = −inf (as if every key were masked) without a word.
  Tensor<float> q({1, 1, 2, 2}, 1e20f), k({1, 1, 3, 2}, 1e20f), v({1, 1, 3, 2}, 1.0f);
  q(0, 0, 0, 0) = 0.5f;
  q(0, 0, 0, 1) = 0.5f;  // row 0 is fine; row 1 overflows
  al::AttentionOptions<float> none;
  none.scale = al::ScalePolicy::none();
  EXPECT_EQ(forward_error(q, k, v, none),
            "attention: scores of row [0, 0, 1] overflow float32 (|scale·q·k| > 3.4e38); scale the inputs down or "
            "use the double-precision reference");
  // Scores near the top of the float range, but finite, still work, and so does
  // the backward (its exp(S − L) is clamped at 1 against a rounded L).
  Tensor<float> q2({1, 1, 1, 1}, 1e19f), k2({1, 1, 2, 1}), v2({1, 1, 2, 1});
  k2(0, 0, 0, 0) = 1e19f;
  k2(0, 0, 1, 0) = -1e19f;
  v2(0, 0, 0, 0) = 3.0f;
  const auto f = al::detail::allocating_forward(q2.view(), k2.view(), v2.view(), none);
  EXPECT_EQ(f.out(0, 0, 0, 0), 3.0f);
  const Tensor<float> dout({1, 1, 1, 1}, 1.0f);
  const auto g = al::detail::allocating_backward(q2.view(), k2.view(), v2.view(), f, dout.view(), none);
  for (const auto* t : {&g.dq, &g.dk, &g.dv})
    for (float x : t->storage()) EXPECT_TRUE(std::isfinite(x));
  EXPECT_EQ(g.dv(0, 0, 0, 0), 1.0f);
}

TEST(EngineErrors, AnOverflowedScoreIsFoundBeforeSoftcapAlibiOrScoreModCanHideIt) {
  // q·k = 9e38 overflows float32 (the double reference's score is 0, after 9e38 − 9e38):
  // softcap's 50·tanh(inf) = 50 made it a plausible score, so four query rows (the tiled
  // path) returned the one-hot [1, 0, 0] where the reference gives [0.045, 0.909, 0.045].
  Tensor<float> q({1, 1, 4, 2}, 3e19f), k({1, 1, 3, 2}), v({1, 1, 3, 3});
  k(0, 0, 0, 0) = 3e19f;
  k(0, 0, 0, 1) = -3e19f;
  k(0, 0, 1, 0) = 1e-19f;
  for (int64_t j = 0; j < 3; ++j) v(0, 0, j, j) = 1.0f;
  const std::string overflow = "attention: scores of row [0, 0, 0] overflow float32";
  auto clamp = al::make_score_mod([](auto s, int64_t, int64_t, int64_t, int64_t) { return std::min<decltype(s)>(s, 50); },
                                  [](auto s, int64_t, int64_t, int64_t, int64_t) { return decltype(s)(s < 50); });
  const std::vector<float> slopes{0.5f};
  for (int treatment = 0; treatment < 3; ++treatment) {
    SCOPED_TRACE(treatment);
    al::AttentionOptions<float> o;
    o.scale = al::ScalePolicy::none();
    if (treatment == 0) o.softcap = 50.0;
    if (treatment == 1) o.score_mod = &clamp;
    if (treatment == 2) o.softcap = 50.0, o.alibi_slopes = slopes;
    EXPECT_EQ(forward_error(q, k, v, o).substr(0, overflow.size()), overflow);
    // The backward, given the reference's (finite) O and L, must not turn the overflowed
    // score into a gradient either: exp(min(S − L, 0)) made NaN or +inf a probability of 1.
    Tensor<double> qd({1, 1, 4, 2}), kd({1, 1, 3, 2}), vd({1, 1, 3, 3});
    for (size_t n = 0; n < q.storage().size(); ++n) qd.storage()[n] = q.storage()[n];
    for (size_t n = 0; n < k.storage().size(); ++n) kd.storage()[n] = k.storage()[n];
    for (size_t n = 0; n < v.storage().size(); ++n) vd.storage()[n] = v.storage()[n];
    al::AttentionOptions<double> od;
    od.scale = o.scale;
    od.softcap = o.softcap;
    od.score_mod = o.score_mod;
    const std::vector<double> slopes_d{0.5};
    if (treatment == 2) od.alibi_slopes = slopes_d;
    const auto ref = al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od);
    al::detail::AttentionForward<float> f{Tensor<float>({1, 1, 4, 3}), Tensor<float>({1, 1, 4, 1})};
    for (size_t n = 0; n < f.out.storage().size(); ++n) f.out.storage()[n] = static_cast<float>(ref.out.storage()[n]);
    for (size_t n = 0; n < f.lse.storage().size(); ++n) f.lse.storage()[n] = static_cast<float>(ref.lse.storage()[n]);
    const Tensor<float> dout({1, 1, 4, 3}, 1.0f);
    try {
      al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view(), o);
      ADD_FAILURE() << "no error from the backward";
    } catch (const al::Error& e) {
      EXPECT_EQ(std::string(e.what()).substr(0, overflow.size()), overflow);
    }
  }
}

// The same on the decode path's fused step, which applies softcap and ALiBi itself
// (FusedTreatScores): one query row of 4 heads sharing a K/V head (fused on every target),
// whole blocks of 8 keys, one key's q·k = 9e38 (+inf in float, finite in double).
TEST(EngineErrors, AnOverflowedScoreIsFoundBeforeTheFusedDecodeStepsSoftcapOrAlibi) {
  const int64_t n_keys = 64, d = 16;
  Tensor<float> q({1, 4, 1, d}, 3e19f), k({1, 1, n_keys, d}), v({1, 1, n_keys, d});
  k(0, 0, 5, 0) = 3e19f;
  for (int64_t j = 0; j < n_keys; ++j) v(0, 0, j, j % d) = 1.0f;
  const std::string overflow = "attention: scores of row [0, 0, 0] overflow float32";
  const std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  const auto& counts = al::engine::testing::tile_counts();
  for (int treatment = 0; treatment < 2; ++treatment) {
    SCOPED_TRACE(treatment);
    al::AttentionOptions<float> o;
    o.scale = al::ScalePolicy::none();
    o.softcap = 50.0;
    if (treatment == 1) o.alibi_slopes = slopes;
    const int64_t before = counts.decode_fused.load();
    EXPECT_EQ(forward_error(q, k, v, o).substr(0, overflow.size()), overflow);
    EXPECT_GT(counts.decode_fused.load(), before) << "not the fused step";
  }
}

TEST(EngineErrors, ScoresAllBelowFloatRangeAreAnErrorNotAMaskedRow) {
  // q·k = −2e40 for every key: −inf in float, and the row passed for a fully masked one
  // (O = 0, L = −inf) on the tiled and the decode paths, where the reference's keys are
  // equally likely. The backward, given the reference's O and L, gave zero gradients.
  for (const int64_t Nq : {1, 4})
    for (const int64_t Nk : {3, 512}) {
      SCOPED_TRACE(testing::Message() << "Nq " << Nq << ", Nk " << Nk);
      Tensor<float> q({1, 1, Nq, 2}, 1e20f), k({1, 1, Nk, 2}, -1e20f), v({1, 1, Nk, 2}, 1.0f);
      al::AttentionOptions<float> none;
      none.scale = al::ScalePolicy::none();
      EXPECT_EQ(forward_error(q, k, v, none).substr(0, 51), "attention: scores of row [0, 0, 0] overflow float32");
      al::detail::AttentionForward<float> f{Tensor<float>({1, 1, Nq, 2}, 1.0f), Tensor<float>({1, 1, Nq, 1}, -1e38f)};
      const Tensor<float> dout({1, 1, Nq, 2}, 1.0f);
      EXPECT_THROW(al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view(), none), al::Error);
      // One key below the range beside finite ones is a probability of 0, as in the reference.
      for (int64_t j = 1; j < Nk; ++j) k(0, 0, j, 0) = k(0, 0, j, 1) = 0.0f;
      EXPECT_EQ(forward_error(q, k, v, none), "");
      const auto ok = al::detail::allocating_forward(q.view(), k.view(), v.view(), none);
      EXPECT_NO_THROW(al::detail::allocating_backward(q.view(), k.view(), v.view(), ok, dout.view(), none));
    }
}

TEST(EngineErrors, UncheckedNaNInputGivesNaNRowsInBothImplementations) {
  // With check_finite off the contract is NaN in, NaN out, the same in the engine and the
  // reference. The engine used to return O = 0, L = −inf (a row that looks fully masked)
  // where the reference raised.
  auto nan_rows = [](auto zero) {
    using T = decltype(zero);
    Tensor<T> q({1, 1, 3, 4}, T(0.5)), k({1, 1, 5, 4}, T(0.25)), v({1, 1, 5, 2}, T(1));
    q(0, 0, 1, 2) = std::numeric_limits<T>::quiet_NaN();  // row 1 only
    al::AttentionOptions<T> off;
    off.check_finite = false;
    const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), off);
    for (int64_t i = 0; i < 3; ++i) {
      const bool nan_row = i == 1;
      EXPECT_EQ(std::isnan(f.lse(0, 0, i, 0)), nan_row) << "row " << i << " lse " << f.lse(0, 0, i, 0);
      for (int64_t c = 0; c < 2; ++c) {
        EXPECT_EQ(std::isnan(f.out(0, 0, i, c)), nan_row) << "row " << i << " out " << f.out(0, 0, i, c);
        if (!nan_row) EXPECT_NEAR(f.out(0, 0, i, c), 1.0, 1e-6);
      }
    }
  };
  nan_rows(0.0f);  // the engine
  nan_rows(0.0);   // the reference
}

TEST(EngineErrors, ZeroScaleTimesOverflowedScoreIsAnErrorNotAnEmptyRow) {
  // Found by fuzzing: one visible key, so SSMax's scale s·ln(1) = 0, while q·k
  // overflows float: 0·inf = NaN, which SIMD max skips, so the row looked empty
  // (O = 0) where the reference returns v.
  Tensor<float> q({1, 1, 1, 2}, 3.4e38f), k({1, 1, 1, 2}, 3.0f), v({1, 1, 1, 2}, 2.0f);
  al::AttentionOptions<float> ssmax;
  ssmax.scale = al::ScalePolicy::scalable_softmax(0.5);
  EXPECT_EQ(forward_error(q, k, v, ssmax),
            "attention: scores of row [0, 0, 0] overflow float32 (|scale·q·k| > 3.4e38); scale the inputs down or "
            "use the double-precision reference");
  // A row emptied by an additive −inf mask is still a legitimate fully masked row.
  Tensor<float> q2({1, 1, 1, 2}, 1.0f), am({1, 1, 1, 1}, -INFINITY);
  al::AttentionOptions<float> masked;
  masked.additive_mask = am.view();
  EXPECT_EQ(forward_error(q2, k, v, masked), "");
}

TEST(EngineErrors, GradientOverflowIsAnErrorNotNaN) {
  // Found by fuzzing: v = −1e30 and dO = 1e30 make dP = dO·v overflow float, and
  // dS = P (dP − D) = −inf − (−inf) = NaN. The double reference is fine here.
  Tensor<float> q({1, 1, 1, 3}, 0.5f), k({1, 1, 1, 3}, 0.5f), v({1, 1, 1, 2}, 1.0f), dout({1, 1, 1, 2}, 1.0f);
  v(0, 0, 0, 1) = -1e30f;
  dout(0, 0, 0, 1) = 1e30f;
  const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view());
  try {
    al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view());
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflows float32 at"), std::string::npos) << e.what();
  }
}

TEST(EngineTargets, PortableTargetPassesTheAccuracyRule) {
  const std::string best = al::engine::target_name();
#if defined(__x86_64__)
  EXPECT_TRUE(best == "AVX3" || best == "AVX3_DL" || best == "AVX2" || best == "SSE4") << best;
#endif
  // The portable fallback is EMU128 or, on compilers where Highway considers
  // it broken, SCALAR: both use no SIMD instructions. The sanitized build compiles
  // neither; its kernels' baseline, SSE4, is the fallback there (src/CMakeLists.txt).
  hwy::SetSupportedTargetsForTest(HWY_EMU128 | HWY_SCALAR);
  const std::string portable = al::engine::target_name();
#ifdef ATTNLAB_KERNELS_WITHOUT_EMU128
  EXPECT_EQ(portable, "SSE4");
#else
  EXPECT_TRUE(portable == "EMU128" || portable == "SCALAR") << portable;
#endif
  for (int n = 0; n < 150 && !::testing::Test::HasFailure(); ++n) {
    std::mt19937_64 rng(5000 + n);
    al::test::ProblemLimits lim;
    lim.dims = {1, 3, 16, 64, 80};
    lim.max_seq = n % 10 == 0 ? 100 : 16;
    lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_sinks = lim.p_packed = lim.p_dropout = 0.25;
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE("problem " + std::to_string(n) + ": " + p.describe());
    al::test::check_engine_against_reference(p, n % 4 == 1, al::ComputeConfig{1});
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(al::engine::target_name(), best);
}

// The finiteness check scans rows branch-free on the exponent bits before it
// looks for the culprit: every position of a row (head dims that are not a
// whole number of vectors), every kind of non-finite value, unit-stride and
// strided rows, in float (the engine) and double (the reference), must still be
// found and named, and the finite extremes must pass.
template <class T>
void ExpectEveryNonFiniteFound() {
  constexpr T kInf = std::numeric_limits<T>::infinity(), kNaN = std::numeric_limits<T>::quiet_NaN();
  for (int64_t d : {1, 16, 37}) {
    for (int64_t stride : {1, 3}) {
      // k viewed with element stride `stride` over a buffer of [1, 1, 4, d·stride]
      std::vector<T> kbuf(static_cast<size_t>(4 * d * stride), T(0.5));
      for (size_t i = 0; i < kbuf.size(); ++i)
        if (i % 5 == 0) kbuf[i] = (i % 2 ? 1 : -1) * std::numeric_limits<T>::max();  // finite extremes
      kbuf[1] = std::numeric_limits<T>::denorm_min();
      const Tensor<T> q({1, 1, 3, d}), v({1, 1, 4, 8});
      const al::ConstView<T> k(kbuf.data(), {1, 1, 4, d}, {4 * d * stride, 4 * d * stride, d * stride, stride});
      auto run = [&] {
        try {
          if constexpr (std::is_same_v<T, float>)
            al::detail::allocating_forward(q.view(), k, v.view(), {});
          else
            al::detail::allocating_forward(q.view(), k, v.view(), {});
        } catch (const al::Error& e) {
          return std::string(e.what());
        }
        return std::string();
      };
      // Finite extremes and a subnormal pass the check (q is zero: nothing else can fail).
      EXPECT_EQ(run().find("non-finite"), std::string::npos) << "d " << d << " stride " << stride;
      for (int64_t j = 0; j < d; ++j)
        for (const auto& [bad, text] : {std::pair{kInf, "inf"}, {-kInf, "-inf"}, {kNaN, "nan"}, {-kNaN, "-nan"}}) {
          T& slot = kbuf[static_cast<size_t>(2 * d * stride + j * stride)];
          const T keep = slot;
          slot = bad;
          const std::string want = "k: non-finite value " + std::string(text) + " at [0, 0, 2, " + std::to_string(j) + "]";
          EXPECT_EQ(run(), want) << "d " << d << " stride " << stride;
          slot = keep;
        }
    }
  }
}

TEST(EngineErrors, EveryNonFiniteValueIsFoundAtEveryPosition) {
  ExpectEveryNonFiniteFound<float>();
  ExpectEveryNonFiniteFound<double>();
}

TEST(EngineErrors, AnInterruptStopsForwardAndBackwardInBothImplementations) {
  // ComputeConfig::interrupt (Python's Ctrl-C): asked between tiles (engine, on the calling
  // thread) or rows (reference); true ends the call with Interrupted. The backward stops
  // taking key tiles; the ordered dQ waits must not deadlock when it does (2 threads).
  auto check = [](auto zero) {
    using T = decltype(zero);
    Tensor<T> q({1, 2, 700, 16}, T(0.1)), k({1, 2, 900, 16}, T(0.2)), v({1, 2, 900, 16}, T(0.3));
    const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view());
    const Tensor<T> dout(f.out.shape(), T(1));
    al::ComputeConfig stop_now;
    stop_now.threads = 2;
    int asked = 0;
    stop_now.interrupt = [&asked] { return ++asked >= 1; };
    EXPECT_THROW(al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, stop_now), al::Interrupted);
    EXPECT_GE(asked, 1);
    EXPECT_THROW(al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view(), {}, stop_now),
                 al::Interrupted);
    al::ComputeConfig never;
    never.threads = 2;
    never.interrupt = [] { return false; };
    const auto g = al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, never);
    EXPECT_EQ(g.out.storage(), f.out.storage());  // asking changes nothing
  };
  check(0.0f);  // the engine
  check(0.0);   // the reference
}

TEST(EngineMemory, AHeadTooLargeToPackHasItsVCopiedPerTileAndStaysExact) {
  // dv = 1 rows are padded to 16 floats when V is packed, so a head of 2^20 keys would
  // pack 64 MB of V for 4 MB of input (issue 18: a 64 MB key array cost 1 GB). Past the
  // pack budget V is copied per key tile instead; the answer must not change.
  const int64_t nk = int64_t{1} << 20;
  Tensor<double> q({1, 1, 3, 1}), k({1, 1, nk, 1}), v({1, 1, nk, 1});
  for (int64_t j = 0; j < nk; ++j) {
    k(0, 0, j, 0) = std::sin(0.001 * static_cast<double>(j));
    v(0, 0, j, 0) = std::cos(0.003 * static_cast<double>(j));
  }
  for (int64_t i = 0; i < 3; ++i) q(0, 0, i, 0) = 2.0 * static_cast<double>(i) - 1.5;
  Tensor<float> qf({1, 1, 3, 1}), kf({1, 1, nk, 1}), vf({1, 1, nk, 1});
  for (int64_t j = 0; j < nk; ++j) kf(0, 0, j, 0) = static_cast<float>(k(0, 0, j, 0));
  for (int64_t j = 0; j < nk; ++j) vf(0, 0, j, 0) = static_cast<float>(v(0, 0, j, 0));
  for (int64_t i = 0; i < 3; ++i) qf(0, 0, i, 0) = static_cast<float>(q(0, 0, i, 0));
  al::AttentionOptions<float> causal_f;
  causal_f.causal = al::Causal::bottom_right;
  al::AttentionOptions<double> causal_d;
  causal_d.causal = al::Causal::bottom_right;
  const auto ref = al::detail::allocating_forward(q.view(), k.view(), v.view(), causal_d);
  const auto eng = al::detail::allocating_forward(qf.view(), kf.view(), vf.view(), causal_f);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(eng.out(0, 0, i, 0), ref.out(0, 0, i, 0), 1e-5) << "row " << i;
    EXPECT_NEAR(eng.lse(0, 0, i, 0), ref.lse(0, 0, i, 0), 1e-4) << "row " << i;
  }
}
