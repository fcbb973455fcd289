#pragma once
// The implementations `attnlab bench` compares the engine against, each doing
// what a user would otherwise write. Inputs are contiguous float32
// [B, H, N, D] (self-attention: Nq = Nk = N, dv = d, optional top-left causal
// mask, scale 1/√d). forward() keeps what backward() needs (the materialised
// N×N probabilities), as autograd would.
#include <cstdint>
#include <memory>
#include <string>

namespace attnlab::bench {

struct PeerShape {
  int64_t B = 1, H = 1, N = 1, D = 1;
  bool causal = false;
  int64_t numel() const { return B * H * N * D; }
};

class Peer {
 public:
  virtual ~Peer() = default;
  virtual std::string name() const = 0;
  // q, k, v, grad_out: [B, H, N, D]; out: [B, H, N, D]
  virtual void forward(const float* q, const float* k, const float* v, float* out) = 0;
  // After forward(): dq, dk, dv [B, H, N, D]
  virtual void backward(const float* grad_out, float* dq, float* dk, float* dv) = 0;
};

// Naive float32 attention on OpenBLAS: cblas_sgemm + softmax + cblas_sgemm per
// head, the materialised backward. Sets OpenBLAS to `threads` threads.
std::unique_ptr<Peer> make_openblas_peer(const PeerShape& shape, int threads);

// LibTorch: torch::matmul, torch::softmax and autograd. Sets torch to `threads`
// threads (intra-op). Returns nullptr with `why` set if LibTorch is unavailable.
std::unique_ptr<Peer> make_libtorch_peer(const PeerShape& shape, int threads, std::string* why);

}  // namespace attnlab::bench
