// Tile skipping, proven by counting: the engine computes a (query tile, key tile) pair
// exactly when some row of the query tile sees some key of the key tile. With a
// sliding window that is the band around the diagonal (cost ∝ N·(left + right), not
// N²); with packed sequences, no pair that only crosses a sequence boundary. The count
// comes from the engine's test hook (engine::testing::tile_counts(), engine/testing/engine_probe.hpp), the expectation
// from the visibility rule written out independently (tests/support/problem.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "engine_path.hpp"
#include "attnlab/attention.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/plan.hpp"
#include "engine/testing/engine_probe.hpp"
#include "naive_float.hpp"
#include "same_bits.hpp"

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
  al::detail::AttentionForward<float> f;
  al::detail::AttentionGrads<float> g;
};

Counted run_counted(const al::test::Problem& p, int threads) {
  const al::test::FloatProblem fp(p);
  const auto opt = fp.options(p);
  auto& counts = al::engine::testing::tile_counts();
  const int64_t f0 = counts.forward.load(), b0 = counts.backward.load();
  Counted c{
      0, 0, al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, al::ComputeConfig{threads}), {}};
  c.forward = counts.forward.load() - f0;
  c.g = al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), c.f, fp.grad_out.view(), opt,
                                        al::ComputeConfig{threads});
  c.backward = counts.backward.load() - b0;
  return c;
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
    EXPECT_TRUE(al::test::same_bits(one.g.dq, c.g.dq) && al::test::same_bits(one.g.dq, three.g.dq));
    EXPECT_TRUE(al::test::same_bits(one.g.dk, c.g.dk) && al::test::same_bits(one.f.out, three.f.out));
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

// mask_mod with a BlockMask (FlexAttention's idea): tiles the mask hides entirely are
// never computed, and tiles it shows entirely never call mask_mod; only partial tiles
// evaluate it, once per element of their rows. Counted: pairs by the hook, mask_mod
// calls by the mask itself.
TEST(EngineTiles, BlockMaskSkipsEmptyTilesAndFullTilesSkipTheMask) {
  std::mt19937_64 rng(4);
  const int64_t N = 1500;
  const auto doc = al::test::random_offsets(rng, 5, N, false);
  static std::atomic<int64_t> calls{0};
  auto document = [&](int64_t q) { return std::upper_bound(doc.begin(), doc.end(), q) - doc.begin(); };
  const auto mask = al::make_mask_mod([&](int64_t, int64_t, int64_t q, int64_t k) {
    calls.fetch_add(1, std::memory_order_relaxed);
    return document(q) == document(k) && k <= q;  // causal within each document
  });
  al::test::Problem p = al::test::make_problem(rng, 1, 2, 1, N, N, 16, 16);
  p.mask_mod = &mask;
  const al::BlockMask blocks = al::BlockMask::build(mask, 1, 1, N, N);  // depends on neither b nor h
  // Independently: each tile's kind, from the mask's definition.
  const int64_t nqt = (N + kBr - 1) / kBr, nkt = (N + kBc - 1) / kBc;
  int64_t nonempty = 0, partial_elements = 0;
  for (int64_t qt = 0; qt < nqt; ++qt)
    for (int64_t kt = 0; kt < nkt; ++kt) {
      int64_t seen = 0, n = 0;
      for (int64_t i = qt * kBr; i < std::min(N, (qt + 1) * kBr); ++i)
        for (int64_t j = kt * kBc; j < std::min(N, (kt + 1) * kBc); ++j, ++n)
          seen += document(i) == document(j) && j <= i;
      nonempty += seen > 0;
      if (seen > 0 && seen < n) partial_elements += n;
      EXPECT_EQ(static_cast<int>(blocks.at(0, 1, qt, kt)), seen == 0 ? 0 : seen == n ? 2 : 1) << qt << " " << kt;
    }
  const al::test::FloatProblem fp(p);
  auto opt = fp.options(p);
  opt.block_mask = &blocks;
  auto& counts = al::engine::testing::tile_counts();
  const int64_t f0 = counts.forward.load(), b0 = counts.backward.load();
  calls = 0;
  const auto f = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, al::ComputeConfig{2});
  EXPECT_EQ(counts.forward.load() - f0, 2 * nonempty);   // two heads
  EXPECT_EQ(calls.load(), 2 * partial_elements);           // full tiles: no call
  calls = 0;
  const auto g = al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), f, fp.grad_out.view(), opt,
                                                 al::ComputeConfig{2});
  EXPECT_EQ(counts.backward.load() - b0, 2 * nonempty);
  EXPECT_EQ(calls.load(), 2 * partial_elements);
  EXPECT_LT(nonempty, nqt * nkt / 2);
  // (That the result is attention under the mask is EngineAccuracy's business: its random
  // problems draw mask_mods with empty, full and partial tiles.)
}

// The decode path (one query row against a long cache) skips the same tiles: a sliding
// window reads the window's keys, not the cache, and a packed batch of decoding steps
// computes each sequence's own keys only.
TEST(EngineTiles, DecodingWithAWindowOrPackedSequencesComputesOnlyTheirKeys) {
  std::mt19937_64 rng(3);
  {
    al::test::Problem p = al::test::make_problem(rng, 1, 1, 1, 1, 8192, 64, 64);
    p.window = {300, 0};
    const Counted c = run_counted(p, 2);
    EXPECT_EQ(al::test::last_forward_path(), al::engine::ForwardPath::decode);
    EXPECT_EQ(c.forward, pairs_with_a_visible_key(p));
    EXPECT_LE(c.forward, 300 / kBc + 2);
  }
  {
    // Four packed sequences; only the last two have a new query row this step.
    al::test::Problem p = al::test::make_problem(rng, 1, 1, 1, 2, 4096, 64, 64);
    p.cu_seqlens_q = {0, 0, 0, 1, 2};
    p.cu_seqlens_k = {0, 700, 1500, 3000, 4096};
    p.causal = al::Causal::bottom_right;
    const Counted c = run_counted(p, 2);
    EXPECT_EQ(al::test::last_forward_path(), al::engine::ForwardPath::decode);
    // One row block holds both rows: a key tile is computed if either row sees one of its keys.
    EXPECT_EQ(c.forward, (4096 - 1500 / kBc * kBc + kBc - 1) / kBc);
  }
}
