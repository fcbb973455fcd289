#pragma once
// The GPT of the language-model study (attnlab/lm.hpp for the maths): token and learned
// position embeddings, L pre-LN blocks (causal multi-head attention, GELU MLP), a final
// LayerNorm and the tied output embedding; mean cross-entropy over every position.
// Templated so that the same code trains in float (attention on the engine) and is checked in
// double (attention on the reference, finite differences). Buffers are kept between calls:
// a step of the same shape allocates nothing.
#include <cstdint>
#include <random>
#include <vector>

#include "attnlab/lm.hpp"
#include "train/causal_attention.hpp"
#include "train/gpt_mlp.hpp"
#include "train/layernorm.hpp"
#include "train/param.hpp"

namespace attnlab::train::lm {

// Windows of text: tokens [B, T] and the next characters as targets [B, T], row-major.
struct LmBatch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets;
};

template <class T>
struct GptBlock {
  GptBlock(const std::string& name, const GptConfig& config);
  LayerNorm<T> ln1;
  CausalSelfAttention<T> attn;
  LayerNorm<T> ln2;
  Mlp<T> mlp;
};

template <class T>
class Gpt {
 public:
  explicit Gpt(const GptConfig& config);  // throws attnlab::Error naming a bad field
  Gpt(const Gpt&) = delete;  // params() points into this object
  Gpt& operator=(const Gpt&) = delete;

  // The weights of LmInit from the seed: the same seed gives the same weights in float and
  // double, and gpt2 and unit the same weights but W_q, W_k (one stream of draws).
  void init(uint64_t seed);
  // Mean cross-entropy (nats) of the batch, NaN if a logit or qk-norm's temperature is not
  // finite (a diverged model);
  // keeps what backward() needs. With `summary`, one
  // entry per layer: the attention's mean entropy and largest weight.
  double forward(const LmBatch& batch, std::vector<AttentionSummary>* summary = nullptr);
  // Gradients of the last forward's loss, accumulated into every Param's grad.
  void backward();
  void zero_grad();
  // Every learnable tensor, in a fixed order (listed once: a step allocates nothing).
  const std::vector<Param<T>*>& params() const { return params_; }
  // Whether AdamW decays params()[i]: the matrices (W_q, W_k, W_v, W_o, W_fc, W_proj and the
  // tied embedding E), not the positions, LayerNorms or qk-norm's temperature.
  std::vector<bool> decayed() const;
  const GptConfig& config() const { return config_; }

  Param<T> tok_emb;  // E [V, D], also the output layer (logits = LN_f(h) Eᵀ)
  Param<T> pos_emb;  // P [T, D]
  std::vector<GptBlock<T>> blocks;
  LayerNorm<T> ln_f;

 private:
  std::vector<Param<T>*> list_params();

  GptConfig config_;
  std::vector<Param<T>*> params_;
  int64_t B_ = 0, N_ = 0;
  std::vector<int32_t> tokens_, targets_;     // [B·N]
  std::vector<std::vector<T>> h_;             // h_[l] [B·N, D]: input of block l; h_[L] the last output
  std::vector<std::vector<T>> mid_;           // mid_[l]: after block l's attention residual
  std::vector<std::vector<T>> a_, m_;         // block l's LN₁ and LN₂ outputs (the layers read them in backward)
  std::vector<T> z_;                          // LN_f(h_[L])
  std::vector<T> logits_;                     // [B·N, V]
  std::vector<T> probs_;                      // [B·N, V] softmax − onehot of the last forward
  std::vector<T> tmp_, dh_, dmid_, dtmp_;     // [B·N, D] scratch
};

}  // namespace attnlab::train::lm
