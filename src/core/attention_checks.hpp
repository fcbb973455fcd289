#pragma once
// Argument validation shared by every attention implementation (reference and
// engine), so both accept exactly the same calls and fail with exactly the same
// messages. Which keys a row sees is core/visibility.hpp.
#include <cstdint>
#include <span>
#include <string>

#include "attnlab/attention_options.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"
#include "core/visibility.hpp"

namespace attnlab::detail {


// Which input values check_forward_args checks when options.check_finite is set: all
// of them (q, k, v, then the additive mask), or q only, the caller checking the rest
// after its kernel with check_deferred_values (the engine's decode path reads k and v
// once, and looks for non-finite values as it goes rather than in a pass of its own).
enum class ValueChecks { all, q_only };

// The options' own rules (window, softcap, ALiBi slopes and sinks: count and finite values,
// packed sequences, dropout_p, block_mask) for a problem of dims d. Part of
// check_forward_args; called alone by a path that takes its shapes from elsewhere (the KV
// cache's), so that every path refuses the same options with the same words.
template <class T>
void check_variants(const AttentionOptions<T>& options, const AttentionDims& d);

// Validate shapes, strides, masks, padding, aliasing and (if options.check_finite)
// the values of q, k, v. Throws attnlab::Error. E is the element type of the tensors
// (float, double, bfloat16, float16), T that of the options and lse (float for the
// 16-bit types, which the engine computes in float32).
template <class E, class T>
AttentionDims check_forward_args(ConstView<E> q, ConstView<E> k, ConstView<E> v,
                                 const AttentionOptions<T>& options,
                                 TensorView<E> out, TensorView<T> lse, ValueChecks values = ValueChecks::all);

// The value checks that ValueChecks::q_only left to the caller, in check_forward_args's
// order (k, v, the additive mask; nothing without options.check_finite). k_and_v = false
// when the caller has established that k and v are finite.
template <class E, class T>
void check_deferred_values(ConstView<E> k, ConstView<E> v, const AttentionOptions<T>& options, bool k_and_v);

// dsinks: empty, or [Hq] when options.sinks is given.
template <class E, class T>
AttentionDims check_backward_args(ConstView<E> q, ConstView<E> k, ConstView<E> v,
                                  ConstView<E> out, ConstView<T> lse, ConstView<E> grad_out,
                                  const AttentionOptions<T>& options,
                                  TensorView<E> dq, TensorView<E> dk, TensorView<E> dv,
                                  std::span<T> dsinks = {});

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

// ForwardOutputs::dropout_mask: absent, or [B, Hq, Nq, Nk] with distinct elements.
void check_dropout_mask(TensorView<uint8_t> mask, const AttentionDims& dims);

// Throws "NAME: non-finite value nan at [b, h, i, j]" for the first NaN/±inf.
template <class T>
void check_finite(ConstView<T> x, const char* name);

// After a computation on finite inputs: a non-finite output means an
// intermediate overflowed the type (for float: |dO·v|, Σ p·v or |S| beyond
// 3.4e38; for float16 a result beyond 65504). Throws "attention: NAME overflows
// <type> at [b, h, i, j] (...)".
template <class T>
void check_result_finite(ConstView<T> x, const char* name);

}  // namespace attnlab::detail
