#include "train/layernorm.hpp"

#include <cmath>

namespace attnlab::train {

template <class T>
LayerNorm<T>::LayerNorm(const std::string& name, int64_t D)
    : gamma(name + ".gamma", 1, D), beta(name + ".beta", 1, D), D_(D) {
  gamma.fill(T(1));
  beta.fill(T(0));
}

template <class T>
void LayerNorm<T>::forward(const T* x, T* y, int64_t M) {
  M_ = M;
  xhat_.resize(static_cast<size_t>(M * D_));
  rstd_.resize(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) {
    const T* xi = x + i * D_;
    double mean = 0, var = 0;  // reduced in double: D is small and this keeps float close to double
    for (int64_t j = 0; j < D_; ++j) mean += xi[j];
    mean /= static_cast<double>(D_);
    for (int64_t j = 0; j < D_; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    var /= static_cast<double>(D_);
    const double r = 1.0 / std::sqrt(var + kEps);
    rstd_[static_cast<size_t>(i)] = static_cast<T>(r);
    T* h = xhat_.data() + i * D_;
    for (int64_t j = 0; j < D_; ++j) {
      h[j] = static_cast<T>((xi[j] - mean) * r);
      y[i * D_ + j] = h[j] * gamma.value[static_cast<size_t>(j)] + beta.value[static_cast<size_t>(j)];
    }
  }
}

template <class T>
void LayerNorm<T>::backward(const T* dy, T* dx) {
  // With g = dy ⊙ γ:  dx = (1/σ) (g − mean(g) − x̂ · mean(g ⊙ x̂))
  for (int64_t i = 0; i < M_; ++i) {
    const T* d = dy + i * D_;
    const T* h = xhat_.data() + i * D_;
    double mg = 0, mgh = 0;
    for (int64_t j = 0; j < D_; ++j) {
      const double g = static_cast<double>(d[j]) * gamma.value[static_cast<size_t>(j)];
      mg += g;
      mgh += g * h[j];
      gamma.grad[static_cast<size_t>(j)] += d[j] * h[j];
      beta.grad[static_cast<size_t>(j)] += d[j];
    }
    mg /= static_cast<double>(D_);
    mgh /= static_cast<double>(D_);
    const double r = rstd_[static_cast<size_t>(i)];
    for (int64_t j = 0; j < D_; ++j) {
      const double g = static_cast<double>(d[j]) * gamma.value[static_cast<size_t>(j)];
      dx[i * D_ + j] = static_cast<T>(r * (g - mg - h[j] * mgh));
    }
  }
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace attnlab::train
