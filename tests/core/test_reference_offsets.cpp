// query_offset and key_offset (attention_options.hpp) in the reference: causality, the
// window and ALiBi read row i as row query_offset + i and key j as key_offset + j. Checked
// against the tests' own formulation of the masks and bias (problem.hpp), by central
// differences, and by cutting a call into blocks whose merged results are the whole call's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/reference.hpp"
#include "blocks.hpp"
#include "core/attention_results.hpp"
#include "problem.hpp"
#include "reference_outcome.hpp"

namespace al = attnlab;
using al::test::Cut;
using al::test::Outcome;
using al::test::Problem;
using al::test::run;

namespace {

double max_diff(const Outcome& a, const Outcome& b) {
  const al::Tensor<double>* x[5] = {&a.f.out, &a.f.lse, &a.g.dq, &a.g.dk, &a.g.dv};
  const al::Tensor<double>* y[5] = {&b.f.out, &b.f.lse, &b.g.dq, &b.g.dk, &b.g.dv};
  double m = 0;
  for (int t = 0; t < 5; ++t) m = std::max(m, al::test::max_abs_diff(*x[t], *y[t]));
  return m;
}

// The positions' masks and bias written as a boolean and an additive mask (problem.hpp's
// visible_keys and alibi_bias, which read the offsets themselves).
Problem as_masks(const Problem& p) {
  Problem m = p;
  m.bool_mask = al::Tensor<uint8_t>({p.B, 1, p.Nq, p.Nk});
  m.additive_mask = al::Tensor<double>({p.B, p.Hq, p.Nq, p.Nk});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Nq; ++i) {
      const auto vis = p.visible_keys(b, 0, i);
      for (int64_t j = 0; j < p.Nk; ++j) {
        m.bool_mask(b, 0, i, j) = vis[static_cast<size_t>(j)];
        for (int64_t h = 0; h < p.Hq; ++h) m.additive_mask(b, h, i, j) = p.alibi_bias(b, h, i, j);
      }
    }
  m.window = {}, m.causal = al::Causal::none, m.key_lengths.clear(), m.alibi_slopes.clear();
  m.query_offset = m.key_offset = 0;
  return m;
}

}  // namespace

TEST(ReferenceOffsets, CausalWindowAndAlibiAreThoseOfThePositions) {
  std::mt19937_64 rng(41);
  for (const auto causal : {al::Causal::none, al::Causal::top_left, al::Causal::bottom_right})
    for (const al::Window w : {al::Window{}, al::Window{2, 0}, al::Window{1, 3}, al::Window{-1, 1}})
      for (auto [qo, ko] : {std::pair<int64_t, int64_t>{0, 0}, {5, 0}, {0, 4}, {7, 3}, {100, 0}}) {
        Problem p = al::test::make_problem(rng, 2, 2, 1, 5, 7, 4, 3);
        p.causal = causal, p.window = w, p.query_offset = qo, p.key_offset = ko;
        p.key_lengths = {7, 5};
        p.alibi_slopes = {0.25, 0.5};
        EXPECT_LE(max_diff(run(p), run(as_masks(p))), 1e-15) << p.describe();
      }
}

TEST(ReferenceOffsets, EqualOffsetsChangeNothing) {
  std::mt19937_64 rng(42);
  Problem p = al::test::make_problem(rng, 1, 2, 2, 6, 6, 4, 4);
  p.window = {2, 1}, p.causal = al::Causal::bottom_right, p.alibi_slopes = {0.3, 0.6};
  Problem shifted = p;
  shifted.query_offset = shifted.key_offset = 9;  // equal offsets: the same positions relative to each other
  EXPECT_EQ(max_diff(run(p), run(shifted)), 0.0);
}

// Central differences of loss = Σ dO ∘ O (step 1e-5; rule 1e-6, as test_reference_gradcheck.cpp).
TEST(ReferenceOffsets, GradientsMatchCentralDifferences) {
  std::mt19937_64 rng(43);
  for (int variant = 0; variant < 3; ++variant) {
    Problem p = al::test::make_problem(rng, 1, 2, 1, 4, 6, 3, 2);
    p.query_offset = 3, p.key_offset = 1;
    if (variant == 0) p.window = {1, 1};
    if (variant == 1) p.alibi_slopes = {0.4, 0.7}, p.causal = al::Causal::top_left;
    if (variant == 2) p.window = {2, -1}, p.alibi_slopes = {0.2, 0.9}, p.causal = al::Causal::bottom_right;
    const Outcome o = run(p);
    al::Tensor<double>* inputs[3] = {&p.q, &p.k, &p.v};
    const al::Tensor<double>* grads[3] = {&o.g.dq, &o.g.dk, &o.g.dv};
    for (int t = 0; t < 3; ++t) {
      double err = 0, scale = 0;
      for (int64_t e = 0; e < inputs[t]->numel(); ++e) {
        double& x = inputs[t]->data()[e];
        const double x0 = x, h = 1e-5;
        double loss[2];
        for (int s = 0; s < 2; ++s) {
          x = x0 + (s == 0 ? h : -h);
          const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
          loss[s] = 0;
          for (int64_t i = 0; i < f.out.numel(); ++i) loss[s] += f.out.data()[i] * p.grad_out.data()[i];
        }
        x = x0;
        err = std::max(err, std::abs((loss[0] - loss[1]) / (2 * h) - grads[t]->data()[e]));
        scale = std::max(scale, std::abs(grads[t]->data()[e]));
      }
      EXPECT_LT(err / scale, 1e-6) << "variant " << variant << " input " << t << ": " << p.describe();
    }
  }
}

// Self-attention over N rows cut into uneven blocks of rows and keys: the merged blocks are
// the whole call (to rounding: the blocks' sums are split differently).
TEST(ReferenceOffsets, BlocksOfASequenceMergeToTheWholeCall) {
  std::mt19937_64 rng(44);
  const std::vector<Cut> rows = {{0, 4}, {4, 7}, {11, 2}}, keys = {{0, 6}, {6, 5}, {11, 2}};
  for (const auto causal : {al::Causal::none, al::Causal::bottom_right})
    for (const al::Window w : {al::Window{}, al::Window{3, 0}, al::Window{2, 4}})
      for (const bool alibi : {false, true}) {
        Problem p = al::test::make_problem(rng, 2, 2, 1, 13, 13, 4, 3);
        p.causal = causal, p.window = w;
        if (alibi) p.alibi_slopes = {0.3, 0.8, 0.1, 0.5};  // per batch entry and head
        const Outcome whole = run(p);
        const auto blocks = al::test::run_in_blocks(p.q, p.k, p.v, p.grad_out, p.options(), rows, keys, whole.f);
        const Outcome merged{{blocks.out, blocks.lse}, {blocks.dq, blocks.dk, blocks.dv}};
        EXPECT_LE(max_diff(whole, merged), 1e-13) << p.describe();
      }
}

TEST(ReferenceOffsets, NegativeOrHugeOffsetsAndPackedSequencesAreErrors) {
  std::mt19937_64 rng(45);
  Problem p = al::test::make_problem(rng, 1, 1, 1, 3, 3, 2, 2);
  auto message = [&](const Problem& x) {
    try {
      run(x);
    } catch (const al::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Problem a = p;
  a.query_offset = -1;
  EXPECT_NE(message(a).find("query_offset: -1 is outside"), std::string::npos) << message(a);
  Problem b = p;
  b.key_offset = (int64_t{1} << 53) + 1;
  EXPECT_NE(message(b).find("key_offset:"), std::string::npos) << message(b);
  Problem c = p;
  c.cu_seqlens_q = {0, 3}, c.cu_seqlens_k = {0, 3}, c.query_offset = 2;
  EXPECT_NE(message(c).find("query_offset: cannot be combined with cu_seqlens"), std::string::npos) << message(c);
}
