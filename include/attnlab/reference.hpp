#pragma once
// The oracle: attention computed plainly, in double precision, row by row.
// Everything fast in attnlab is tested against these functions, and these are
// tested against central finite differences and against PyTorch.
//
// Forward, for each query row i (of batch b, head h):
//   S_ij = scale_i q_i·k_j + M_ij  for visible j;  m = max_j S_ij;  l = Σ_j exp(S_ij − m)
//   P_ij = exp(S_ij − m) / l;      O_i = Σ_j P_ij v_j;       L_i = m + log l
// Backward (FlashAttention-2's formulas, here without tiling):
//   P_ij = exp(S_ij − L_i);  dP_ij = dO_i·v_j;  D_i = dO_i·O_i;  dS_ij = P_ij (dP_ij − D_i)
//   dQ_i = scale_i Σ_j dS_ij k_j;  dK_j = Σ_i scale_i dS_ij q_i;  dV_j = Σ_i P_ij dO_i
// With the variants (attention_variants.hpp): S_ij also carries softcap, ALiBi and
// score_mod, and dQ, dK take dS_ij·∂S_ij/∂(scale_i q_i·k_j); the sink joins l and L, and
// dsink_h = −Σ_i exp(sink_h − L_i)·D_i; dropout multiplies P_ij by Z_ij/(1 − p) in O, dV
// and dP (D_i = dO_i·O_i still holds).
// See attention_options.hpp for shapes, masks and the fully masked row.
#include <span>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::reference {

// Writes out [B,Hq,Nq,dv] and lse [B,Hq,Nq,1] and, if given, the per-row diagnostics
// (same definitions as the engine's). Throws attnlab::Error on bad arguments.
ATTNLAB_API void attention_forward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                   const AttentionOptions<double>& options, TensorView<double> out,
                                   TensorView<double> lse, const RowDiagnostics<double>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});  // serial: only its interrupt

// Given the forward's out and lse, and dO, writes dq, dk, dv (overwritten, not accumulated).
ATTNLAB_API void attention_backward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                    ConstView<double> out, ConstView<double> lse, ConstView<double> grad_out,
                                    const AttentionOptions<double>& options, TensorView<double> dq,
                                    TensorView<double> dk, TensorView<double> dv, const ComputeConfig& config = {});
// The same, and with options.sinks also dsinks [Hq] = ∂loss/∂sink_h (overwritten; an
// empty span skips it). Without sinks, dsinks must be empty.
ATTNLAB_API void attention_backward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                    ConstView<double> out, ConstView<double> lse, ConstView<double> grad_out,
                                    const AttentionOptions<double>& options, TensorView<double> dq,
                                    TensorView<double> dk, TensorView<double> dv, const ComputeConfig& config,
                                    std::span<double> dsinks);

// Allocating conveniences (the tests' oracle calls).
ATTNLAB_API AttentionForward<double> attention_forward(ConstView<double> q, ConstView<double> k,
                                                       ConstView<double> v,
                                                       const AttentionOptions<double>& options = {});
ATTNLAB_API AttentionGrads<double> attention_backward(ConstView<double> q, ConstView<double> k,
                                                      ConstView<double> v, const AttentionForward<double>& forward,
                                                      ConstView<double> grad_out,
                                                      const AttentionOptions<double>& options = {});

}  // namespace attnlab::reference
