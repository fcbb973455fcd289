#pragma once
// The language-model study: does a GPT learn real text worse without 1/√d_k?
// A decoder-only GPT as nanoGPT writes it (bias-free), trained in C++ with analytic
// gradients, every head's attention through attnlab::attention_forward/backward
// (float32 on the engine; double on the reference for the gradient checks), on
// real text at the character level.
//
//   tokens x [B, T] → h = E[x] + P[0..T)                                   [B·T, D]
//   per block (L of them, pre-LN):
//     a = LN₁(h);  q = a W_q, k = a W_k  [B·T, H·d_k];  v = a W_v  [B·T, D]
//     o_h = softmax(q_h k_hᵀ · scale + causal) v_h   per head h (d_v = D/H)
//     h ← h + o W_o;   h ← h + GELU(LN₂(h) W_fc) W_proj        (W_fc [D, 4D], erf GELU)
//   logits = LN_f(h) Eᵀ  [B·T, V] (tied);  loss = mean cross-entropy over every position
//
// d_k (the width of q and k per head) is a parameter of its own, so d_k grows while
// D and d_v stay. Everything here returns plain data; the lab's experiment `lm`
// (src/lab/exp_lm.cpp) turns it into tables, figures and the verdict. The model, corpus, run
// and their tests: docs/lm-model.md.
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/train.hpp"

namespace attnlab::train::lm {

// ---- the text ----------------------------------------------------------------------
// Characters of a text as token ids, with a fixed split held out for validation.
struct Corpus {
  std::string name;                 // "bible-kjv", or the file's name
  std::string alphabet;             // alphabet[id] is the character (byte) of token id
  std::vector<uint8_t> train, validation;
  int64_t vocab() const { return static_cast<int64_t>(alphabet.size()); }
};
// Split: the text in chunks of 4 KiB, every 10th chunk (the 10th, 20th, ...) held out for
// validation, so that it samples every part of the text; each part is its chunks in order.
// The alphabet is the text's distinct bytes, sorted.
// The King James Version from Debian's bible-kjv (`bible -f 'Gen1:1-Rev22:21'`, 4.4 MB), each
// line's verse reference ("Ge1:1 ") stripped, newlines kept. Throws attnlab::Error naming the
// package when `program` is missing, fails or writes nothing.
Corpus kjv_corpus(const std::string& program = "bible");
// Any text file (bytes); the same split rule. Throws attnlab::Error for a missing, empty
// or too short (< 40 KiB: ten chunks) file.
Corpus text_corpus(const std::string& path);

// ---- the model ---------------------------------------------------------------------
enum class LmInit {
  gpt2,  // every weight N(0, 0.02), the residual projections (W_o, W_proj) N(0, 0.02/√(2L)); LN γ = 1
  unit,  // gpt2's, but W_q, W_k ~ N(0, 1/D): q and k components of unit variance (the seeds' assumption)
};
const char* to_string(LmInit init);
LmInit parse_lm_init(const std::string& text);  // "gpt2" | "unit"; throws attnlab::Error

struct GptConfig {
  int64_t vocab = 0;          // from the corpus
  int64_t context = 64;       // T, also the number of learned positions
  int64_t d_model = 64;       // D
  int64_t n_layers = 4;       // L
  int64_t n_heads = 4;        // H; D must be a multiple of H
  int64_t d_k = 16;           // width of q and k per head
  Scaling scale = ScalePolicy::inv_sqrt_d();  // a policy (fixed(α/√d_k) for α/√d_k), or qk-norm; not additive
  LmInit init = LmInit::gpt2;
};
void validate(const GptConfig& config);  // throws attnlab::Error naming the bad field

// ---- one run -----------------------------------------------------------------------
enum class LmOptimizer { adamw, sgd };  // AdamW (β 0.9, 0.95, ε 1e−8, decay on matrices); SGD, momentum 0.9
const char* to_string(LmOptimizer optimizer);
LmOptimizer parse_lm_optimizer(const std::string& text);  // "adamw" | "sgd"; throws attnlab::Error
struct LmRunConfig {
  GptConfig model;
  LmOptimizer optimizer = LmOptimizer::adamw;
  double lr = 1e-3;             // peak learning rate: linear warm-up, cosine decay to 10 %
  double weight_decay = 0.1;    // AdamW only, decoupled, on the matrices: W_q, W_k, W_v, W_o, W_fc,
                                // W_proj and the tied E; not the positions P, the LayerNorms, qk-norm's log-temperature
  double grad_clip = 1.0;       // global norm over every gradient (PyTorch's clip_grad_norm_); 0 = none
  int64_t steps = 400, warmup = 40, batch = 16;
  int64_t eval_every = 50;      // validation loss on a fixed set of windows (the same for every run:
                                // eval_windows windows evenly spaced over the validation text)
  int64_t eval_windows = 64;
  uint64_t seed = 1;            // init and the training windows (uniform starts, step by step)
};
void validate(const LmRunConfig& config);  // throws attnlab::Error naming the bad field (and the model's)

struct LmCurvePoint {
  int64_t step = 0;
  double train_bpc = 0;                         // mean training loss since the last point, bits per character
  double val_bpc = 0;                           // validation loss, bits per character
  std::vector<double> entropy, max_prob;        // per layer: mean attention entropy (nats), mean largest weight
  double grad_norm_q = 0, grad_norm_k = 0;      // total ‖∂L/∂W_q‖_F, ‖∂L/∂W_k‖_F over layers, last step before
                                                // clipping (NaN at step 0)
};
struct LmRunResult {
  LmRunConfig config;
  std::vector<LmCurvePoint> curve;
  double final_val_bpc = 0;     // the last point's val_bpc; NaN if diverged
  bool diverged = false;        // a loss or the gradient norm became non-finite: stopped there (the
                                // curve keeps the points before, and the non-finite one if it was an evaluation)
  int64_t loss_spikes = 0;      // evaluations whose val loss rose > 0.5 bpc above the best so far
  double seconds = 0;
};
// Trains one model on the calling thread (the engine with one thread), so that runs can
// be spread over cores; a function of its configuration and corpus alone (bitwise).
// Throws attnlab::Error for a bad configuration, a model.vocab other than the corpus's, or
// a corpus part shorter than context + 1.
LmRunResult train_lm_run(const LmRunConfig& config, const Corpus& corpus);

}  // namespace attnlab::train::lm
