#include "train/additive_scores.hpp"

#include <algorithm>
#include <cmath>

namespace attnlab::train {

template <class T>
std::vector<double> additive_scores(const AdditiveShape& s, const T* q, const T* k, const T* a) {
  std::vector<double> e(static_cast<size_t>(s.B * s.Nq * s.N));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const T* qi = q + (b * s.Nq + i) * s.dk;
      for (int64_t j = 0; j < s.N; ++j) {
        const T* kj = k + (b * s.N + j) * s.dk;
        double sum = 0;
        for (int64_t c = 0; c < s.dk; ++c)
          sum += static_cast<double>(a[c]) * std::tanh(static_cast<double>(qi[c]) + static_cast<double>(kj[c]));
        e[static_cast<size_t>((b * s.Nq + i) * s.N + j)] = sum;
      }
    }
  return e;
}

template <class T>
void additive_forward(const AdditiveShape& s, const T* q, const T* k, const T* v, const T* a, T* out,
                      std::vector<double>& probs) {
  probs = additive_scores(s, q, k, a);
  std::vector<double> o(static_cast<size_t>(s.dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      double* p = probs.data() + (b * s.Nq + i) * s.N;
      const double m = *std::max_element(p, p + s.N);
      double z = 0;
      for (int64_t j = 0; j < s.N; ++j) z += (p[j] = std::exp(p[j] - m));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < s.N; ++j) {
        p[j] /= z;
        const T* vj = v + (b * s.N + j) * s.dv;
        for (int64_t c = 0; c < s.dv; ++c) o[static_cast<size_t>(c)] += p[j] * static_cast<double>(vj[c]);
      }
      T* oi = out + (b * s.Nq + i) * s.dv;
      for (int64_t c = 0; c < s.dv; ++c) oi[c] = static_cast<T>(o[static_cast<size_t>(c)]);
    }
}

template <class T>
void additive_backward(const AdditiveShape& s, const T* q, const T* k, const T* v, const T* a,
                       const std::vector<double>& probs, const T* dout, T* dq, T* dk, T* dv, T* da) {
  std::fill(dq, dq + s.B * s.Nq * s.dk, T(0));
  std::fill(dk, dk + s.B * s.N * s.dk, T(0));
  std::fill(dv, dv + s.B * s.N * s.dv, T(0));
  std::vector<double> dp(static_cast<size_t>(s.N)), dq_row(static_cast<size_t>(s.dk)), da_acc(static_cast<size_t>(s.dk));
  std::vector<double> dk_acc(static_cast<size_t>(s.B * s.N * s.dk)), dv_acc(static_cast<size_t>(s.B * s.N * s.dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const double* p = probs.data() + (b * s.Nq + i) * s.N;
      const T* doi = dout + (b * s.Nq + i) * s.dv;
      const T* qi = q + (b * s.Nq + i) * s.dk;
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
        const T* kj = k + (b * s.N + j) * s.dk;
        double* dkj = dk_acc.data() + (b * s.N + j) * s.dk;
        // e_ij = Σ_c a_c tanh(q_ic + k_jc): ∂/∂a_c = t, ∂/∂q_ic = ∂/∂k_jc = a_c (1 − t²).
        for (int64_t c = 0; c < s.dk; ++c) {
          const double t = std::tanh(static_cast<double>(qi[c]) + static_cast<double>(kj[c]));
          da_acc[static_cast<size_t>(c)] += de * t;
          const double g = de * static_cast<double>(a[c]) * (1 - t * t);
          dq_row[static_cast<size_t>(c)] += g;
          dkj[c] += g;
        }
      }
      T* dqi = dq + (b * s.Nq + i) * s.dk;
      for (int64_t c = 0; c < s.dk; ++c) dqi[c] = static_cast<T>(dq_row[static_cast<size_t>(c)]);
    }
  for (size_t x = 0; x < dk_acc.size(); ++x) dk[x] = static_cast<T>(dk_acc[x]);
  for (size_t x = 0; x < dv_acc.size(); ++x) dv[x] = static_cast<T>(dv_acc[x]);
  for (int64_t c = 0; c < s.dk; ++c) da[c] += static_cast<T>(da_acc[static_cast<size_t>(c)]);
}

template std::vector<double> additive_scores<float>(const AdditiveShape&, const float*, const float*, const float*);
template std::vector<double> additive_scores<double>(const AdditiveShape&, const double*, const double*, const double*);
template void additive_forward<float>(const AdditiveShape&, const float*, const float*, const float*, const float*, float*,
                                      std::vector<double>&);
template void additive_forward<double>(const AdditiveShape&, const double*, const double*, const double*, const double*,
                                       double*, std::vector<double>&);
template void additive_backward<float>(const AdditiveShape&, const float*, const float*, const float*, const float*,
                                       const std::vector<double>&, const float*, float*, float*, float*, float*);
template void additive_backward<double>(const AdditiveShape&, const double*, const double*, const double*, const double*,
                                        const std::vector<double>&, const double*, double*, double*, double*, double*);

}  // namespace attnlab::train
