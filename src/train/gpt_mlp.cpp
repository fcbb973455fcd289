#include "train/gpt_mlp.hpp"

#include <cmath>
#include <numbers>
#include <type_traits>

#include "train/dense.hpp"

namespace attnlab::train::lm {

template <class T>
Mlp<T>::Mlp(const std::string& name, int64_t d_model, int64_t hidden)
    : w_fc(name + ".w_fc", d_model, hidden), w_proj(name + ".w_proj", hidden, d_model), D_(d_model), F_(hidden) {}

namespace {

constexpr double kInvSqrt2 = std::numbers::sqrt2 / 2;
constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2;

// Φ(u) = (1 + erf(u/√2))/2 given e = exp(−u²/2). Double: std::erf. Float: Abramowitz & Stegun
// 7.1.26, erf(x) = 1 − t(a₁ + t(a₂ + …)) e^(−x²) with t = 1/(1 + p|x|), |error| ≤ 1.5e−7
// (float's own rounding near 1 is 6e−8), which reuses φ's exponential: one exp per entry
// instead of an erf and an exp (erff was a fifth of a step at d_k = 16).
template <class T>
T normal_cdf(T u, T e) {
  if constexpr (std::is_same_v<T, double>) {
    (void)e;
    return 0.5 * (1.0 + std::erf(u * kInvSqrt2));
  } else {
    const float x = std::abs(u) * static_cast<float>(kInvSqrt2);
    const float t = 1.0f / (1.0f + 0.3275911f * x);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float erf_abs = 1.0f - poly * e;  // e = exp(−u²/2) = exp(−x²)
    return 0.5f * (1.0f + std::copysign(erf_abs, u));
  }
}

}  // namespace

template <class T>
void Mlp<T>::forward(const T* m, T* y, int64_t M) {
  m_ = m;
  M_ = M;
  u_.resize(static_cast<size_t>(M * F_));
  g_.resize(u_.size());
  slope_.resize(u_.size());
  dense::matmul(m, w_fc.value.data(), u_.data(), M, D_, F_, false);
  // GELU(u) = u Φ(u) and its slope Φ(u) + u φ(u), kept for the backward.
  // Two passes: the exponentials (calls), then the rest without calls, which the compiler vectorises.
  for (size_t i = 0; i < u_.size(); ++i) slope_[i] = std::exp(T(-0.5) * u_[i] * u_[i]);
  for (size_t i = 0; i < u_.size(); ++i) {
    const T u = u_[i], e = slope_[i];
    const T cdf = normal_cdf(u, e);
    g_[i] = u * cdf;
    slope_[i] = cdf + u * static_cast<T>(kInvSqrt2Pi) * e;
  }
  dense::matmul(g_.data(), w_proj.value.data(), y, M, F_, D_, false);
}

template <class T>
void Mlp<T>::backward(const T* dy, T* dm) {
  dg_.resize(u_.size());
  dense::matmul_at_b_acc(g_.data(), dy, w_proj.grad.data(), M_, F_, D_);
  dense::matmul_a_bt(dy, w_proj.value.data(), dg_.data(), M_, D_, F_, false);
  for (size_t i = 0; i < u_.size(); ++i) dg_[i] *= slope_[i];
  dense::matmul_at_b_acc(m_, dg_.data(), w_fc.grad.data(), M_, D_, F_);
  dense::matmul_a_bt(dg_.data(), w_fc.value.data(), dm, M_, F_, D_, false);
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace attnlab::train::lm
