// The decode path's split-KV results are bitwise identical for 1, 2 and 3 threads: chunks are
// merged in a fixed order whichever thread ran them.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "engine_path.hpp"
#include "same_bits.hpp"

namespace al = attnlab;
using al::engine::ForwardPath;

TEST(EngineDecode, SplitKVBitwiseIdenticalForOneTwoThreeThreads) {
  struct Variant {
    int64_t B, Hq, Hkv, Nq, Nk, d;
    al::Causal causal;
    bool padding, bool_mask;
    al::ScalePolicy scale;
    bool variants = false;  // window, softcap, ALiBi and sinks together
  };
  const Variant variants[] = {
      {2, 8, 2, 1, 5000, 64, al::Causal::none, false, false, al::ScalePolicy::inv_sqrt_d()},
      {1, 4, 1, 16, 3000, 128, al::Causal::bottom_right, true, false, al::ScalePolicy::inv_sqrt_d()},
      {3, 2, 2, 3, 1500, 80, al::Causal::none, true, true, al::ScalePolicy::scalable_softmax(0.5)},
      {1, 8, 2, 1, 6000, 64, al::Causal::bottom_right, false, false, al::ScalePolicy::inv_sqrt_d(), true},
  };
  for (const Variant& vt : variants) {
    std::mt19937_64 rng(91 + vt.Nk);
    al::test::Problem p;
    p.B = vt.B, p.Hq = vt.Hq, p.Hkv = vt.Hkv, p.Nq = vt.Nq, p.Nk = vt.Nk, p.d = p.dv = vt.d;
    p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
    p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
    p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
    p.grad_out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
    for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
    p.causal = vt.causal;
    p.scale = vt.scale;
    if (vt.padding)
      for (int64_t b = 0; b < p.B; ++b) p.key_lengths.push_back(p.Nk - 700 * b - 37);
    if (vt.bool_mask) {
      p.bool_mask = al::Tensor<uint8_t>({p.B, 1, p.Nq, p.Nk});
      std::bernoulli_distribution keep(0.6);
      for (auto& m : p.bool_mask.storage()) m = keep(rng);
    }
    if (vt.variants) {
      p.window = {2500, 0};
      p.softcap = 5.0;
      for (int64_t h = 0; h < p.Hq; ++h) {
        p.alibi_slopes.push_back(std::ldexp(1.0, -static_cast<int>(h + 1)));
        p.sinks.push_back(0.3 * static_cast<double>(h) - 1.0);
      }
    }
    SCOPED_TRACE(p.describe());
    const al::test::FloatProblem fp(p);
    const auto opt = fp.options(p);
    auto run = [&](int threads) {
      const al::ComputeConfig cfg{threads};
      auto f = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, cfg);
      EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
      auto g = al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), f, fp.grad_out.view(), opt, cfg);
      return std::vector<al::Tensor<float>>{f.out, f.lse, g.dq, g.dk, g.dv};
    };
    const auto one = run(1);
    for (int threads : {2, 3, 3, 0}) {
      const auto other = run(threads);
      for (size_t x = 0; x < one.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(one[x], other[x]))
            << al::test::kQuantity[x] << ": " << threads << " threads against 1";
    }
  }
}
