// Softmax, log-softmax, logsumexp and cross-entropy: finite differences in
// double (relative error < 1e-6), extreme inputs, and float against double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/softmax.hpp"

using attnlab::Error;
namespace al = attnlab;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> softmax_of(const std::vector<double>& x) {
  std::vector<double> s(x.size());
  al::softmax<double>(x, s);
  return s;
}
std::vector<double> log_softmax_of(const std::vector<double>& x) {
  std::vector<double> s(x.size());
  al::log_softmax<double>(x, s);
  return s;
}

// Central differences of a vector function f at x: column j is ∂f/∂x_j.
// Step 1e-5: truncation ~ h² f''' ≈ 1e-10, rounding ~ eps/h ≈ 1e-11.
template <class F>
std::vector<double> fd_jacobian(F f, std::vector<double> x) {
  const size_t n = x.size(), m = f(x).size();
  std::vector<double> J(m * n);
  const double h = 1e-5;
  for (size_t j = 0; j < n; ++j) {
    const double x0 = x[j];
    x[j] = x0 + h;
    const auto fp = f(x);
    x[j] = x0 - h;
    const auto fm = f(x);
    x[j] = x0;
    for (size_t i = 0; i < m; ++i) J[i * n + j] = (fp[i] - fm[i]) / (2 * h);
  }
  return J;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max({den, std::abs(a[i]), std::abs(b[i])});
  }
  return den == 0 ? num : num / den;
}

std::vector<double> random_vec(std::mt19937_64& rng, size_t n, double sigma) {
  std::normal_distribution<double> d(0, sigma);
  std::vector<double> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}
}  // namespace

TEST(Softmax, SumsToOneAndMatchesDefinition) {
  const std::vector<double> x{0.5, -1.0, 3.0, 2.0};
  const auto s = softmax_of(x);
  double z = 0;
  for (double v : x) z += std::exp(v);
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(s[i], std::exp(x[i]) / z, 1e-16);
    total += s[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-15);
}

TEST(Softmax, JacobianMatchesFiniteDifferences) {
  std::mt19937_64 rng(1);
  for (size_t n : {1u, 2u, 5u, 17u}) {
    for (double sigma : {0.1, 1.0, 4.0}) {
      const auto x = random_vec(rng, n, sigma);
      const auto s = softmax_of(x);
      std::vector<double> J(n * n);
      al::softmax_jacobian<double>(s, J);
      EXPECT_LT(rel_err(J, fd_jacobian(softmax_of, x)), 1e-6) << "n=" << n << " sigma=" << sigma;
    }
  }
}

TEST(Softmax, LogSoftmaxGradientMatchesFiniteDifferences) {
  // ∂ log s_i / ∂x_j = δ_ij − s_j
  std::mt19937_64 rng(2);
  for (size_t n : {1u, 3u, 9u}) {
    const auto x = random_vec(rng, n, 2.0);
    const auto s = softmax_of(x);
    std::vector<double> J(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) J[i * n + j] = (i == j ? 1.0 : 0.0) - s[j];
    EXPECT_LT(rel_err(J, fd_jacobian(log_softmax_of, x)), 1e-6);
    const auto ls = log_softmax_of(x);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(ls[i], std::log(s[i]), 1e-14);
  }
}

TEST(Softmax, CrossEntropyGradientIsPMinusYAndMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  for (size_t n : {2u, 4u, 10u}) {
    const auto x = random_vec(rng, n, 3.0);
    for (int64_t t = 0; t < static_cast<int64_t>(n); t += 3) {
      std::vector<double> g(n);
      const double loss = al::softmax_cross_entropy<double>(x, t, g);
      EXPECT_NEAR(loss, -std::log(softmax_of(x)[static_cast<size_t>(t)]), 1e-12);
      const auto fd = fd_jacobian(
          [&](const std::vector<double>& z) { return std::vector<double>{al::softmax_cross_entropy<double>(z, t)}; },
          x);
      EXPECT_LT(rel_err(g, fd), 1e-6);
      auto s = softmax_of(x);
      s[static_cast<size_t>(t)] -= 1;
      EXPECT_LT(rel_err(g, s), 1e-15);
    }
    // Soft targets: gradient s·Σy − y.
    std::vector<double> y(n);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& v : y) v = u(rng);
    std::vector<double> g(n);
    al::softmax_cross_entropy<double>(x, std::span<const double>(y), std::span<double>(g));
    const auto fd = fd_jacobian(
        [&](const std::vector<double>& z) {
          return std::vector<double>{al::softmax_cross_entropy<double>(z, std::span<const double>(y))};
        },
        x);
    EXPECT_LT(rel_err(g, fd), 1e-6);
  }
}

TEST(Softmax, VjpEqualsExplicitJacobianTransposeTimesG) {
  std::mt19937_64 rng(4);
  for (size_t n : {1u, 4u, 33u}) {
    const auto s = softmax_of(random_vec(rng, n, 2.0));
    const auto g = random_vec(rng, n, 1.0);
    std::vector<double> J(n * n), explicit_vjp(n, 0.0), vjp(n), jvp(n);
    al::softmax_jacobian<double>(s, J);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) explicit_vjp[j] += J[i * n + j] * g[i];
    al::softmax_vjp<double>(s, g, vjp);
    al::softmax_jvp<double>(s, g, jvp);
    EXPECT_LT(rel_err(vjp, explicit_vjp), 1e-14);
    EXPECT_LT(rel_err(jvp, explicit_vjp), 1e-14);  // J symmetric
  }
}

TEST(Softmax, ExtremeInputsAreExact) {
  // ±1e30: max subtraction keeps everything finite and exact.
  const auto s = softmax_of({1e30, -1e30, 1e30 - 1e14, 0});
  EXPECT_EQ(s[0], 1.0);
  EXPECT_EQ(s[1], 0.0);
  EXPECT_EQ(s[2], 0.0);
  EXPECT_EQ(s[3], 0.0);
  const auto tie = softmax_of({1e30, 1e30});
  EXPECT_EQ(tie[0], 0.5);
  // −inf entries get exactly zero probability.
  const auto m = softmax_of({-kInf, 0.0, -kInf, 0.0});
  EXPECT_EQ(m[0], 0.0);
  EXPECT_EQ(m[1], 0.5);
  const auto lm = log_softmax_of({-kInf, 0.0, 0.0});
  EXPECT_EQ(lm[0], -kInf);
  EXPECT_NEAR(lm[1], -std::log(2.0), 1e-16);
  // All −inf: no distribution; zeros, and −inf log-probabilities, never NaN.
  const auto z = softmax_of({-kInf, -kInf});
  EXPECT_EQ(z[0], 0.0);
  EXPECT_EQ(z[1], 0.0);
  EXPECT_EQ(al::logsumexp<double>(std::vector<double>{-kInf, -kInf}), -kInf);
  EXPECT_EQ(log_softmax_of({-kInf, -kInf})[0], -kInf);
  EXPECT_NEAR(al::logsumexp<double>(std::vector<double>{1e30, 1e30}), 1e30, 1e15);
  // log-softmax of a huge gap is the gap, not −inf.
  EXPECT_EQ(log_softmax_of({0.0, 1e30})[0], -1e30);
}

TEST(Softmax, Seed001ExampleTurnsOneHot) {
  // x = (a, a, 2a, 4a): as a grows the output becomes (0, 0, 0, 1) [seed 001].
  for (double a : {50.0, 100.0, 1000.0}) {
    const auto s = softmax_of({a, a, 2 * a, 4 * a});
    EXPECT_LT(s[0] + s[1] + s[2], 1e-40) << a;
    EXPECT_EQ(s[3], 1.0);
  }
  const auto u = softmax_of({1e-9, 1e-9, 2e-9, 4e-9});  // a → 0: uniform
  for (double p : u) EXPECT_NEAR(p, 0.25, 1e-9);
}

TEST(Softmax, RejectsNanAndPlusInfinityNamingTheIndex) {
  std::vector<double> out(3);
  try {
    al::softmax<double>(std::vector<double>{0, std::nan(""), 1}, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(al::softmax<double>(std::vector<double>{0, kInf, 1}, out), Error);
  EXPECT_THROW(al::softmax<double>(std::vector<double>{}, std::span<double>{}), Error);
  EXPECT_THROW(al::softmax<double>(std::vector<double>{1, 2}, out), Error);  // size mismatch
  EXPECT_THROW(al::softmax_cross_entropy<double>(std::vector<double>{1, 2}, 2), Error);
  EXPECT_THROW(al::softmax_cross_entropy<double>(std::vector<double>{1, 2}, std::vector<double>{-1, 2}), Error);
}

TEST(Softmax, FloatAgreesWithDoubleToFloatRounding) {
  std::mt19937_64 rng(5);
  const auto x = random_vec(rng, 100, 5.0);
  std::vector<float> xf(x.begin(), x.end()), sf(100), lf(100);
  al::softmax<float>(xf, sf);
  al::log_softmax<float>(xf, lf);
  std::vector<double> xd(xf.begin(), xf.end());  // same inputs, exactly
  const auto s = softmax_of(xd);
  const auto l = log_softmax_of(xd);
  for (size_t i = 0; i < 100; ++i) {
    // Reduced in double, rounded once: within one float ulp.
    EXPECT_NEAR(sf[i], s[i], std::abs(s[i]) * 6e-8 + 1e-45);
    EXPECT_NEAR(lf[i], l[i], std::abs(l[i]) * 6e-8);
  }
}
