#include "train/gpt_mlp.hpp"

#include "train/dense.hpp"
#include "train/gelu.hpp"

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
  slope_.resize(u_.size());
  dense::matmul(m, w_fc.value.data(), u_.data(), M, D_, F_, false);
  // GELU(u) = u Φ(u) and its slope Φ(u) + u φ(u), kept for the backward.
  gelu_forward(u_.data(), g_.data(), slope_.data(), u_.size());
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
