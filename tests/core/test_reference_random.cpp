// 1000+ random shape and option combinations per run (seeded; set
// ATTNLAB_TEST_SEED to explore others). For each:
//  * forward against an independent formulation (full score matrix, masks
//    applied as −inf, attnlab::softmax per row), to 1e-12 relative;
//  * backward against a directional finite difference of Σ dO ∘ O along a
//    random direction (one check per problem keeps 1000 problems fast);
//  * fully masked rows give O = 0 and L = −inf; nothing is NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "attnlab/reference.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_results.hpp"
#include "problem.hpp"

namespace al = attnlab;
using al::test::Problem;

namespace {

uint64_t base_seed() {
  const char* s = std::getenv("ATTNLAB_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261122u;
}

// Independent forward: materialise the Nq×Nk scores with −inf for hidden keys.
void naive_forward(const Problem& p, al::Tensor<double>& out, al::Tensor<double>& lse) {
  out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
  lse = al::Tensor<double>({p.B, p.Hq, p.Nq, 1});
  std::vector<double> s(static_cast<size_t>(p.Nk)), prob(static_cast<size_t>(p.Nk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const int64_t hk = h / (p.Hq / p.Hkv);
        const std::vector<bool> vis = p.visible_keys(b, h, i);
        const auto visible = static_cast<int64_t>(std::count(vis.begin(), vis.end(), true));
        const double scale = p.scale(p.d, visible);
        bool any = false;
        for (int64_t j = 0; j < p.Nk; ++j) {
          double x = -INFINITY;
          if (vis[static_cast<size_t>(j)]) {
            x = 0;
            for (int64_t c = 0; c < p.d; ++c) x += p.q(b, h, i, c) * p.k(b, hk, j, c);
            x *= scale;
            if (p.additive_mask.numel())
              x += p.additive_mask(p.additive_mask.shape()[0] == 1 ? 0 : b, p.additive_mask.shape()[1] == 1 ? 0 : h, i,
                                   j);
          }
          any = any || x != -INFINITY;
          s[static_cast<size_t>(j)] = x;
        }
        if (!any) {
          lse(b, h, i, 0) = -INFINITY;
          continue;
        }
        al::softmax<double>(s, prob);
        lse(b, h, i, 0) = al::logsumexp<double>(s);
        for (int64_t c = 0; c < p.dv; ++c)
          for (int64_t j = 0; j < p.Nk; ++j) out(b, h, i, c) += prob[static_cast<size_t>(j)] * p.v(b, hk, j, c);
      }
}

double loss(const Problem& p) {
  const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
  double s = 0;
  for (int64_t i = 0; i < f.out.numel(); ++i) s += f.out.data()[i] * p.grad_out.data()[i];
  return s;
}

}  // namespace

TEST(ReferenceRandom, ThousandCombinationsAgreeWithIndependentFormsAndFiniteDifferences) {
  const uint64_t seed = base_seed();
  constexpr int kProblems = 1200;
  int fully_masked_rows = 0, causal = 0, gqa = 0, masked = 0;
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    Problem p = al::test::random_problem(rng);
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    causal += p.causal != al::Causal::none;
    gqa += p.Hq != p.Hkv;
    masked += p.bool_mask.numel() > 0 || p.additive_mask.numel() > 0;
    const auto opt = p.options();
    const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), opt);
    al::Tensor<double> out, lse;
    naive_forward(p, out, lse);
    ASSERT_LE(al::test::max_abs_diff(f.out, out), 1e-12 * std::max(1.0, al::test::max_abs(out)));
    ASSERT_LE(al::test::max_abs_diff(f.lse, lse), 1e-12 * std::max(1.0, al::test::max_abs(lse)));
    for (int64_t r = 0; r < f.lse.numel(); ++r) {
      if (f.lse.data()[r] != -INFINITY) continue;
      ++fully_masked_rows;
      for (int64_t c = 0; c < p.dv; ++c) ASSERT_EQ(f.out.data()[r * p.dv + c], 0.0);
    }
    const auto g = al::detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), f, p.grad_out.view(), opt);
    // Directional derivative along a random direction u = (uq, uk, uv).
    al::Tensor<double> uq(p.q.shape()), uk(p.k.shape()), uv(p.v.shape());
    for (auto* t : {&uq, &uk, &uv}) al::test::fill_normal(*t, rng);
    double analytic = 0;
    for (int64_t i = 0; i < uq.numel(); ++i) analytic += g.dq.data()[i] * uq.data()[i];
    for (int64_t i = 0; i < uk.numel(); ++i) analytic += g.dk.data()[i] * uk.data()[i];
    for (int64_t i = 0; i < uv.numel(); ++i) analytic += g.dv.data()[i] * uv.data()[i];
    const double h = 1e-5;
    auto shifted = [&](double t) {
      Problem s = p;
      for (int64_t i = 0; i < uq.numel(); ++i) s.q.data()[i] += t * uq.data()[i];
      for (int64_t i = 0; i < uk.numel(); ++i) s.k.data()[i] += t * uk.data()[i];
      for (int64_t i = 0; i < uv.numel(); ++i) s.v.data()[i] += t * uv.data()[i];
      return loss(s);
    };
    const double fd = (shifted(h) - shifted(-h)) / (2 * h);
    double gnorm = 0;
    for (const auto* t : {&g.dq, &g.dk, &g.dv})
      for (double x : t->storage()) {
        ASSERT_FALSE(std::isnan(x));
        gnorm += x * x;
      }
    // |fd − analytic| relative to ‖grad‖·‖u‖ (the natural size of the directional derivative).
    double unorm = 0;
    for (const auto* t : {&uq, &uk, &uv})
      for (double x : t->storage()) unorm += x * x;
    ASSERT_LE(std::abs(fd - analytic), 1e-6 * std::max(1e-6, std::sqrt(gnorm * unorm)));
  }
  // The generator must actually have exercised the interesting cases.
  EXPECT_GT(fully_masked_rows, 50);
  EXPECT_GT(causal, kProblems / 4);
  EXPECT_GT(gqa, kProblems / 3);
  EXPECT_GT(masked, kProblems / 3);
}
