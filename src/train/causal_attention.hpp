#pragma once
// The GPT's multi-head causal self-attention (attnlab/lm.hpp), without the residual:
//   q = a W_q, k = a W_k  [B·T, H·d_k];  v = a W_v  [B·T, D]     (row b·T + t, head h at columns h·d_k…)
//   qk-norm only: each head's rows of q and k divided by their norms, scale = exp(s), s learned
//   o_h = softmax(q_h k_hᵀ · scale + causal) v_h  for every head at once: one engine call over
//         [B, H, T, d_k] views of q, k (strides, no copies) with Causal::top_left; d_v = D/H
//   y = o W_o  [B·T, D]
// Every product through OpenBLAS (train/dense.hpp); buffers are kept between calls, so that a
// step of the same shape allocates nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/lm.hpp"
#include "train/param.hpp"

namespace attnlab::train::lm {

// Mean over every query row (all batch entries, heads and positions) of the softmax's
// entropy (nats) and largest weight.
struct AttentionSummary {
  double entropy = 0, max_prob = 0;
};

template <class T>
class CausalSelfAttention {
 public:
  CausalSelfAttention(const std::string& name, const GptConfig& config);

  // a [B·N, D] → y [B·N, D] (overwritten). With `summary`, the engine's row diagnostics averaged.
  void forward(const T* a, T* y, int64_t B, int64_t N, AttentionSummary* summary = nullptr);
  // dy [B·N, D] → da [B·N, D] (overwritten); accumulates the parameters' gradients.
  void backward(const T* dy, T* da);

  // The scale of q·k (of q̂·k̂ under qk-norm): the configured policy or exp(s).
  ScalePolicy policy() const;
  std::vector<Param<T>*> params();

  Param<T> w_q, w_k;  // [D, H·d_k]
  Param<T> w_v, w_o;  // [D, D]
  Param<T> log_temp;  // [1, 1] s; a parameter under qk-norm only

 private:
  bool qk_norm_ = false;
  ScalePolicy scale_;
  int64_t D_ = 0, H_ = 0, dk_ = 0, dv_ = 0;
  int64_t B_ = 0, N_ = 0;
  const T* a_ = nullptr;           // the last forward's input (the caller keeps it until backward)
  std::vector<T> q_, k_;           // [B·N, H·d_k]
  std::vector<T> qn_, kn_;         // q, k with unit rows per head (qk-norm only)
  std::vector<T> q_norm_, k_norm_; // [B·N·H]
  std::vector<T> v_, o_;           // [B·N, D]
  std::vector<T> lse_;             // [B, H, N]
  std::vector<T> max_prob_, entropy_;  // [B, H, N] diagnostics
  std::vector<T> do_buf_, dq_buf_, dk_buf_, dv_buf_;  // backward scratch
};

}  // namespace attnlab::train::lm
