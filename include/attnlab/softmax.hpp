#pragma once
// Exact softmax maths on one vector, for float and double.
//
//   s = softmax(x),  s_i = exp(x_i - max x) / sum_j exp(x_j - max x)
//   J = ds/dx = diag(s) - s s^T        (symmetric, rows sum to 0, PSD)
//   vjp:  g_x = J^T g = s .* (g - <g, s>)
//   jvp:  J v   = s .* (v - <v, s>)    (the same formula: J is symmetric)
//
// Inputs may hold -inf (that entry gets probability 0) and huge finite values
// (±1e30 are handled exactly: the max is subtracted first). NaN and +inf are
// rejected with attnlab::Error naming the index. A vector whose entries are all
// -inf has no distribution: softmax returns all zeros, logsumexp returns -inf,
// log_softmax returns all -inf, matching attention's fully masked rows.
// Float inputs are reduced in double, so both precisions are correctly rounded
// to within a few ulps.
#include <cstdint>
#include <span>

#include "attnlab/export.hpp"

namespace attnlab {

template <class T> ATTNLAB_API void softmax(std::span<const T> x, std::span<T> s);
template <class T> ATTNLAB_API void log_softmax(std::span<const T> x, std::span<T> out);
template <class T> ATTNLAB_API T logsumexp(std::span<const T> x);

// J as a row-major n×n matrix: J[i*n + j] = s_i (δ_ij − s_j).
template <class T> ATTNLAB_API void softmax_jacobian(std::span<const T> s, std::span<T> jacobian);
// Jᵀ g = s ⊙ (g − ⟨g, s⟩): back-propagation through softmax, O(n), J never formed.
template <class T> ATTNLAB_API void softmax_vjp(std::span<const T> s, std::span<const T> g, std::span<T> grad_x);
// J v, the forward-mode derivative (equal to the VJP formula because J = Jᵀ).
template <class T> ATTNLAB_API void softmax_jvp(std::span<const T> s, std::span<const T> v, std::span<T> jv);

// Softmax cross-entropy with an integer class: loss = logsumexp(x) − x_target.
// If grad is non-empty it receives ∂loss/∂x = softmax(x) − onehot(target).
template <class T> ATTNLAB_API T softmax_cross_entropy(std::span<const T> logits, int64_t target, std::span<T> grad = {});
// With a target distribution y (non-negative): loss = −Σ y_i log s_i,
// gradient s·Σy − y (= s − y when y sums to 1).
template <class T> ATTNLAB_API T softmax_cross_entropy(std::span<const T> logits, std::span<const T> target, std::span<T> grad = {});

// Closed forms on a probability vector s (the lab's diagnostics):
template <class T> ATTNLAB_API T entropy(std::span<const T> s);                   // −Σ s log s, 0 log 0 = 0
template <class T> ATTNLAB_API T jacobian_trace(std::span<const T> s);            // tr J = 1 − ‖s‖₂²
template <class T> ATTNLAB_API T jacobian_frobenius_sq(std::span<const T> s);     // ‖J‖_F² = ‖s‖₂² − 2‖s‖₃³ + ‖s‖₂⁴

}  // namespace attnlab
