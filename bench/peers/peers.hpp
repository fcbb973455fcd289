#pragma once
// The implementations `attnlab bench` compares the engine against, each doing
// what a user would otherwise write. Inputs are contiguous float32: q [B, Hq, Nq, D],
// k and v [B, Hkv, Nk, D] (grouped-query attention when Hkv < Hq: query head h
// reads key/value head h / (Hq / Hkv)), dv = d, scale 1/√d, optionally causal
// with either alignment (attnlab/attention_options.hpp: top-left, query i sees keys
// j ≤ i; bottom-right, the last query sees every key, as when a chunk of new
// queries is appended to a KV cache). forward() keeps what backward() needs (the
// materialised Nq×Nk probabilities), as autograd would.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

namespace attnlab::bench {

enum class PeerCausal { none, top_left, bottom_right };

struct PeerShape {
  int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 1;
  PeerCausal causal = PeerCausal::none;
  int64_t group() const { return Hq / Hkv; }
  int64_t q_numel() const { return B * Hq * Nq * D; }   // q, out, grad_out, dq
  int64_t kv_numel() const { return B * Hkv * Nk * D; }  // each of k, v, dk, dv
  // Row i sees keys [0, key_end(i)) (attention_options.hpp's rule, no padding).
  int64_t key_end(int64_t i) const {
    if (causal == PeerCausal::top_left) return std::min(Nk, i + 1);
    if (causal == PeerCausal::bottom_right) return std::clamp<int64_t>(i + Nk - Nq + 1, 0, Nk);
    return Nk;
  }
  // (query, key) pairs that are computed, per query head: what the FLOP counts count.
  double visible_pairs() const {
    double n = 0;
    for (int64_t i = 0; i < Nq; ++i) n += static_cast<double>(key_end(i));
    return n;
  }
  // Keys some row sees (key_end never decreases with i): the K and V rows that must be read.
  int64_t keys_read() const { return Nq > 0 ? key_end(Nq - 1) : 0; }
};

class Peer {
 public:
  virtual ~Peer() = default;
  virtual std::string name() const = 0;
  // q [B, Hq, Nq, D], k, v [B, Hkv, Nk, D]; out [B, Hq, Nq, D]
  virtual void forward(const float* q, const float* k, const float* v, float* out) = 0;
  // After forward(): dq [B, Hq, Nq, D], dk, dv [B, Hkv, Nk, D] (summed over the query heads of each group)
  virtual void backward(const float* grad_out, float* dq, float* dk, float* dv) = 0;
};

// Naive float32 attention on OpenBLAS: cblas_sgemm + softmax + cblas_sgemm per
// head, the materialised backward. Sets OpenBLAS to `threads` threads.
std::unique_ptr<Peer> make_openblas_peer(const PeerShape& shape, int threads);

// LibTorch: torch::matmul, torch::softmax and autograd, in float32 or (bf16) on bfloat16
// tensors. Sets torch to `threads` threads (intra-op). Returns nullptr with `why` set if
// LibTorch is unavailable.
std::unique_ptr<Peer> make_libtorch_peer(const PeerShape& shape, int threads, std::string* why, bool bf16 = false);

}  // namespace attnlab::bench
