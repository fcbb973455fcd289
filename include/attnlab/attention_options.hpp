#pragma once
// What an attention call may be asked to do, shared by the double-precision
// reference (attnlab/reference.hpp) and the fused engine (attnlab/engine.hpp).
//
// Shapes (the same names are used throughout attnlab):
//   q    [B, Hq,  Nq, d ]      out  [B, Hq, Nq, dv]
//   k    [B, Hkv, Nk, d ]      lse  [B, Hq, Nq, 1 ]   L = m + log l per query row
//   v    [B, Hkv, Nk, dv]
// Hq must be a multiple of Hkv: query head h reads key/value head h / (Hq/Hkv)
// (grouped-query attention; Hkv = 1 is multi-query attention).
//
// The score of query i and key j is
//   S_ij = scale_i · q_i·k_j + additive_mask_ij
// where key j is *visible* to row i unless causality, key padding or the boolean
// mask removes it. A row with no visible key (or whose visible scores are all
// −inf) is "fully masked": its output is 0, its L is −inf and it passes back
// zero gradients. Never NaN.
#include <cstdint>
#include <functional>
#include <span>

#include "attnlab/export.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab {

// Causal masking, in the two conventions found in the field. They differ only when Nq ≠ Nk.
enum class Causal {
  none,
  // Row i sees keys j ≤ i: the mask is aligned to the top-left corner of the
  // Nq×Nk score matrix. PyTorch's `is_causal=True` (torch.ones(Nq, Nk).tril()).
  top_left,
  // Row i sees keys j ≤ i + (n_keys − Nq): aligned to the bottom-right corner, so
  // the last query sees every key. FlashAttention-2's causal mode and KV-cache
  // decoding (new queries come after the cached keys). n_keys is the batch's
  // key length: key_lengths[b] when padding is given, else Nk.
  bottom_right,
};

template <class T>
struct AttentionOptions {
  ScalePolicy scale{};           // default 1/√d
  Causal causal = Causal::none;
  // Boolean mask, nonzero = attend (PyTorch's convention). Shape [B|1, Hq|1, Nq, Nk]:
  // a size-1 batch or head axis is broadcast. Absent when default-constructed.
  ConstView<uint8_t> bool_mask{};
  // Additive mask added to the scaled scores (−inf removes a key). Same shape rule.
  ConstView<T> additive_mask{};
  // Key padding: for batch b only keys j < key_lengths[b] exist. Empty = no padding.
  std::span<const int64_t> key_lengths{};
  // Reject NaN/±inf in q, k, v (and dO) with an Error naming the first bad index.
  // Turn off only when the caller has already checked: the cost is one pass over the inputs.
  bool check_finite = true;
};

template <class T>
struct AttentionForward {
  Tensor<T> out;  // [B, Hq, Nq, dv]
  Tensor<T> lse;  // [B, Hq, Nq, 1]
};

template <class T>
struct AttentionGrads {
  Tensor<T> dq;  // [B, Hq,  Nq, d ]
  Tensor<T> dk;  // [B, Hkv, Nk, d ]  heads sharing a K/V head sum their gradients
  Tensor<T> dv;  // [B, Hkv, Nk, dv]
};

// Optional per-row diagnostics of the softmax, computed by the same forward pass.
// Each present view has shape [B, Hq, Nq, 1]; an absent (default) view is skipped.
// A fully masked row gets 0 in each.
template <class T>
struct RowDiagnostics {
  TensorView<T> max_prob;         // largest probability of the row
  TensorView<T> entropy;          // −Σ p log p (nats), attnlab::entropy
  TensorView<T> jacobian_fro_sq;  // ‖diag(p) − p pᵀ‖_F², attnlab::jacobian_frobenius_sq
};

// How a call runs (never what it computes: results are bitwise identical for any value).
struct ComputeConfig {
  // OpenMP threads for the engine; 0 = OpenMP's default (all cores). The reference is serial.
  // At most kMaxThreads (check_threads): far more makes libgomp crash while creating them.
  int threads = 0;
  // Asked, now and then, whether to stop: between tiles by the engine (on the calling
  // thread, at most every 10 ms), between rows by the reference. Returning true ends the
  // call with attnlab::Interrupted. Empty: never asked. Python's bindings poll for Ctrl-C here.
  std::function<bool()> interrupt;
};

// The largest thread count accepted anywhere (API, CLI, Python): more threads than
// any machine has cores gain nothing, and tens of thousands crash libgomp.
inline constexpr int kMaxThreads = 1024;

// Throws Error unless 0 <= threads <= kMaxThreads; `what` names the argument in the message.
ATTNLAB_API void check_threads(int threads, const char* what = "threads");

ATTNLAB_API const char* to_string(Causal causal);
ATTNLAB_API Causal parse_causal(const char* text);  // "none" | "top_left" | "bottom_right"; throws Error

}  // namespace attnlab
