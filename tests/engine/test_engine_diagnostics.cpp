// Per-row diagnostics from the fused forward, and from the double reference,
// against the same quantities
// computed in double from the reference's probabilities (attnlab/softmax.hpp),
// including near one-hot rows where ‖J‖_F² is ~1e-20 and the textbook closed
// form Σp² − 2Σp³ + (Σp²)² cancels to 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_results.hpp"
#include "naive_float.hpp"

namespace al = attnlab;

namespace {

struct Diag {
  al::Tensor<float> max_prob, entropy, fro;
};

Diag engine_diagnostics(const al::test::Problem& p, const al::test::FloatProblem& fp) {
  Diag d{al::Tensor<float>({p.B, p.Hq, p.Nq, 1}), al::Tensor<float>({p.B, p.Hq, p.Nq, 1}),
         al::Tensor<float>({p.B, p.Hq, p.Nq, 1})};
  const al::RowDiagnostics<float> rd{d.max_prob.view(), d.entropy.view(), d.fro.view()};
  al::Tensor<float> out({p.B, p.Hq, p.Nq, p.dv}), lse({p.B, p.Hq, p.Nq, 1});
  al::attention_forward(fp.q.view(), fp.k.view(), fp.v.view(), fp.options(p), {out.view(), lse.view(), rd},
                        al::ComputeConfig{1});
  return d;
}

// Row probabilities of the rounded problem in double, through the reference's L.
std::vector<double> row_probs(const al::test::Problem& p, const al::detail::AttentionForward<double>& f, int64_t b,
                              int64_t h, int64_t i) {
  std::vector<double> prob;
  const double L = f.lse(b, h, i, 0);
  if (L == -INFINITY) return prob;
  const int64_t hk = h / (p.Hq / p.Hkv);
  const std::vector<bool> vis = p.visible_keys(b, h, i);
  const auto visible = static_cast<int64_t>(std::count(vis.begin(), vis.end(), true));
  const double scale = p.scale(p.d, visible);
  for (int64_t j = 0; j < p.Nk; ++j) {
    if (!vis[static_cast<size_t>(j)]) continue;
    double s = 0;
    for (int64_t c = 0; c < p.d; ++c) s += p.q(b, h, i, c) * p.k(b, hk, j, c);
    s *= scale;
    if (p.additive_mask.numel())
      s += p.additive_mask(p.additive_mask.shape()[0] == 1 ? 0 : b, p.additive_mask.shape()[1] == 1 ? 0 : h, i, j);
    prob.push_back(std::exp(s - L));
  }
  return prob;
}

}  // namespace

TEST(EngineDiagnostics, MatchDoublePrecisionOnRandomProblems) {
  for (int n = 0; n < 200; ++n) {
    std::mt19937_64 rng(900 + n);
    al::test::ProblemLimits lim;
    lim.max_seq = n % 10 == 0 ? 150 : 20;
    lim.dims = {1, 16, 64};
    const al::test::Problem p = al::test::FloatProblem::rounded(al::test::random_problem(rng, lim));
    SCOPED_TRACE("problem " + std::to_string(n) + ": " + p.describe());
    const al::test::FloatProblem fp(p);
    const Diag d = engine_diagnostics(p, fp);
    const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Nq; ++i) {
          const auto prob = row_probs(p, f, b, h, i);
          double pmax = 0, ent = 0, fro = 0;
          if (!prob.empty()) {
            for (double x : prob) pmax = std::max(pmax, x);
            ent = al::entropy<double>(prob);
            fro = al::jacobian_frobenius_sq<double>(prob);
          }
          // Scores carry float rounding of q·k (relative ~1e-6 of |S| ≤ ~30):
          // probabilities move by ~1e-5 relative, the diagnostics likewise.
          ASSERT_NEAR(d.max_prob(b, h, i, 0), pmax, 1e-4 * pmax + 1e-7);
          ASSERT_NEAR(d.entropy(b, h, i, 0), ent, 1e-4 * std::max(1.0, ent));
          ASSERT_NEAR(d.fro(b, h, i, 0), fro, 2e-4 * fro + 1e-7);
        }
  }
}

TEST(EngineDiagnostics, NearOneHotRowsKeepTheirTinyJacobian) {
  // One query, Nk keys; key 0 aligned with q, the rest orthogonal, so the
  // scores are (a, 0, 0, ...) exactly: p_others = e^{−a}/(1 + (n−1)e^{−a}).
  // Keys past the first tile check that the rescaling keeps the "others".
  for (int64_t nk : {2, 5, 70, 200, 400})
    for (double a : {5.0, 20.0, 30.0, 40.0}) {  // at a = 40, ‖J‖_F² ≈ 2e^{−80} ≈ 4e-35: still a float
      al::test::Problem p;
      p.Nq = 1;
      p.Nk = nk;
      p.d = p.dv = 2;
      p.scale = al::ScalePolicy::none();
      p.q = al::Tensor<double>({1, 1, 1, 2});
      p.k = al::Tensor<double>({1, 1, nk, 2});
      p.v = al::Tensor<double>({1, 1, nk, 2}, 1.0);
      p.grad_out = al::Tensor<double>({1, 1, 1, 2});
      p.q(0, 0, 0, 0) = a;
      const int64_t max_at = nk * 3 / 4;  // for nk = 400 the max is in the second key tile (256 keys)
      p.k(0, 0, max_at, 0) = 1.0;
      for (int64_t j = 0; j < nk; ++j)
        if (j != max_at) p.k(0, 0, j, 1) = 1.0;
      const al::test::FloatProblem fp(p);
      const Diag d = engine_diagnostics(p, fp);
      const double e = std::exp(-a), l = 1 + (nk - 1) * e;
      std::vector<double> prob(static_cast<size_t>(nk), e / l);
      prob[static_cast<size_t>(max_at)] = 1 / l;
      // −Σ p log p of the rounded p would lose ε = 1 − p_max to rounding; in closed
      // form, H = log l + (n − 1)·e·a / l.
      const double fro = al::jacobian_frobenius_sq<double>(prob),
                   ent = std::log1p((nk - 1) * e) + (nk - 1) * e * a / l;
      SCOPED_TRACE("nk=" + std::to_string(nk) + " a=" + std::to_string(a) + " fro=" + std::to_string(fro));
      EXPECT_GT(d.fro(0, 0, 0, 0), 0.0f);
      EXPECT_NEAR(d.fro(0, 0, 0, 0), fro, 1e-4 * fro);
      EXPECT_NEAR(d.entropy(0, 0, 0, 0), ent, 1e-4 * ent);
      EXPECT_NEAR(d.max_prob(0, 0, 0, 0), 1 / l, 1e-6);
      // The reference's diagnostics, in double, to rounding.
      al::Tensor<double> out({1, 1, 1, 2}), lse({1, 1, 1, 1}), rmax({1, 1, 1, 1}), rent({1, 1, 1, 1}),
          rfro({1, 1, 1, 1});
      const al::RowDiagnostics<double> rd{rmax.view(), rent.view(), rfro.view()};
      al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), p.options(), {out.view(), lse.view(), rd});
      EXPECT_NEAR(rfro(0, 0, 0, 0), fro, 1e-12 * fro);
      EXPECT_NEAR(rent(0, 0, 0, 0), ent, 1e-12 * ent);
      EXPECT_NEAR(rmax(0, 0, 0, 0), 1 / l, 1e-14);
    }
}

// The reference's own diagnostics (attnlab/reference.hpp) against the row
// probabilities recomputed here from the problem, in double: only rounding
// separates them. Fully masked rows get 0, like the engine's.
TEST(ReferenceDiagnostics, MatchTheRowProbabilities) {
  int masked_rows = 0;
  for (int n = 0; n < 200; ++n) {
    std::mt19937_64 rng(1900 + n);
    al::test::ProblemLimits lim;
    lim.dims = {1, 3, 16};
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE("problem " + std::to_string(n) + ": " + p.describe());
    al::Tensor<double> out({p.B, p.Hq, p.Nq, p.dv}), lse({p.B, p.Hq, p.Nq, 1});
    al::Tensor<double> pmax({p.B, p.Hq, p.Nq, 1}, -1.0), ent({p.B, p.Hq, p.Nq, 1}, -1.0),
        fro({p.B, p.Hq, p.Nq, 1}, -1.0);
    const al::RowDiagnostics<double> rd{pmax.view(), ent.view(), fro.view()};
    al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), p.options(), {out.view(), lse.view(), rd});
    // The diagnostics leave the forward's results as they were.
    const auto f = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Nq; ++i) {
          ASSERT_EQ(lse(b, h, i, 0), f.lse(b, h, i, 0));
          const auto prob = row_probs(p, f, b, h, i);
          double want_max = 0, want_ent = 0, want_fro = 0;
          if (prob.empty()) {
            ++masked_rows;
          } else {
            for (double x : prob) want_max = std::max(want_max, x);
            want_ent = al::entropy<double>(prob);
            want_fro = al::jacobian_frobenius_sq<double>(prob);
          }
          ASSERT_NEAR(pmax(b, h, i, 0), want_max, 1e-12);
          ASSERT_NEAR(ent(b, h, i, 0), want_ent, 1e-12 * std::max(1.0, want_ent));
          ASSERT_NEAR(fro(b, h, i, 0), want_fro, 1e-11 * want_fro + 1e-15);
        }
  }
  EXPECT_GT(masked_rows, 0) << "the generator should produce fully masked rows";
}

TEST(ReferenceDiagnostics, WrongShapeIsAnError) {
  al::Tensor<double> q({1, 2, 4, 3}), k({1, 2, 5, 3}), v({1, 2, 5, 3}), out({1, 2, 4, 3}), lse({1, 2, 4, 1});
  al::Tensor<double> bad({1, 2, 5, 1});
  try {
    const al::RowDiagnostics<double> rd{{}, bad.view(), {}};
    al::reference::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view(), rd});
    FAIL() << "expected an error";
  } catch (const al::Error& e) {
    EXPECT_STREQ(e.what(), "diagnostics.entropy: shape [1, 2, 5, 1] should be [1, 2, 4, 1]");
  }
}

// With the variants the engine's diagnostics are the reference's: over the softmax of
// the treated scores (window, softcap, ALiBi, packed sequences), the sink included as
// one more entry of the distribution; dropout leaves them alone (they describe P).
TEST(EngineDiagnostics, MatchTheReferenceWithTheVariants) {
  int with_sinks = 0;
  for (int n = 0; n < 100; ++n) {
    std::mt19937_64 rng(7000 + n);
    al::test::ProblemLimits lim;
    lim.max_seq = n % 10 == 0 ? 300 : 20;
    lim.dims = {1, 16, 64};
    lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_sinks = lim.p_packed = lim.p_dropout = 0.4;
    const al::test::Problem p = al::test::FloatProblem::rounded(al::test::random_problem(rng, lim));
    SCOPED_TRACE("problem " + std::to_string(n) + ": " + p.describe());
    with_sinks += !p.sinks.empty();
    const al::test::FloatProblem fp(p);
    const Diag d = engine_diagnostics(p, fp);
    const al::Shape rows{p.B, p.Hq, p.Nq, 1};
    al::Tensor<double> out({p.B, p.Hq, p.Nq, p.dv}), lse(rows), rmax(rows), rent(rows), rfro(rows);
    const al::RowDiagnostics<double> rd{rmax.view(), rent.view(), rfro.view()};
    al::reference::attention_forward(p.q.view(), p.k.view(), p.v.view(), p.options(), {out.view(), lse.view(), rd});
    for (int64_t r = 0; r < lse.numel(); ++r) {
      const double pmax = rmax.data()[r], ent = rent.data()[r], fro = rfro.data()[r];
      ASSERT_NEAR(d.max_prob.data()[r], pmax, 1e-4 * pmax + 1e-7) << "row " << r;
      ASSERT_NEAR(d.entropy.data()[r], ent, 1e-4 * std::max(1.0, ent)) << "row " << r;
      ASSERT_NEAR(d.fro.data()[r], fro, 2e-4 * fro + 1e-7) << "row " << r;
    }
  }
  EXPECT_GT(with_sinks, 20);
}
