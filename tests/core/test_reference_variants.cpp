// The variants of attention_variants.hpp in the reference, against independent
// formulations of their definitions: a window or packed sequences are a boolean mask,
// ALiBi is an additive mask, a sink is one more key of value 0, softcap is tanh on the
// scores, and dropout keeps each probability with probability 1 − p from Philox bits.
// (Their gradients: test_reference_gradcheck.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "core/philox.hpp"
#include "problem.hpp"
#include "reference_outcome.hpp"

namespace al = attnlab;
using al::test::Outcome;
using al::test::Problem;
using al::test::run;

namespace {

// The structural visibility of p (window, packing, causality, padding) as a boolean mask.
al::Tensor<uint8_t> as_bool_mask(const Problem& p) {
  al::Tensor<uint8_t> m({p.B, 1, p.Nq, p.Nk});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Nq; ++i) {
      const auto vis = p.visible_keys(b, 0, i);
      for (int64_t j = 0; j < p.Nk; ++j) m(b, 0, i, j) = vis[static_cast<size_t>(j)];
    }
  return m;
}

void expect_same(const Outcome& a, const Outcome& b, double tol, const std::string& what) {
  const al::Tensor<double>* x[5] = {&a.f.out, &a.f.lse, &a.g.dq, &a.g.dk, &a.g.dv};
  const al::Tensor<double>* y[5] = {&b.f.out, &b.f.lse, &b.g.dq, &b.g.dk, &b.g.dv};
  for (int t = 0; t < 5; ++t) EXPECT_LE(al::test::max_abs_diff(*x[t], *y[t]), tol) << what << " tensor " << t;
}

}  // namespace

TEST(ReferenceVariants, WindowIsTheBandAsABooleanMask) {
  std::mt19937_64 rng(1);
  for (const al::Window w : {al::Window{0, 0}, al::Window{2, 0}, al::Window{-1, 1}, al::Window{3, 2}, al::Window{1, -1}})
    for (const auto causal : {al::Causal::none, al::Causal::top_left, al::Causal::bottom_right}) {
      Problem p = al::test::make_problem(rng, 2, 2, 1, 7, 9, 4, 3);
      p.causal = causal;
      p.window = w;
      p.key_lengths = {9, 5};
      p.scale = al::ScalePolicy::entropy_invariant();  // the row's n counts the window
      Problem masked = p;
      masked.bool_mask = as_bool_mask(p);
      masked.window = {};
      masked.causal = al::Causal::none;
      masked.key_lengths.clear();
      expect_same(run(p), run(masked), 0.0, "window " + p.describe());
    }
}

TEST(ReferenceVariants, WindowFollowsFlashAttentionsDefinition) {
  // Nq = 3, Nk = 6, window (1, 0): row i sees i + 3 − 1 ≤ j ≤ i + 3 (FlashAttention's window_size).
  std::mt19937_64 rng(2);
  Problem p = al::test::make_problem(rng, 1, 1, 1, 3, 6, 2, 1);
  p.window = {1, 0};
  for (int64_t i = 0; i < 3; ++i) {
    const auto vis = p.visible_keys(0, 0, i);
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(vis[static_cast<size_t>(j)], i + 2 <= j && j <= i + 3) << i << " " << j;
  }
  // One-hot values read off which keys the reference let in: out[i, j] > 0 iff visible.
  p.v = al::Tensor<double>({1, 1, 6, 6});
  p.dv = 6;
  for (int64_t j = 0; j < 6; ++j) p.v(0, 0, j, j) = 1;
  p.grad_out = al::Tensor<double>({1, 1, 3, 6});
  const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(f.out(0, 0, i, j) > 0, i + 2 <= j && j <= i + 3) << i << " " << j;
}

TEST(ReferenceVariants, PackedSequencesAreABlockDiagonalMask) {
  std::mt19937_64 rng(3);
  for (const auto causal : {al::Causal::none, al::Causal::top_left, al::Causal::bottom_right}) {
    Problem p = al::test::make_problem(rng, 1, 4, 2, 10, 12, 3, 5);
    p.cu_seqlens_q = {0, 4, 4, 7, 10};
    p.cu_seqlens_k = {0, 3, 6, 6, 12};  // the third sequence has 3 queries and no key
    p.causal = causal;
    Problem masked = p;
    masked.bool_mask = as_bool_mask(p);
    masked.cu_seqlens_q.clear();
    masked.cu_seqlens_k.clear();
    masked.causal = al::Causal::none;
    const Outcome a = run(p), b = run(masked);
    expect_same(a, b, 0.0, "packed " + p.describe());
    for (int64_t i = 4; i < 7; ++i) EXPECT_EQ(a.f.lse(0, 1, i, 0), -INFINITY);  // no keys: fully masked
  }
}

TEST(ReferenceVariants, AlibiIsAnAdditiveBias) {
  std::mt19937_64 rng(4);
  for (int per_batch = 0; per_batch < 2; ++per_batch) {
    Problem p = al::test::make_problem(rng, 2, 3, 1, 5, 8, 4, 2);
    p.causal = al::Causal::bottom_right;
    p.key_lengths = {8, 6};
    p.alibi_slopes.resize(per_batch ? 6 : 3);
    for (size_t s = 0; s < p.alibi_slopes.size(); ++s) p.alibi_slopes[s] = std::pow(2.0, -static_cast<double>(s + 1));
    Problem biased = p;
    biased.alibi_slopes.clear();
    biased.additive_mask = al::Tensor<double>({2, 3, 5, 8});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t i = 0; i < 5; ++i)
          for (int64_t j = 0; j < 8; ++j) biased.additive_mask(b, h, i, j) = p.alibi_bias(b, h, i, j);
    expect_same(run(p), run(biased), 1e-15, "alibi " + p.describe());
  }
}

TEST(ReferenceVariants, SoftcapCapsTheScaledScores) {
  std::mt19937_64 rng(5);
  Problem p = al::test::make_problem(rng, 1, 2, 2, 4, 6, 8, 3);
  al::test::fill_normal(p.q, rng, 4.0);  // scores of order 10: far into tanh's flat part
  p.softcap = 2.5;
  const auto f = run(p).f;
  // Explicitly: softmax of 2.5·tanh(q·k/(√8 · 2.5)).
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 4; ++i) {
      std::vector<double> s(6);
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j < 6; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < 8; ++c) dot += p.q(0, h, i, c) * p.k(0, h, j, c);
        s[static_cast<size_t>(j)] = 2.5 * std::tanh(dot / std::sqrt(8.0) / 2.5);
        EXPECT_LE(std::abs(s[static_cast<size_t>(j)]), 2.5);
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      for (double x : s) l += std::exp(x - m);
      EXPECT_NEAR(f.lse(0, h, i, 0), m + std::log(l), 1e-13);
      for (int64_t c = 0; c < 3; ++c) {
        double o = 0;
        for (int64_t j = 0; j < 6; ++j) o += std::exp(s[static_cast<size_t>(j)] - m) / l * p.v(0, h, j, c);
        EXPECT_NEAR(f.out(0, h, i, c), o, 1e-13);
      }
    }
}

TEST(ReferenceVariants, ASinkIsOneMoreKeyWithNoValue) {
  // Sinks = an extra key whose score is sink_h (q·k = 0 plus the additive mask) and whose value is 0.
  std::mt19937_64 rng(6);
  Problem p = al::test::make_problem(rng, 2, 2, 1, 5, 6, 3, 4);
  p.causal = al::Causal::top_left;
  p.key_lengths = {6, 0};  // batch 1 sees no key: O = 0, L = sink
  p.sinks = {0.7, -1.3};
  Problem extra = al::test::make_problem(rng, 2, 2, 1, 5, 7, 3, 4);
  extra.q = p.q;
  extra.grad_out = p.grad_out;
  extra.additive_mask = al::Tensor<double>({2, 2, 5, 7});
  extra.bool_mask = al::Tensor<uint8_t>({2, 1, 5, 7});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t c = 0; c < 3; ++c) extra.k(b, 0, j + 1, c) = p.k(b, 0, j, c);
      for (int64_t c = 0; c < 4; ++c) extra.v(b, 0, j + 1, c) = p.v(b, 0, j, c);
    }
    for (int64_t c = 0; c < 3; ++c) extra.k(b, 0, 0, c) = 0;
    for (int64_t c = 0; c < 4; ++c) extra.v(b, 0, 0, c) = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        extra.additive_mask(b, h, i, 0) = p.sinks[static_cast<size_t>(h)];
        const auto vis = p.visible_keys(b, h, i);
        extra.bool_mask(b, 0, i, 0) = 1;
        for (int64_t j = 0; j < 6; ++j) extra.bool_mask(b, 0, i, j + 1) = vis[static_cast<size_t>(j)];
      }
  }
  extra.scale = al::ScalePolicy::inv_sqrt_d();
  const Outcome a = run(p), e = run(extra);
  EXPECT_LE(al::test::max_abs_diff(a.f.out, e.f.out), 1e-14);
  EXPECT_LE(al::test::max_abs_diff(a.f.lse, e.f.lse), 1e-14);
  EXPECT_LE(al::test::max_abs_diff(a.g.dq, e.g.dq), 1e-14);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(a.f.lse(1, 1, i, 0), -1.3);  // no key: all mass on the sink
  // dK, dV of the real keys; the extra key's own gradient is the sinks' business.
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(a.g.dk(b, 0, j, c), e.g.dk(b, 0, j + 1, c), 1e-14);
  // dsinks_h = Σ_rows ∂loss/∂(the extra key's additive logit), which is −P_sink·D per row.
  for (int64_t h = 0; h < 2; ++h) {
    double want = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 5; ++i) {
        double D = 0;
        for (int64_t c = 0; c < 4; ++c) D += a.f.out(b, h, i, c) * p.grad_out(b, h, i, c);
        want -= std::exp(p.sinks[static_cast<size_t>(h)] - a.f.lse(b, h, i, 0)) * D;
      }
    EXPECT_NEAR(a.g.dsinks[static_cast<size_t>(h)], want, 1e-14);
  }
}

TEST(ReferenceVariants, PhiloxMatchesRandom123sKnownAnswers) {
  using al::detail::philox4x32_10;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(ReferenceVariants, DropoutKeepsOneMinusPWithinFourStandardErrors) {
  // 2 × 4 × 384 × 384 = 1.18 M keep bits, every key visible; applied mask returned.
  std::mt19937_64 rng(7);
  Problem p = al::test::make_problem(rng, 2, 4, 4, 384, 384, 1, 1);
  for (double dropout : {0.1, 0.5, 0.9}) {
    p.dropout_p = dropout;
    p.seed = 12345;
    auto opt = p.options();
    al::Tensor<uint8_t> mask({2, 4, 384, 384});
    const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), opt, {}, mask.view());
    double kept = 0;
    for (uint8_t m : mask.storage()) kept += m;
    const double n = static_cast<double>(mask.numel()), se = std::sqrt(dropout * (1 - dropout) / n);
    EXPECT_NEAR(kept / n, 1 - dropout, 4 * se) << "p = " << dropout;
    // The bits are Philox's: spot-check a few against the generator.
    const uint32_t t = al::detail::dropout_threshold(dropout);
    for (int64_t i : {0, 17, 383})
      for (int64_t j : {0, 1, 2, 3, 4, 255, 383})
        EXPECT_EQ(mask(1, 3, i, j), al::detail::dropout_keep(12345, t, 1, 3, i, j) ? 1 : 0);
    // O = Σ_j P_ij M_ij/(1 − p) v_j with P the undropped softmax (L is not affected).
    Problem plain = p;
    plain.dropout_p = 0;
    const auto g = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), plain.options());
    EXPECT_EQ(al::test::max_abs_diff(f.lse, g.lse), 0.0);
  }
}

TEST(ReferenceVariants, DropoutMaskDependsOnlyOnSeedAndIndex) {
  std::mt19937_64 rng(8);
  Problem p = al::test::make_problem(rng, 1, 2, 1, 40, 50, 4, 4);
  p.dropout_p = 0.4;
  p.seed = 1;
  auto masks = [&](const Problem& x) {
    auto opt = x.options();
    al::Tensor<uint8_t> m({1, 2, 40, 50});
    al::detail::allocating_forward(x.q.view(), x.k.view(), x.v.view(), opt, {}, m.view());
    return m;
  };
  const auto a = masks(p);
  Problem other_inputs = al::test::make_problem(rng, 1, 2, 1, 40, 50, 4, 4);
  other_inputs.dropout_p = 0.4;
  other_inputs.seed = 1;
  EXPECT_EQ(masks(other_inputs).storage(), a.storage());
  p.seed = 2;
  EXPECT_NE(masks(p).storage(), a.storage());
}
// Packed sequences are the same computation as the sequences run one at a time.
TEST(ReferenceVariants, PackedSequencesEqualSeparateCalls) {
  std::mt19937_64 rng(24);
  Problem p = al::test::make_problem(rng, 1, 2, 1, 9, 7, 3, 2);
  p.cu_seqlens_q = {0, 4, 9};
  p.cu_seqlens_k = {0, 5, 7};
  p.causal = al::Causal::bottom_right;
  p.window = {2, 0};
  p.alibi_slopes = {0.25, 0.5, 0.75, 1.0};  // [n_seq = 2, Hq = 2]
  const auto packed = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t q0 = p.cu_seqlens_q[s], nq = p.cu_seqlens_q[s + 1] - q0;
    const int64_t k0 = p.cu_seqlens_k[s], nk = p.cu_seqlens_k[s + 1] - k0;
    Problem one = al::test::make_problem(rng, 1, 2, 1, nq, nk, 3, 2);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t i = 0; i < nq; ++i) one.q(0, h, i, c) = p.q(0, h, q0 + i, c);
      }
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t c = 0; c < 3; ++c) one.k(0, 0, j, c) = p.k(0, 0, k0 + j, c);
      for (int64_t c = 0; c < 2; ++c) one.v(0, 0, j, c) = p.v(0, 0, k0 + j, c);
    }
    one.causal = p.causal;
    one.window = p.window;
    one.alibi_slopes = {p.alibi_slopes[2 * s], p.alibi_slopes[2 * s + 1]};
    const auto f = al::detail::allocating_forward(one.q.view(), one.k.view(), one.v.view(), one.options());
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        EXPECT_EQ(f.lse(0, h, i, 0), packed.lse(0, h, q0 + i, 0)) << s << " " << h << " " << i;
        for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(f.out(0, h, i, c), packed.out(0, h, q0 + i, c));
      }
  }
}

// The built-in options written as mask_mod and score_mod (score_mod.hpp) give the same
// results: causal and window as masks, softcap and ALiBi as scores.
TEST(ReferenceVariants, BuiltInsExpressedAsModsGiveTheSameResults) {
  std::mt19937_64 rng(9);
  Problem p = al::test::make_problem(rng, 2, 2, 1, 6, 9, 4, 3);
  const int64_t Nq = p.Nq, Nk = p.Nk;
  const auto causal_window = al::make_mask_mod([=](int64_t, int64_t, int64_t q, int64_t k) {
    const int64_t diag = q + Nk - Nq;
    return k <= diag && k >= diag - 2;  // bottom-right causal ∩ window (2, 0)
  });
  const std::vector<double> slopes{0.3, 0.7};
  const auto softcap_alibi = al::make_score_mod(
      [=](auto s, int64_t, int64_t h, int64_t q, int64_t k) {
        using T = decltype(s);
        return T(1.5) * std::tanh(s / T(1.5)) - T(slopes[h]) * T(std::abs(q + Nk - Nq - k));
      },
      [](auto s, int64_t, int64_t, int64_t, int64_t) {
        using T = decltype(s);
        const T t = std::tanh(s / T(1.5));
        return T(1) - t * t;
      });
  Problem builtin = p;
  builtin.causal = al::Causal::bottom_right;
  builtin.window = {2, 0};
  builtin.softcap = 1.5;
  builtin.alibi_slopes = slopes;
  Problem mods = p;
  mods.mask_mod = &causal_window;
  mods.score_mod = &softcap_alibi;
  expect_same(run(builtin), run(mods), 1e-14, "mods");
}
