// Results are bitwise identical for any thread count and from run to run,
// including the backward whose dQ many key tiles add into (flash_kernels.cpp,
// "Determinism and dQ").
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "attnlab/attention.hpp"
#include "naive_float.hpp"

namespace al = attnlab;

namespace {

struct EngineRun {
  al::AttentionForward<float> f;
  al::AttentionGrads<float> g;
};

bool same_bits(const al::Tensor<float>& a, const al::Tensor<float>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

void expect_identical(const EngineRun& a, const EngineRun& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.f.out, b.f.out)) << what << ": out";
  EXPECT_TRUE(same_bits(a.f.lse, b.f.lse)) << what << ": lse";
  EXPECT_TRUE(same_bits(a.g.dq, b.g.dq)) << what << ": dq";
  EXPECT_TRUE(same_bits(a.g.dk, b.g.dk)) << what << ": dk";
  EXPECT_TRUE(same_bits(a.g.dv, b.g.dv)) << what << ": dv";
}

}  // namespace

TEST(EngineDeterminism, BitwiseIdenticalForOneTwoThreeThreadsAndRepeats) {
  for (int variant = 0; variant < 3; ++variant) {
    std::mt19937_64 rng(77 + variant);
    al::test::ProblemLimits lim;
    lim.max_seq = 600;  // several key tiles per query tile: many adds into each dQ tile
    lim.max_batch = 2;
    lim.max_kv_heads = 2;
    lim.max_group = 2;
    lim.dims = {16, 64};
    lim.p_bool_mask = 0.0;  // keep the cost down; masks are covered by the accuracy test
    al::test::Problem p = al::test::random_problem(rng, lim);
    if (variant == 0) p.causal = al::Causal::top_left;
    SCOPED_TRACE(p.describe());
    const al::test::FloatProblem fp(p);
    const auto opt = fp.options(p);
    auto run = [&](int threads) {
      const al::ComputeConfig cfg{threads};
      EngineRun r{al::attention_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, cfg), {}};
      r.g = al::attention_backward(fp.q.view(), fp.k.view(), fp.v.view(), r.f, fp.grad_out.view(), opt, cfg);
      return r;
    };
    const EngineRun one = run(1);
    expect_identical(one, run(2), "2 threads vs 1");
    expect_identical(one, run(3), "3 threads vs 1");
    expect_identical(one, run(3), "3 threads again");
    expect_identical(one, run(0), "all cores vs 1");
  }
}
