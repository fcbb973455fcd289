#include "train/gpt_mlp.hpp"

#include <cmath>
#include <numbers>

#include "train/dense.hpp"

namespace attnlab::train::lm {

template <class T>
Mlp<T>::Mlp(const std::string& name, int64_t d_model, int64_t hidden)
    : w_fc(name + ".w_fc", d_model, hidden), w_proj(name + ".w_proj", hidden, d_model), D_(d_model), F_(hidden) {}

template <class T>
void Mlp<T>::forward(const T* m, T* y, int64_t M) {
  m_ = m;
  M_ = M;
  u_.resize(static_cast<size_t>(M * F_));
  g_.resize(u_.size());
  dense::matmul(m, w_fc.value.data(), u_.data(), M, D_, F_, false);
  for (size_t i = 0; i < u_.size(); ++i) {
    const T u = u_[i];
    g_[i] = T(0.5) * u * (T(1) + std::erf(u * static_cast<T>(std::numbers::sqrt2 / 2)));
  }
  dense::matmul(g_.data(), w_proj.value.data(), y, M, F_, D_, false);
}

template <class T>
void Mlp<T>::backward(const T* dy, T* dm) {
  dg_.resize(u_.size());
  dense::matmul_at_b_acc(g_.data(), dy, w_proj.grad.data(), M_, F_, D_);
  dense::matmul_a_bt(dy, w_proj.value.data(), dg_.data(), M_, D_, F_, false);
  // GELU'(u) = Φ(u) + u φ(u)
  const T inv_sqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
  const T inv_sqrt_2pi = static_cast<T>(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);
  for (size_t i = 0; i < u_.size(); ++i) {
    const T u = u_[i];
    const T cdf = T(0.5) * (T(1) + std::erf(u * inv_sqrt2));
    const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * u * u);
    dg_[i] *= cdf + u * pdf;
  }
  dense::matmul_at_b_acc(m_, dg_.data(), w_fc.grad.data(), M_, D_, F_);
  dense::matmul_a_bt(dg_.data(), w_fc.value.data(), dm, M_, F_, D_, false);
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace attnlab::train::lm
