// Properties of J = diag(s) − s sᵀ [seed 000]: symmetric, rows sum to 0, PSD,
// ‖J‖₂ ≤ min(½, max s), zero exactly at one-hot, and the closed forms the lab
// uses (entropy, tr J, ‖J‖_F²) agree with the explicit matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attnlab/softmax.hpp"
#include "lab/symmetric_eigen.hpp"  // the lab's solver (src/lab), shared with exp_jacobian

namespace al = attnlab;

namespace {

using attnlab::lab::util::symmetric_eigenvalues;

std::vector<double> random_probs(std::mt19937_64& rng, size_t n, double scale) {
  std::normal_distribution<double> d(0, scale);
  std::vector<double> x(n), s(n);
  for (auto& v : x) v = d(rng);
  al::softmax<double>(x, s);
  return s;
}

}  // namespace

TEST(Jacobian, SymmetricRowsSumToZeroPsdAndSpectralBound) {
  std::mt19937_64 rng(10);
  for (size_t n : {1u, 2u, 3u, 8u, 30u}) {
    for (double scale : {0.01, 1.0, 5.0, 50.0}) {
      const auto s = random_probs(rng, n, scale);
      std::vector<double> J(n * n);
      al::softmax_jacobian<double>(s, J);
      for (size_t i = 0; i < n; ++i) {
        double row = 0;
        for (size_t j = 0; j < n; ++j) {
          EXPECT_EQ(J[i * n + j], J[j * n + i]);
          row += J[i * n + j];
        }
        EXPECT_NEAR(row, 0.0, 1e-15);
      }
      const auto ev = symmetric_eigenvalues(J, n);
      const double smax = *std::max_element(s.begin(), s.end());
      const double lmax = *std::max_element(ev.begin(), ev.end());
      for (double e : ev) EXPECT_GE(e, -1e-15) << "PSD";
      EXPECT_LE(lmax, std::min(0.5, smax) + 1e-14) << "n=" << n << " scale=" << scale;
      // Closed forms against the explicit matrix.
      double tr = 0, fro2 = 0;
      for (size_t i = 0; i < n; ++i) tr += J[i * n + i];
      for (double x : J) fro2 += x * x;
      EXPECT_NEAR(al::jacobian_trace<double>(s), tr, 1e-15);
      EXPECT_NEAR(al::jacobian_frobenius_sq<double>(s), fro2, 1e-15);
      double sum_ev = 0, sum_ev2 = 0;
      for (double e : ev) {
        sum_ev += e;
        sum_ev2 += e * e;
      }
      EXPECT_NEAR(sum_ev, tr, 1e-13);
      EXPECT_NEAR(sum_ev2, fro2, 1e-13);
      double h = 0;
      for (double p : s) h -= p > 0 ? p * std::log(p) : 0.0;
      EXPECT_NEAR(al::entropy<double>(s), h, 1e-14);
    }
  }
}

TEST(Jacobian, ZeroExactlyAtOneHotAndNonzeroOtherwise) {
  for (size_t n : {1u, 4u, 9u}) {
    for (size_t hot = 0; hot < n; ++hot) {
      std::vector<double> s(n, 0.0), J(n * n);
      s[hot] = 1.0;
      al::softmax_jacobian<double>(s, J);
      for (double x : J) EXPECT_EQ(x, 0.0);
      EXPECT_EQ(al::jacobian_frobenius_sq<double>(s), 0.0);
      EXPECT_EQ(al::jacobian_trace<double>(s), 0.0);
      EXPECT_EQ(al::entropy<double>(s), 0.0);
    }
  }
  // Any s with two non-zero entries gives a non-zero J.
  std::vector<double> s{0.0, 1e-12, 1.0 - 1e-12}, J(9);
  al::softmax_jacobian<double>(s, J);
  EXPECT_GT(al::jacobian_frobenius_sq<double>(s), 0.0);
  // Uniform s on n: ‖J‖_F² = (n−1)/n², entropy log n.
  std::vector<double> u(4, 0.25);
  EXPECT_NEAR(al::jacobian_frobenius_sq<double>(u), 3.0 / 16.0, 1e-16);
  EXPECT_NEAR(al::entropy<double>(u), std::log(4.0), 1e-15);
}

TEST(Jacobian, ClosedFormsStayAccurateNearOneHot) {
  // s = softmax((0, −t)): J = s₀s₁ [[1, −1], [−1, 1]], so ‖J‖_F² = 4 s₀² s₁² and tr J = 2 s₀ s₁.
  // The textbook ‖s‖₂² − 2‖s‖₃³ + ‖s‖₂⁴ returns 0 here for t ≳ 18; ours must not.
  for (double t : {1.0, 10.0, 20.0, 50.0, 300.0}) {
    std::vector<double> x{0.0, -t}, s(2);
    al::softmax<double>(x, s);
    const double s1 = std::exp(-t) / (1 + std::exp(-t)), s0 = 1 / (1 + std::exp(-t));
    EXPECT_NEAR(al::jacobian_frobenius_sq<double>(s) / (4 * s0 * s0 * s1 * s1), 1.0, 1e-12) << t;
    EXPECT_NEAR(al::jacobian_trace<double>(s) / (2 * s0 * s1), 1.0, 1e-12) << t;
  }
}
