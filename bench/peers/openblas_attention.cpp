// Naive float32 attention on OpenBLAS (see peers.hpp): per query head h, with
// K and V of its key/value head h / (Hq / Hkv) read in place (no copy per query head),
//   S = scale·Q Kᵀ (sgemm), −inf past the row's causal key_end, P = softmax(S)
//   row by row, O = P V (sgemm)
// and the materialised backward
//   dV = Pᵀ dO, dP = dO Vᵀ, dS = P∘(dP − rowsum(P∘dP)), dQ = scale·dS K, dK = scale·dSᵀ Q,
// dK and dV summed over the query heads that share a key/value head (sgemm's beta).
// The row loops (softmax, dS) are OpenMP-parallel, as a careful user would
// write them; the GEMMs use OpenBLAS's own threads. OpenBLAS is opened here, on use
// (attnlab/blas.hpp): no other subcommand loads it.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnlab/blas.hpp"
#include "peers/peers.hpp"

namespace attnlab::bench {
namespace {

class OpenBlasPeer final : public Peer {
 public:
  OpenBlasPeer(const PeerShape& s, int threads)
      : s_(s), threads_(threads), P_(static_cast<size_t>(s.B * s.Hq * s.Nq * s.Nk)),
        dP_(static_cast<size_t>(s.Nq * s.Nk)) {
    blas::set_threads(threads);
  }
  std::string name() const override { return "openblas"; }

  void forward(const float* q, const float* k, const float* v, float* out) override {
    q_ = q;
    k_ = k;
    v_ = v;
    const int nq = static_cast<int>(s_.Nq), nk = static_cast<int>(s_.Nk), d = static_cast<int>(s_.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s_.D));
    for (int64_t bh = 0; bh < s_.B * s_.Hq; ++bh) {
      const int64_t kv = kv_head(bh);
      const float* Q = q + bh * s_.Nq * s_.D;
      const float* K = k + kv * s_.Nk * s_.D;
      const float* V = v + kv * s_.Nk * s_.D;
      float* P = P_.data() + bh * s_.Nq * s_.Nk;  // [Nq × Nk]
      blas::gemm(blas::Trans::no, blas::Trans::yes, nq, nk, d, scale, Q, d, K, d, 0.0f, P, nk);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int i = 0; i < nq; ++i) {
        float* row = P + static_cast<int64_t>(i) * nk;
        const int end = static_cast<int>(s_.key_end(i));
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < end; ++j) m = std::max(m, row[j]);
        float l = 0;
        for (int j = 0; j < end; ++j) {
          row[j] = std::exp(row[j] - m);
          l += row[j];
        }
        const float inv = l > 0 ? 1.0f / l : 0.0f;  // a row that sees no key: P = 0, O = 0
        for (int j = 0; j < end; ++j) row[j] *= inv;
        for (int j = end; j < nk; ++j) row[j] = 0.0f;
      }
      blas::gemm(blas::Trans::no, blas::Trans::no, nq, d, nk, 1.0f, P, nk, V, d, 0.0f,
                  out + bh * s_.Nq * s_.D, d);
    }
  }

  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    const int nq = static_cast<int>(s_.Nq), nk = static_cast<int>(s_.Nk), d = static_cast<int>(s_.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s_.D));
    for (int64_t bh = 0; bh < s_.B * s_.Hq; ++bh) {
      const int64_t kv = kv_head(bh);
      const int64_t qo = bh * s_.Nq * s_.D, ko = kv * s_.Nk * s_.D;
      const float beta = bh % s_.group() == 0 ? 0.0f : 1.0f;  // the group's first head overwrites dK, dV
      const float* P = P_.data() + bh * s_.Nq * s_.Nk;
      float* dP = dP_.data();
      blas::gemm(blas::Trans::yes, blas::Trans::no, nk, d, nq, 1.0f, P, nk, grad_out + qo, d, beta, dv + ko, d);
      blas::gemm(blas::Trans::no, blas::Trans::yes, nq, nk, d, 1.0f, grad_out + qo, d, v_ + ko, d, 0.0f, dP, nk);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int i = 0; i < nq; ++i) {
        const float* p = P + static_cast<int64_t>(i) * nk;
        float* g = dP + static_cast<int64_t>(i) * nk;
        float D = 0;
        for (int j = 0; j < nk; ++j) D += p[j] * g[j];
        for (int j = 0; j < nk; ++j) g[j] = p[j] * (g[j] - D);
      }
      blas::gemm(blas::Trans::no, blas::Trans::no, nq, d, nk, scale, dP, nk, k_ + ko, d, 0.0f, dq + qo, d);
      blas::gemm(blas::Trans::yes, blas::Trans::no, nk, d, nq, scale, dP, nk, q_ + qo, d, beta, dk + ko, d);
    }
  }

 private:
  // [b, h] (flattened) → its key/value head [b, h / group] (flattened)
  int64_t kv_head(int64_t bh) const { return (bh / s_.Hq) * s_.Hkv + (bh % s_.Hq) / s_.group(); }

  PeerShape s_;
  int threads_;
  std::vector<float> P_;   // [B, Hq, Nq, Nk] probabilities kept for the backward
  std::vector<float> dP_;  // [Nq, Nk] one head's dP, then dS
  const float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
};

}  // namespace

std::unique_ptr<Peer> make_openblas_peer(const PeerShape& shape, int threads) {
  return std::make_unique<OpenBlasPeer>(shape, threads);
}

}  // namespace attnlab::bench
