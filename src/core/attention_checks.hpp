#pragma once
// Argument validation and per-row visibility shared by every attention
// implementation (reference and engine), so both accept exactly the same calls
// and fail with exactly the same messages.
#include <algorithm>
#include <cstdint>
#include <string>

#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::detail {

struct AttentionDims {
  int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nk = 0, d = 0, dv = 0;
  int64_t group() const { return Hq / Hkv; }  // query heads per key/value head
};

// Validate shapes, strides, masks, padding, aliasing and (if options.check_finite)
// the values of q, k, v. Throws attnlab::Error.
template <class T>
AttentionDims check_forward_args(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                 const AttentionOptions<T>& options,
                                 TensorView<T> out, TensorView<T> lse);

template <class T>
AttentionDims check_backward_args(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                  ConstView<T> out, ConstView<T> lse, ConstView<T> grad_out,
                                  const AttentionOptions<T>& options,
                                  TensorView<T> dq, TensorView<T> dk, TensorView<T> dv);

// A per-row output such as a diagnostic: absent, or [B, Hq, Nq, 1] with
// non-negative strides. Throws "NAME: shape ... should be ..." otherwise.
template <class T>
void check_row_output(const TensorView<T>& x, const AttentionDims& dims, const char* name);

// The three per-row diagnostics of the engine's or the reference's RowDiagnostics.
template <class Diagnostics>
void check_diagnostics(const Diagnostics& diag, const AttentionDims& dims) {
  check_row_output(diag.max_prob, dims, "diagnostics.max_prob");
  check_row_output(diag.entropy, dims, "diagnostics.entropy");
  check_row_output(diag.jacobian_fro_sq, dims, "diagnostics.jacobian_fro_sq");
}

// Throws "NAME: non-finite value nan at [b, h, i, j]" for the first NaN/±inf.
template <class T>
void check_finite(ConstView<T> x, const char* name);

// After a computation on finite inputs: a non-finite output means an
// intermediate overflowed the type (for float: |dO·v|, Σ p·v or |S| beyond
// 3.4e38). Throws "attention: NAME overflows <type> at [b, h, i, j] (...)".
template <class T>
void check_result_finite(ConstView<T> x, const char* name);

// Keys visible to row i of batch b by causality and padding alone form the
// prefix [0, key_end): everything at or past key_end is masked for this row.
template <class T>
inline int64_t key_end(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t i) {
  const int64_t n_keys = options.key_lengths.empty() ? dims.Nk : options.key_lengths[static_cast<size_t>(b)];
  int64_t end = n_keys;
  if (options.causal == Causal::top_left) end = std::min(end, i + 1);
  if (options.causal == Causal::bottom_right) end = std::min(end, i + (n_keys - dims.Nq) + 1);
  return std::max<int64_t>(end, 0);
}

// The mask row [b, h, i, :] with broadcasting over size-1 batch/head axes, or
// nullptr when the mask is absent. Elements are mask.stride(kDim) apart.
template <class M>
inline const M* mask_row(ConstView<M> mask, int64_t b, int64_t h, int64_t i) {
  if (!mask.present()) return nullptr;
  return mask.row(mask.batch() == 1 ? 0 : b, mask.heads() == 1 ? 0 : h, i);
}

// Number of keys row i may see (causality, padding and the boolean mask): the n
// of the log-n-aware scale policies.
template <class T>
inline int64_t visible_keys(const AttentionDims& dims, const AttentionOptions<T>& options,
                            int64_t b, int64_t h, int64_t i) {
  const int64_t end = key_end(dims, options, b, i);
  const uint8_t* bm = mask_row(options.bool_mask, b, h, i);
  if (bm == nullptr) return end;
  const int64_t st = options.bool_mask.stride(kDim);
  int64_t n = 0;
  for (int64_t j = 0; j < end; ++j) n += bm[j * st] != 0;
  return n;
}

}  // namespace attnlab::detail
