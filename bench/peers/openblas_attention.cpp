// Naive float32 attention on OpenBLAS (see peers.hpp): per head
//   S = scale·Q Kᵀ (sgemm), causal −inf, P = softmax(S) row by row, O = P V (sgemm)
// and the materialised backward
//   dV = Pᵀ dO, dP = dO Vᵀ, dS = P∘(dP − rowsum(P∘dP)), dQ = scale·dS K, dK = scale·dSᵀ Q.
// The row loops (softmax, dS) are OpenMP-parallel, as a careful user would
// write them; the GEMMs use OpenBLAS's own threads.
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "peers/peers.hpp"

namespace attnlab::bench {
namespace {

class OpenBlasPeer final : public Peer {
 public:
  OpenBlasPeer(const PeerShape& s, int threads)
      : s_(s), threads_(threads), P_(static_cast<size_t>(s.B * s.H * s.N * s.N)), dP_(static_cast<size_t>(s.N * s.N)) {
    openblas_set_num_threads(threads);
  }
  std::string name() const override { return "openblas"; }

  void forward(const float* q, const float* k, const float* v, float* out) override {
    q_ = q;
    k_ = k;
    v_ = v;
    const int n = static_cast<int>(s_.N), d = static_cast<int>(s_.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s_.D));
    for (int64_t bh = 0; bh < s_.B * s_.H; ++bh) {
      const float* Q = q + bh * s_.N * s_.D;
      const float* K = k + bh * s_.N * s_.D;
      const float* V = v + bh * s_.N * s_.D;
      float* P = P_.data() + bh * s_.N * s_.N;  // [N × N]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, scale, Q, d, K, d, 0.0f, P, n);
      const bool causal = s_.causal;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int i = 0; i < n; ++i) {
        float* row = P + static_cast<int64_t>(i) * n;
        const int end = causal ? i + 1 : n;
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < end; ++j) m = std::max(m, row[j]);
        float l = 0;
        for (int j = 0; j < end; ++j) {
          row[j] = std::exp(row[j] - m);
          l += row[j];
        }
        const float inv = 1.0f / l;
        for (int j = 0; j < end; ++j) row[j] *= inv;
        for (int j = end; j < n; ++j) row[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, 1.0f, P, n, V, d, 0.0f,
                  out + bh * s_.N * s_.D, d);
    }
  }

  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    const int n = static_cast<int>(s_.N), d = static_cast<int>(s_.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s_.D));
    for (int64_t bh = 0; bh < s_.B * s_.H; ++bh) {
      const int64_t off = bh * s_.N * s_.D;
      const float* P = P_.data() + bh * s_.N * s_.N;
      float* dP = dP_.data();
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, n, 1.0f, P, n, grad_out + off, d, 0.0f, dv + off, d);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, 1.0f, grad_out + off, d, v_ + off, d, 0.0f, dP, n);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int i = 0; i < n; ++i) {
        const float* p = P + static_cast<int64_t>(i) * n;
        float* g = dP + static_cast<int64_t>(i) * n;
        float D = 0;
        for (int j = 0; j < n; ++j) D += p[j] * g[j];
        for (int j = 0; j < n; ++j) g[j] = p[j] * (g[j] - D);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, scale, dP, n, k_ + off, d, 0.0f, dq + off, d);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, n, scale, dP, n, q_ + off, d, 0.0f, dk + off, d);
    }
  }

 private:
  PeerShape s_;
  int threads_;
  std::vector<float> P_;   // [B, H, N, N] probabilities kept for the backward
  std::vector<float> dP_;  // [N, N] one head's dP, then dS
  const float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
};

}  // namespace

std::unique_ptr<Peer> make_openblas_peer(const PeerShape& shape, int threads) {
  return std::make_unique<OpenBlasPeer>(shape, threads);
}

}  // namespace attnlab::bench
