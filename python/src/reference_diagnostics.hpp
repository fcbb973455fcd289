#pragma once
// Per-row softmax diagnostics for float64 calls. The float32 engine computes
// them inside its fused forward (attnlab/engine.hpp, RowDiagnostics); the
// double reference does not, so the bindings recompute each row's
// probabilities P_ij = exp(S_ij − L_i) from the reference's lse, with the same
// visibility rules (src/core/attention_checks.hpp) and the closed forms of
// attnlab/softmax.hpp. Same definitions as the engine's: a fully masked row gets 0.
#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::python {

struct ReferenceDiagnostics {
  TensorView<double> max_prob;         // [B, Hq, Nq, 1] largest probability of the row
  TensorView<double> entropy;          // [B, Hq, Nq, 1] −Σ p log p (nats)
  TensorView<double> jacobian_fro_sq;  // [B, Hq, Nq, 1] ‖diag(p) − p pᵀ‖_F²
};

// q [B, Hq, Nq, d], k [B, Hkv, Nk, d], lse [B, Hq, Nq, 1] from reference::attention_forward
// on the same arguments (which has already validated them).
void reference_row_diagnostics(ConstView<double> q, ConstView<double> k, ConstView<double> lse,
                               const AttentionOptions<double>& options, const ReferenceDiagnostics& out);

}  // namespace attnlab::python
