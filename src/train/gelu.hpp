#pragma once
// GELU(u) = u Φ(u) (the erf form) and its slope Φ(u) + u φ(u), for the GPT's MLP
// (train/gpt_mlp.hpp): float through Highway (train/gelu.cpp), double exactly with std::erf.
//
// Float's Φ uses Abramowitz & Stegun 7.1.26, erf(x) = 1 − t(a₁ + t(a₂ + t(a₃ + t(a₄ + t a₅))))·e^(−x²)
// with t = 1/(1 + p|x|), |error| ≤ 1.5e−7 (float's own rounding near 1 is 6e−8), on the
// exponential e^(−u²/2) that φ needs anyway: one exponential per entry.
#include <cmath>
#include <cstddef>
#include <numbers>

namespace attnlab::train::lm {

inline constexpr double kGeluInvSqrt2 = std::numbers::sqrt2 / 2;
inline constexpr double kGeluInvSqrt2Pi = std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2;
inline constexpr float kAs26P = 0.3275911f;
inline constexpr float kAs26A[5] = {0.254829592f, -0.284496736f, 1.421413741f, -1.453152027f, 1.061405429f};

// g[i] = GELU(u[i]), slope[i] = GELU'(u[i]) for i < n (float: SIMD, dispatched at run time).
void gelu_forward(const float* u, float* g, float* slope, size_t n);

inline void gelu_forward(const double* u, double* g, double* slope, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double cdf = 0.5 * (1.0 + std::erf(u[i] * kGeluInvSqrt2));
    g[i] = u[i] * cdf;
    slope[i] = cdf + u[i] * kGeluInvSqrt2Pi * std::exp(-0.5 * u[i] * u[i]);
  }
}

}  // namespace attnlab::train::lm
