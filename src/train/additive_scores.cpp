#include "train/additive_scores.hpp"

#include <algorithm>
#include <cmath>

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

namespace attnlab::train {
namespace {

// t = tanh(x + y) over n elements. Float (training) through Highway's vector Tanh on the
// compile target (a few ulp; tanh is most of the additive model's time); double (the
// gradient checks) through std::tanh.
void tanh_of_sum(const float* x, const float* y, float* t, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) hn::StoreU(hn::Tanh(d, hn::Add(hn::LoadU(d, x + c), hn::LoadU(d, y + c))), d, t + c);
  for (; c < n; ++c) t[c] = std::tanh(x[c] + y[c]);
}

void tanh_of_sum(const double* x, const double* y, double* t, int64_t n) {
  for (int64_t c = 0; c < n; ++c) t[c] = std::tanh(x[c] + y[c]);
}

}  // namespace

template <class T>
void additive_forward(const AdditiveShape& s, const T* q, const T* k, const T* v, const T* a, T* out,
                      AdditiveCache<T>& cache) {
  const auto pairs = static_cast<size_t>(s.B * s.Nq * s.N);
  cache.scores.resize(pairs);
  cache.probs.resize(pairs);
  cache.tanh.resize(pairs * static_cast<size_t>(s.dk));
  std::vector<double> o(static_cast<size_t>(s.dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const int64_t row = b * s.Nq + i;
      const T* qi = q + row * s.dk;
      double* e = cache.scores.data() + row * s.N;
      for (int64_t j = 0; j < s.N; ++j) {
        const T* kj = k + (b * s.N + j) * s.dk;
        T* t = cache.tanh.data() + (row * s.N + j) * s.dk;
        tanh_of_sum(qi, kj, t, s.dk);
        double sum = 0;
        for (int64_t c = 0; c < s.dk; ++c) sum += static_cast<double>(a[c]) * static_cast<double>(t[c]);
        e[j] = sum;
      }
      double* p = cache.probs.data() + row * s.N;
      const double m = *std::max_element(e, e + s.N);
      double z = 0;
      for (int64_t j = 0; j < s.N; ++j) z += (p[j] = std::exp(e[j] - m));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < s.N; ++j) {
        p[j] /= z;
        const T* vj = v + (b * s.N + j) * s.dv;
        for (int64_t c = 0; c < s.dv; ++c) o[static_cast<size_t>(c)] += p[j] * static_cast<double>(vj[c]);
      }
      T* oi = out + row * s.dv;
      for (int64_t c = 0; c < s.dv; ++c) oi[c] = static_cast<T>(o[static_cast<size_t>(c)]);
    }
}

template <class T>
void additive_backward(const AdditiveShape& s, const T* v, const T* a, const AdditiveCache<T>& cache, const T* dout,
                       T* dq, T* dk, T* dv, T* da) {
  std::vector<double> dp(static_cast<size_t>(s.N)), dq_row(static_cast<size_t>(s.dk)), da_acc(static_cast<size_t>(s.dk));
  std::vector<double> dk_acc(static_cast<size_t>(s.B * s.N * s.dk)), dv_acc(static_cast<size_t>(s.B * s.N * s.dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const int64_t row = b * s.Nq + i;
      const double* p = cache.probs.data() + row * s.N;
      const T* doi = dout + row * s.dv;
      // o_i = Σ_j p_ij v_j: dp_ij = dout_i·v_j, dv_j += p_ij dout_i; softmax: de = p ⊙ (dp − ⟨p, dp⟩).
      double mean = 0;
      for (int64_t j = 0; j < s.N; ++j) {
        const T* vj = v + (b * s.N + j) * s.dv;
        double d = 0;
        for (int64_t c = 0; c < s.dv; ++c) {
          d += static_cast<double>(doi[c]) * static_cast<double>(vj[c]);
          dv_acc[static_cast<size_t>((b * s.N + j) * s.dv + c)] += p[j] * static_cast<double>(doi[c]);
        }
        dp[static_cast<size_t>(j)] = d;
        mean += p[j] * d;
      }
      std::fill(dq_row.begin(), dq_row.end(), 0.0);
      for (int64_t j = 0; j < s.N; ++j) {
        const double de = p[j] * (dp[static_cast<size_t>(j)] - mean);
        const T* t = cache.tanh.data() + (row * s.N + j) * s.dk;
        double* dkj = dk_acc.data() + (b * s.N + j) * s.dk;
        // e_ij = Σ_c a_c tanh(q_ic + k_jc): ∂/∂a_c = t, ∂/∂q_ic = ∂/∂k_jc = a_c (1 − t²).
        for (int64_t c = 0; c < s.dk; ++c) {
          const double tc = static_cast<double>(t[c]);
          da_acc[static_cast<size_t>(c)] += de * tc;
          const double g = de * static_cast<double>(a[c]) * (1 - tc * tc);
          dq_row[static_cast<size_t>(c)] += g;
          dkj[c] += g;
        }
      }
      T* dqi = dq + row * s.dk;
      for (int64_t c = 0; c < s.dk; ++c) dqi[c] = static_cast<T>(dq_row[static_cast<size_t>(c)]);
    }
  for (size_t x = 0; x < dk_acc.size(); ++x) dk[x] = static_cast<T>(dk_acc[x]);
  for (size_t x = 0; x < dv_acc.size(); ++x) dv[x] = static_cast<T>(dv_acc[x]);
  for (int64_t c = 0; c < s.dk; ++c) da[c] += static_cast<T>(da_acc[static_cast<size_t>(c)]);
}

template void additive_forward<float>(const AdditiveShape&, const float*, const float*, const float*, const float*, float*,
                                      AdditiveCache<float>&);
template void additive_forward<double>(const AdditiveShape&, const double*, const double*, const double*, const double*,
                                       double*, AdditiveCache<double>&);
template void additive_backward<float>(const AdditiveShape&, const float*, const float*, const AdditiveCache<float>&,
                                       const float*, float*, float*, float*, float*);
template void additive_backward<double>(const AdditiveShape&, const double*, const double*, const AdditiveCache<double>&,
                                        const double*, double*, double*, double*, double*);

}  // namespace attnlab::train
