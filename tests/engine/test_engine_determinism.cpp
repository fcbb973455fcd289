// Results are bitwise identical for any thread count and from run to run,
// including the backward whose dQ many key tiles add into (flash_backward_kernels.cpp,
// "Determinism and dQ"), with every variant: the dropout mask (Philox, keyed by the
// element) and the sinks' gradient too.
#include <gtest/gtest.h>

#include <random>

#include "attnlab/attention.hpp"
#include "core/attention_results.hpp"
#include "naive_float.hpp"
#include "same_bits.hpp"

namespace al = attnlab;

namespace {

struct EngineRun {
  al::detail::AttentionForward<float> f;
  al::detail::AttentionGrads<float> g;
  al::Tensor<uint8_t> dropout_mask;
};

void expect_identical(const EngineRun& a, const EngineRun& b, const std::string& what) {
  EXPECT_TRUE(al::test::same_bits(a.f.out, b.f.out)) << what << ": out";
  EXPECT_TRUE(al::test::same_bits(a.f.lse, b.f.lse)) << what << ": lse";
  EXPECT_TRUE(al::test::same_bits(a.g.dq, b.g.dq)) << what << ": dq";
  EXPECT_TRUE(al::test::same_bits(a.g.dk, b.g.dk)) << what << ": dk";
  EXPECT_TRUE(al::test::same_bits(a.g.dv, b.g.dv)) << what << ": dv";
  EXPECT_EQ(a.g.dsinks, b.g.dsinks) << what << ": dsinks";
  EXPECT_EQ(a.dropout_mask.storage(), b.dropout_mask.storage()) << what << ": dropout mask";
}

}  // namespace

TEST(EngineDeterminism, BitwiseIdenticalForOneTwoThreeThreadsAndRepeats) {
  // Variants 3 and 4 add every option of attention_variants.hpp (4: packed sequences).
  for (int variant = 0; variant < 5; ++variant) {
    std::mt19937_64 rng(77 + variant);
    al::test::ProblemLimits lim;
    lim.max_seq = 600;  // several key tiles per query tile: many adds into each dQ tile
    lim.max_batch = 2;
    lim.max_kv_heads = 2;
    lim.max_group = 2;
    lim.dims = {16, 64};
    lim.p_bool_mask = 0.0;  // keep the cost down; masks are covered by the accuracy test
    if (variant >= 3) {
      lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_sinks = lim.p_dropout = 1.0;
      lim.p_packed = variant == 4 ? 1.0 : 0.0;
      lim.max_batch = variant == 4 ? 1 : 2;
    }
    al::test::Problem p = al::test::random_problem(rng, lim);
    if (variant == 0) p.causal = al::Causal::top_left;
    SCOPED_TRACE(p.describe());
    const al::test::FloatProblem fp(p);
    if (variant == 4) ASSERT_FALSE(p.cu_seqlens_q.empty());
    const auto opt = fp.options(p);
    auto run = [&](int threads) {
      const al::ComputeConfig cfg{threads};
      EngineRun r;
      r.dropout_mask = al::Tensor<uint8_t>({p.B, p.Hq, p.Nq, p.Nk});
      auto fopt = opt;
      r.f = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), fopt, cfg, r.dropout_mask.view());
      r.g = al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), r.f, fp.grad_out.view(), opt, cfg);
      return r;
    };
    const EngineRun one = run(1);
    expect_identical(one, run(2), "2 threads vs 1");
    expect_identical(one, run(3), "3 threads vs 1");
    expect_identical(one, run(3), "3 threads again");
    expect_identical(one, run(0), "all cores vs 1");
  }
}
