#pragma once
// Central finite differences for the training model's double-precision layers.
// A scalar loss L(θ) is evaluated at θ ± h for one entry at a time; with h = 1e−6
// in double the truncation error is O(h²) ≈ 1e−12 and the rounding error
// O(ε/h) ≈ 1e−10, so analytic and numeric derivatives must agree to ~1e−7.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace attnlab::train::test {

inline constexpr double kStep = 1e-6;
// |analytic − numeric| ≤ kAbs + kRel·|numeric|
inline constexpr double kAbs = 1e-7, kRel = 1e-5;

// Checks analytic[i] against ∂loss/∂x[i] for up to max_entries entries of x
// (all of them if x is small, else a seeded random subset). loss() must read x.
inline void check_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                           const std::function<double()>& loss, int max_entries = 24, uint64_t seed = 7) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<size_t> entries;
  if (x.size() <= static_cast<size_t>(max_entries)) {
    for (size_t i = 0; i < x.size(); ++i) entries.push_back(i);
  } else {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
    for (int i = 0; i < max_entries; ++i) entries.push_back(pick(rng));
  }
  for (size_t i : entries) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double up = loss();
    x[i] = saved - kStep;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    EXPECT_NEAR(analytic[i], numeric, kAbs + kRel * std::abs(numeric)) << what << "[" << i << "]";
  }
}

// L = Σ w ⊙ y: a linear read-out with random weights makes every output of a layer count.
inline double weighted_sum(const std::vector<double>& y, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}

// ‖a − b‖ and ‖b‖ of two gradients of one parameter (the float model's and the double model's).
struct Distance {
  double diff = 0, norm = 0;
};
template <class A, class B>
Distance gradient_distance(const std::vector<A>& a, const std::vector<B>& b) {
  Distance d;
  for (size_t i = 0; i < b.size(); ++i) {
    d.diff += std::pow(static_cast<double>(a[i]) - static_cast<double>(b[i]), 2);
    d.norm += std::pow(static_cast<double>(b[i]), 2);
  }
  d.diff = std::sqrt(d.diff);
  d.norm = std::sqrt(d.norm);
  return d;
}

inline std::vector<double> normal_vector(size_t n, uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

}  // namespace attnlab::train::test
