#pragma once
// One residual self-attention block of the training model (single head):
//   a = LN(h) (optional)                       [B·N, D]
//   q = a W_q, k = a W_k                       [B·N, d_k]
//   q̂, k̂ = q/‖q‖, k/‖k‖ row-wise (qk-norm only; scale = exp(s), s learned)
//   v = a W_v                                  [B·N, D]
//   o = softmax(q kᵀ · scale) v               [B·N, D]  through the engine (float) or the reference (double)
//   h' = h + o W_o                             [B·N, D]
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "attnlab/train.hpp"
#include "train/layernorm.hpp"
#include "train/param.hpp"

namespace attnlab::train {

// Per-row softmax diagnostics of the last forward, each [B·N] (float model only).
struct AttentionStats {
  std::vector<float> entropy, jacobian_fro_sq, max_prob;
};

template <class T>
class AttentionLayer {
 public:
  AttentionLayer(const std::string& name, const ModelConfig& config);

  void init(std::mt19937_64& rng);
  // h [B, N, D] → h_out [B, N, D]. With `stats`, the engine's row diagnostics are
  // written there (ignored for double, which runs on the reference).
  void forward(const T* h, T* h_out, int64_t B, int64_t N, AttentionStats* stats = nullptr);
  // dh_out [B, N, D] → dh [B, N, D] (overwritten); accumulates parameter gradients.
  void backward(const T* dh_out, T* dh);

  // The scale applied to q·k (q̂·k̂ under qk-norm) in the last forward.
  double scale() const;
  std::vector<Param<T>*> params();

  Param<T> w_q, w_k;       // [D, d_k]
  Param<T> w_v, w_o;       // [D, D]
  Param<T> log_temp;       // [1, 1]  s, scale = exp(s); used only under qk-norm
  std::optional<LayerNorm<T>> ln;

 private:
  ModelConfig config_;
  int64_t B_ = 0, N_ = 0, D_ = 0, dk_ = 0;
  std::vector<T> a_;          // [B·N, D]  block input after LN
  std::vector<T> q_, k_;      // [B·N, d_k] projections
  std::vector<T> qn_, kn_;    // [B·N, d_k] unit rows (qk-norm) fed to attention
  std::vector<T> q_norm_, k_norm_;  // [B·N]
  std::vector<T> v_;          // [B·N, D]
  std::vector<T> o_;          // [B·N, D] attention output
  std::vector<T> lse_;        // [B·N]
};

}  // namespace attnlab::train
