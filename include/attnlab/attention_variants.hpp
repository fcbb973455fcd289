#pragma once
// The attention variants of today's models, as options of AttentionOptions
// (attention_options.hpp). Each follows the system that made it popular, and
// combines with every other option (GQA, causal masks, boolean and additive masks,
// key padding, scale policies, diagnostics).
//
// For row i and key j of one sequence with n_q queries and n_k keys (n_k is the key
// length after padding, key_lengths[b]; with packed sequences both are the
// sequence's own lengths and i, j count from the sequence's start), the key on the
// row's bottom-right diagonal is
//     diag_i = i + n_k − n_q
// (FlashAttention's alignment: the last query's diagonal is the last key).
//
// The score of a visible key is built in this order:
//     s    = scale_i · q_i·k_j                      (the scale policy, scale.hpp)
//     s    = c · tanh(s / c)                         softcap c         (Gemma 2; FlashAttention's softcap)
//     s    = s − slope · |diag_i − j|                ALiBi             (Press et al. 2022, BLOOM, MPT;
//                                                                       FlashAttention's alibi_slopes)
//     s    = score_mod(s, b, h, i, j)                programmable      (score_mod.hpp; FlexAttention)
//     S_ij = s + additive_mask_ij
// and the row's softmax is taken over its visible keys and, with sinks, one more
// logit sink_h that has no value row (gpt-oss; ggml's attention sinks):
//     L_i  = log(Σ_j exp(S_ij) + exp(sink_h)),   P_ij = exp(S_ij − L_i),
//     O_i  = Σ_j P_ij · Z_ij/(1 − p) · v_j       dropout: Z_ij ∈ {0, 1} kept with
//                                                probability 1 − p (PyTorch's dropout_p)
// A row that sees no key has O = 0 and L = −inf, or, with sinks, L = sink_h (the
// softmax then puts all its mass on the sink). The backward differentiates all of it:
// through tanh (∂/∂s = 1 − tanh²(s/c)), through score_mod (its given derivative),
// through the dropout mask (held fixed) and into the sinks (∂L/∂sink_h is returned).
#include <cstdint>

#include "attnlab/tensor.hpp"

namespace attnlab {

// Sliding-window (local) attention, FlashAttention's window_size = (left, right):
// row i sees keys j with diag_i − left ≤ j ≤ diag_i + right (Mistral, Gemma's local
// layers, Longformer's band). −1 leaves that side unbounded; (−1, −1), the default,
// is no window; (−1, 0) is bottom-right causal. Values below −1 are an error. The
// window intersects causality: with both, a key is visible only if both allow it.
// The engine skips tiles outside the band: the cost grows as Nq·(left + right), not Nq·Nk.
struct Window {
  int64_t left = -1;
  int64_t right = -1;
  bool present() const { return left != -1 || right != -1; }
};

// Dropout on the attention probabilities, PyTorch's semantics
// (scaled_dot_product_attention's dropout_p): each P_ij is kept with probability
// 1 − p and the kept ones are scaled by 1/(1 − p); the lse L is that of the softmax
// before dropout. The keep bit of (b, h, i, j) comes from a counter-based generator
// (Philox-4x32-10, as PyTorch and FlashAttention use) keyed by the seed and counting
// over (b, h, i, j): the backward regenerates the mask instead of storing it, and the
// result is the same for any thread count, in the engine and in the reference.
// p = 0 (the default) is no dropout; p must be in [0, 1).
struct Dropout {
  double p = 0.0;
  uint64_t seed = 0;
  bool present() const { return p != 0.0; }
};

}  // namespace attnlab
