// query_offset and key_offset (attention_options.hpp) in the engine: under the accuracy
// rule against the reference on random problems with the window, ALiBi and causality; a
// block of rows against every key equals the whole call's rows bit for bit (the same sums
// happen); and blocks of rows and keys merged as a ring merges them stay within the rule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "attnlab/engine.hpp"
#include "blocks.hpp"
#include "engine_check.hpp"

namespace al = attnlab;
using al::test::Cut;
using al::test::Problem;

namespace {

template <class T>
bool same_bits(const al::Tensor<T>& a, const al::Tensor<T>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<size_t>(a.numel())) == 0;
}

}  // namespace

TEST(EngineVariantsOffsets, RandomProblemsWithOffsetsWithinTheAccuracyRule) {
  for (int n = 0; n < 200; ++n) {
    std::mt19937_64 rng(7000 + static_cast<uint64_t>(n));
    al::test::ProblemLimits lim;
    lim.dims = {3, 16, 64};
    lim.max_seq = n % 10 == 0 ? 300 : 20;  // some cross the engine's tiles
    lim.max_batch = n % 10 == 0 ? 1 : 2;
    lim.p_window = 0.5, lim.p_alibi = 0.5, lim.p_softcap = 0.2, lim.p_sinks = 0.2;
    Problem p = al::test::random_problem(rng, lim);
    p.query_offset = std::uniform_int_distribution<int64_t>(0, 40)(rng);
    p.key_offset = std::uniform_int_distribution<int64_t>(0, 40)(rng);
    SCOPED_TRACE("problem " + std::to_string(n) + ": " + p.describe());
    al::test::check_engine_against_reference(p, n % 7 == 3, al::ComputeConfig{1});
    if (::testing::Test::HasFailure()) break;
  }
}

// Rows [r0, r0 + n) against all N keys, placed by their offsets, cut where the engine's
// query tiles (64 rows) are: every row's scores, softmax and sums are the whole call's, so
// out, lse and dq are its bits. (Cut elsewhere, a tile's rows share other key rectangles
// and vector groupings: equal under the rule, BlocksMergeToTheWholeCallWithinTheRule.)
TEST(EngineVariantsOffsets, TileAlignedRowBlocksAreTheWholeCallsRowsBitwise) {
  std::mt19937_64 rng(71);
  const int64_t N = 300;
  const std::vector<Cut> row_cuts = {{0, 64}, {64, 128}, {192, 108}};
  for (const auto causal : {al::Causal::none, al::Causal::bottom_right})
    for (const al::Window w : {al::Window{}, al::Window{70, 0}, al::Window{40, 90}})
      for (const bool alibi : {false, true}) {
        Problem p = al::test::make_problem(rng, 1, 2, 1, N, N, 16, 16);
        p.causal = causal, p.window = w;
        if (alibi) p.alibi_slopes = {0.05, 0.3};
        const al::test::FloatProblem f(p);
        const auto opt = f.options(p);
        const auto whole = al::detail::allocating_forward(f.q.view(), f.k.view(), f.v.view(), opt);
        const auto whole_g =
            al::detail::allocating_backward(f.q.view(), f.k.view(), f.v.view(), whole, f.grad_out.view(), opt);
        for (const Cut& rc : row_cuts) {
          auto o = opt;
          std::tie(o.query_offset, o.key_offset) = al::test::block_offsets(rc, {0, N}, 0);
          const auto q = al::test::seq_rows(f.q, rc.start, rc.length);
          const auto go = al::test::seq_rows(f.grad_out, rc.start, rc.length);
          const auto part = al::detail::allocating_forward(q.view(), f.k.view(), f.v.view(), o);
          EXPECT_TRUE(same_bits(part.out, al::test::seq_rows(whole.out, rc.start, rc.length)))
              << rc.start << " " << p.describe();
          EXPECT_TRUE(same_bits(part.lse, al::test::seq_rows(whole.lse, rc.start, rc.length))) << p.describe();
          const al::detail::AttentionForward<float> placed{al::test::seq_rows(whole.out, rc.start, rc.length),
                                                           al::test::seq_rows(whole.lse, rc.start, rc.length)};
          const auto g = al::detail::allocating_backward(q.view(), f.k.view(), f.v.view(), placed, go.view(), o);
          EXPECT_TRUE(same_bits(g.dq, al::test::seq_rows(whole_g.dq, rc.start, rc.length))) << p.describe();
        }
      }
}

// Uneven blocks of rows and keys, merged through the log-sum-exp (dq, dk, dv summed): within
// the accuracy rule of the whole call (the blocks sum each row in other groupings, so not
// bitwise): the merged error is at most twice the naive float32 implementation's plus the
// whole engine call's, and a floor of 16 float ulps of the largest reference value.
TEST(EngineVariantsOffsets, BlocksMergeToTheWholeCallWithinTheRule) {
  std::mt19937_64 rng(72);
  const int64_t N = 260;
  const std::vector<Cut> rows = {{0, 90}, {90, 1}, {91, 169}}, keys = {{0, 130}, {130, 67}, {197, 63}};
  for (const auto causal : {al::Causal::none, al::Causal::bottom_right})
    for (const al::Window w : {al::Window{}, al::Window{100, 0}, al::Window{30, 50}})
      for (const bool alibi : {false, true}) {
        Problem p = al::test::FloatProblem::rounded(al::test::make_problem(rng, 1, 2, 1, N, N, 16, 16));
        p.causal = causal, p.window = w;
        if (alibi) p.alibi_slopes = {0.0625, 0.25};
        SCOPED_TRACE(p.describe());
        const al::test::EngineErrors e = al::test::check_engine_against_reference(p, false, al::ComputeConfig{1});
        const al::test::FloatProblem f(p);
        const auto opt = f.options(p);
        const auto whole = al::detail::allocating_forward(f.q.view(), f.k.view(), f.v.view(), opt);
        const auto merged = al::test::run_in_blocks(f.q, f.k, f.v, f.grad_out, opt, rows, keys, whole);
        const auto rf = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
        const auto rg =
            al::detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), rf, p.grad_out.view(), p.options());
        const al::Tensor<double>* ref[5] = {&rf.out, &rf.lse, &rg.dq, &rg.dk, &rg.dv};
        const al::Tensor<double>* got[5] = {&merged.out, &merged.lse, &merged.dq, &merged.dk, &merged.dv};
        for (int x = 0; x < 5; ++x) {
          const double err = al::test::max_abs_diff(*got[x], *ref[x]);
          const double floor = 16 * 1.2e-7 * al::test::max_abs(*ref[x]);
          EXPECT_LE(err, 2 * e.naive[x] + e.engine[x] + floor) << al::test::kQuantity[x];
        }
      }
}
