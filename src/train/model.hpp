#pragma once
// The whole training model (see attnlab/train.hpp for the maths):
// token-shift embedding → 1 or 2 attention blocks → LN → linear classifier on the
// last position → mean softmax cross-entropy. Templated so that the same code runs
// in float (through the engine, for training) and double (through the reference,
// for finite-difference gradient checks).
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "attnlab/train.hpp"
#include "train/attention_layer.hpp"
#include "train/layernorm.hpp"
#include "train/param.hpp"

namespace attnlab::train {

struct ForwardStats {
  double loss = 0;          // mean cross-entropy over the batch
  int64_t correct = 0;      // argmax == target
  std::vector<AttentionStats> layers;  // filled when asked (float only)
};

template <class T>
class Model {
 public:
  Model(const ModelConfig& model, const TaskConfig& task);  // throws attnlab::Error on a bad config

  // Same seed → same weights in float and double.
  void init(uint64_t seed);
  // Loss of the batch; keeps what backward() needs. With `with_stats`, fills the
  // attention diagnostics of every layer (float only).
  ForwardStats forward(const Batch& batch, bool with_stats = false);
  // Gradients of the last forward's loss, accumulated into every Param's grad.
  void backward();
  void zero_grad();
  std::vector<Param<T>*> params();
  const std::vector<AttentionLayer<T>>& layers() const { return layers_; }

  Param<T> tok_emb;   // E [V, D]
  Param<T> prev_emb;  // F [V + 1, D]; row V stands for "no previous token" at position 0
  Param<T> w_c;       // [D, C]
  Param<T> b_c;       // [1, C]
  std::vector<AttentionLayer<T>> layers_;
  std::optional<LayerNorm<T>> ln_f;

 private:
  ModelConfig config_;
  int64_t V_ = 0, C_ = 0, D_ = 0;
  int64_t B_ = 0, N_ = 0;
  std::vector<int32_t> tokens_, targets_;     // [B, N], [B]
  std::vector<std::vector<T>> h_;             // h_[l] [B, N, D]: input of layer l; h_[L] the last output
  std::vector<T> last_, z_;                   // [B, D] last position before / after LN_f
  std::vector<T> probs_;                      // [B, C] softmax of the logits
};

}  // namespace attnlab::train
