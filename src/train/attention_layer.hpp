#pragma once
// One residual self-attention block of the training model (single head):
//   a = LN(h) (optional)                       [B·N, D]
//   q = a W_q, k = a W_k                       [B·N, d_k]
//   q̂, k̂ = q/‖q‖, k/‖k‖ row-wise (qk-norm only; scale = exp(s), s learned)
//   (additive only: scores aᵀ tanh(q_i + k_j) instead of q·k, train/additive_scores.hpp)
//   v = a W_v                                  [B·N, D]
//   o = softmax(q kᵀ · scale) v               [B·N, D]  attnlab::attention_forward: the engine (float)
//                                                        or the reference (double), the scale per row from the policy
//   h' = h + o W_o                             [B·N, D]
// With last_only, only the last position of each sequence queries (q, o of
// [B, ·] rows; the attention runs with Nq = 1, Nk = N) and h' = h elsewhere: the
// last block of the model needs nothing else, since the classifier reads only
// the last position. This makes the attention N times cheaper.
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "attnlab/train.hpp"
#include "train/additive_scores.hpp"
#include "train/layernorm.hpp"
#include "train/param.hpp"

namespace attnlab::train {

// Per-row softmax diagnostics of the last forward, each [B·Nq] (float model only).
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
  void forward(const T* h, T* h_out, int64_t B, int64_t N, AttentionStats* stats = nullptr, bool last_only = false);
  // dh_out [B, N, D] → dh [B, N, D] (overwritten); accumulates parameter gradients.
  void backward(const T* dh_out, T* dh);

  // The policy the next forward applies to q·k: the configured one, or the
  // learned temperature exp(s) as a fixed scale of q̂·k̂ under qk-norm.
  ScalePolicy policy() const;
  // That policy's scale for a row that sees n_keys keys.
  double scale(int64_t n_keys) const;
  // The logits S = scale·q·k of the last forward (of q̂·k̂ under qk-norm; the additive scores), [B·Nq, N] row-major:
  // each querying row against the keys of its own sequence. For the coordinate check (μP).
  std::vector<double> logits() const;
  std::vector<Param<T>*> params();

  Param<T> w_q, w_k;       // [D, d_k]
  Param<T> w_v, w_o;       // [D, D]
  Param<T> log_temp;       // [1, 1]  s, scale = exp(s); used only under qk-norm
  Param<T> w_a;            // [d_k, 1] a of the additive score; used only under additive
  std::optional<LayerNorm<T>> ln;

 private:
  // The additive score's forward on q_, k_, v_ into o_ (and probs_), with the row diagnostics.
  void attend_additive(AttentionStats* stats);

  ModelConfig config_;
  int64_t B_ = 0, N_ = 0, Nq_ = 0, D_ = 0, dk_ = 0;  // Nq = 1 with last_only, else N
  std::vector<T> a_;          // [B·N, D]  block input after LN
  std::vector<T> a_q_;        // [B·Nq, D] the rows of a that query
  std::vector<T> q_;          // [B·Nq, d_k]
  std::vector<T> k_;          // [B·N, d_k]
  std::vector<T> qn_, kn_;    // q, k with unit rows (qk-norm only), fed to attention
  std::vector<T> q_norm_, k_norm_;  // [B·Nq], [B·N]
  std::vector<T> v_;          // [B·N, D]
  std::vector<T> o_;          // [B·Nq, D] attention output
  std::vector<T> lse_;        // [B·Nq]
  AdditiveCache<T> additive_; // what the additive score's backward needs (additive only)
};

}  // namespace attnlab::train
