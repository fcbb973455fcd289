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
// where key j is *visible* to row i unless causality, key padding, the boolean
// mask, a sliding window, a sequence boundary (packed sequences) or mask_mod removes
// it. A row with no visible key (or whose visible scores are all −inf) is "fully
// masked": its output is 0, its L is −inf (sink_h with sinks) and it passes back zero
// gradients. Never NaN. Softcap, ALiBi, sinks, dropout, packed sequences and the
// programmable masks and scores are described in attention_variants.hpp and
// score_mod.hpp; every option combines with every other.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <type_traits>

#include "attnlab/attention_variants.hpp"
#include "attnlab/export.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/score_mod.hpp"
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

  // Where the call sits in a longer sequence: causality, the window and ALiBi read row i as
  // row query_offset + i and key j as key key_offset + j (n_keys and Nq stay the call's), so
  // the blocks of a sequence cut into pieces (context parallelism, chunked prefill) keep its
  // masks. A block [r0, r0 + Nq) × [c0, c0 + Nk) of a call [Nq', Nk'] with the same Nk − Nq
  // takes (r0, c0). Otherwise the bottom-right diagonal (bottom_right, window, ALiBi) needs the
  // difference (Nk' − Nq') − (Nk − Nq) added to query_offset − key_offset, and top_left (which has
  // no Nk − Nq term) does not: such a block can keep one or the other, not both.
  // Non-negative, at most 2^53; 0, 0 = the call is the whole sequence. Not with packed sequences.
  int64_t query_offset = 0;
  int64_t key_offset = 0;

  // ---- variants (attention_variants.hpp: semantics, order and sources) ----
  // Sliding window (left, right) around each row's bottom-right diagonal; (−1, −1) = none.
  Window window{};
  // Logit softcap c > 0: s ← c·tanh(s/c) after the scale. Empty = none; c ≤ 0 or NaN is an error.
  std::optional<double> softcap{};
  // ALiBi slopes: [Hq] (one per query head) or [n_seq · Hq] (per batch entry, or per packed
  // sequence, and head, row-major). s ← s − slope·|diag_i − j|. Empty = none.
  std::span<const T> alibi_slopes{};
  // Attention sinks, [Hq]: one extra logit per query head in every row's softmax, with no
  // value row. Its gradient comes from attention_backward's dsinks. Empty = none.
  std::span<const T> sinks{};
  // Packed variable-length sequences (FlashAttention's varlen): q [1, Hq, total_q, d], k and
  // v [1, Hkv, total_k, ·]; sequence s is query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and
  // keys [cu_seqlens_k[s], cu_seqlens_k[s+1]). Both of n_seq + 1 entries, starting at 0,
  // non-decreasing, ending at total_q and total_k. Attention never crosses a sequence;
  // causality, the window and ALiBi apply within each. Empty = one sequence per batch entry.
  std::span<const int64_t> cu_seqlens_q{};
  std::span<const int64_t> cu_seqlens_k{};
  // Dropout on the probabilities (p, seed), PyTorch's semantics. p = 0 = none.
  Dropout dropout{};
  // Programmable mask and score (score_mod.hpp); not owned, must outlive the call.
  const MaskMod* mask_mod = nullptr;
  const ScoreMod* score_mod = nullptr;
  // mask_mod's tiles classified once (BlockMask::build); null = the engine classifies per call.
  const BlockMask* block_mask = nullptr;
};

// The element types attention takes, and the type each accumulates, reports and takes its
// options in: double for double, float for float, bfloat16 and float16 (16-bit inputs are
// computed in float32). Any other T stops the compilation here, with this message.
template <class T>
struct Accumulation {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, float16>,
                "attnlab: attention takes float, double, bfloat16 or float16 elements");
  using type = std::conditional_t<std::is_same_v<T, double>, double, float>;
};
template <class T>
using Accum = typename Accumulation<T>::type;

// Optional per-row diagnostics of the softmax, computed by the same forward pass.
// Each present view has shape [B, Hq, Nq, 1]; an absent (default) view is skipped.
// A fully masked row gets 0 in each.
template <class T>
struct RowDiagnostics {
  TensorView<T> max_prob;         // largest probability of the row
  TensorView<T> entropy;          // −Σ p log p (nats), attnlab::entropy
  TensorView<T> jacobian_fro_sq;  // ‖diag(p) − p pᵀ‖_F², attnlab::jacobian_frobenius_sq
};

// What a forward writes (caller memory, overwritten). out and lse always; the rest if asked.
template <class T>
struct ForwardOutputs {
  TensorView<T> out;         // [B, Hq, Nq, dv]
  TensorView<Accum<T>> lse;  // [B, Hq, Nq, 1]   L = m + log l per query row
  // The softmax's per-row diagnostics (the engine takes its tiled path when they are asked).
  std::optional<RowDiagnostics<Accum<T>>> diagnostics{};
  // [B, Hq, Nq, Nk] if present: the dropout mask the forward applied, 1 where key j entered
  // row i's softmax (visible, with a score above −inf) and was kept, 0 where it was dropped
  // or did not enter.
  TensorView<uint8_t> dropout_mask{};
};

// What a backward writes (caller memory, overwritten, not accumulated).
template <class T>
struct BackwardOutputs {
  TensorView<T> dq;  // [B, Hq,  Nq, d ]
  TensorView<T> dk;  // [B, Hkv, Nk, d ]  heads sharing a K/V head sum their gradients
  TensorView<T> dv;  // [B, Hkv, Nk, dv]
  // [Hq] = ∂loss/∂sink_h, with options.sinks (empty skips it); without sinks it must be empty.
  std::span<Accum<T>> dsinks{};
};

// How a call runs (never what it computes: results are bitwise identical for any value).
struct ComputeConfig {
  // OpenMP threads for the engine; 0 = OpenMP's default (all cores, or OMP_NUM_THREADS),
  // clamped to kMaxThreads. The reference is serial. See team_size for the rule.
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

// The OpenMP team a call runs with: `threads` as the caller gave it (check_threads), or
// for 0 OpenMP's default (omp_get_max_threads()) clamped to [1, kMaxThreads]. The team's
// threads are first created and joined (libgomp exits the process when it cannot create
// one): if they cannot all be, a count the caller gave is an OutOfMemory error naming the
// cause, and the default shrinks to what could be created.
ATTNLAB_API int team_size(int threads, const char* what = "threads");

ATTNLAB_API const char* to_string(Causal causal);
ATTNLAB_API Causal parse_causal(const char* text);  // "none" | "top_left" | "bottom_right"; throws Error

}  // namespace attnlab
