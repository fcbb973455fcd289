// Tile skipping, proven by counting: the engine computes a (query tile, key tile) pair
// exactly when some row of the query tile sees some key of the key tile. With a
// sliding window that is the band around the diagonal (cost ∝ N·(left + right), not
// N²); with packed sequences, no pair that only crosses a sequence boundary. The count
// comes from the engine's test hook (engine::tile_counts(), plan.hpp), the expectation
// from the visibility rule written out independently (tests/support/problem.hpp).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "attnlab/attention.hpp"
#include "engine/plan.hpp"
#include "naive_float.hpp"

namespace al = attnlab;
using al::engine::kBc;
using al::engine::kBr;

namespace {

// Pairs (b, h, query tile, key tile) in which some (i, j) is visible.
int64_t pairs_with_a_visible_key(const al::test::Problem& p) {
  const int64_t nqt = (p.Nq + kBr - 1) / kBr, nkt = (p.Nk + kBc - 1) / kBc;
  int64_t pairs = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      std::vector<uint8_t> seen(static_cast<size_t>(nqt * nkt), 0);
      for (int64_t i = 0; i < p.Nq; ++i) {
        const auto vis = p.visible_keys(b, h, i);
        for (int64_t j = 0; j < p.Nk; ++j)
          if (vis[static_cast<size_t>(j)]) seen[static_cast<size_t>(i / kBr * nkt + j / kBc)] = 1;
      }
      for (uint8_t s : seen) pairs += s;
    }
  return pairs;
}

struct Counted {
  int64_t forward, backward;
  al::AttentionForward<float> f;
  al::AttentionGrads<float> g;
};

Counted run_counted(const al::test::Problem& p, int threads) {
  const al::test::FloatProblem fp(p);
  const auto opt = fp.options(p);
  auto& counts = al::engine::tile_counts();
  const int64_t f0 = counts.forward.load(), b0 = counts.backward.load();
  Counted c{0, 0, al::attention_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, al::ComputeConfig{threads}), {}};
  c.forward = counts.forward.load() - f0;
  c.g = al::attention_backward(fp.q.view(), fp.k.view(), fp.v.view(), c.f, fp.grad_out.view(), opt,
                               al::ComputeConfig{threads});
  c.backward = counts.backward.load() - b0;
  return c;
}

bool same_bits(const al::Tensor<float>& a, const al::Tensor<float>& b) {
  return std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

}  // namespace

TEST(EngineTiles, SlidingWindowComputesOnlyTheBand) {
  std::mt19937_64 rng(1);
  for (const al::Window w : {al::Window{300, 0}, al::Window{100, 200}, al::Window{0, 0}}) {
    al::test::Problem p = al::test::make_problem(rng, 1, 2, 1, 2048, 2048, 16, 16);
    p.window = w;
    const int64_t dense = 2 * (2048 / kBr) * (2048 / kBc);
    const int64_t want = pairs_with_a_visible_key(p);
    const Counted c = run_counted(p, 2);
    EXPECT_EQ(c.forward, want) << "window (" << w.left << ", " << w.right << ")";
    EXPECT_EQ(c.backward, want) << "window (" << w.left << ", " << w.right << ")";
    EXPECT_LT(want, dense / 2);
    // The band's tiles computed in any order give the same bits (the backward's dQ
    // counters start at each query tile's first visible key tile).
    const Counted one = run_counted(p, 1), three = run_counted(p, 3);
    EXPECT_TRUE(same_bits(one.g.dq, c.g.dq) && same_bits(one.g.dq, three.g.dq));
    EXPECT_TRUE(same_bits(one.g.dk, c.g.dk) && same_bits(one.f.out, three.f.out));
  }
}

TEST(EngineTiles, PackedSequencesNeverComputeAcrossABoundary) {
  std::mt19937_64 rng(2);
  for (const auto causal : {al::Causal::none, al::Causal::top_left}) {
    al::test::Problem p = al::test::make_problem(rng, 1, 1, 1, 4096, 4096, 16, 16);
    p.cu_seqlens_q = al::test::random_offsets(rng, 16, 4096, false);
    p.cu_seqlens_k = p.cu_seqlens_q;
    p.causal = causal;
    const int64_t want = pairs_with_a_visible_key(p);
    const Counted c = run_counted(p, 2);
    EXPECT_EQ(c.forward, want) << to_string(causal);
    EXPECT_EQ(c.backward, want) << to_string(causal);
    EXPECT_LT(want, (4096 / kBr) * (4096 / kBc) / 2);
  }
}

TEST(EngineTiles, DenseAndCausalCountsAreUnchanged) {
  std::mt19937_64 rng(3);
  al::test::Problem p = al::test::make_problem(rng, 1, 1, 1, 1000, 1100, 8, 8);
  EXPECT_EQ(run_counted(p, 2).forward, 16 * 5);  // every pair
  p.causal = al::Causal::top_left;
  const Counted c = run_counted(p, 2);
  EXPECT_EQ(c.forward, pairs_with_a_visible_key(p));
  EXPECT_EQ(c.backward, pairs_with_a_visible_key(p));
}
