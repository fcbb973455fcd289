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
#include <type_traits>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::reference {

// void for double, the reference's one element type; any other stops the compilation at the
// call, with this message.
template <class T>
struct ReferenceElement {
  static_assert(std::is_same_v<T, double>,
                "attnlab::reference computes in double only; float, bfloat16 and float16 run on attnlab::engine "
                "(attnlab::attention_forward routes each type)");
  using returns = void;
};

// Writes outputs.out [B,Hq,Nq,dv], outputs.lse [B,Hq,Nq,1] and, if asked, the per-row
// diagnostics (same definitions as the engine's) and the dropout mask. Throws
// attnlab::Error on bad arguments. Serial: of the config only its interrupt is used.
template <class T>
ATTNLAB_API typename ReferenceElement<T>::returns attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                                    const AttentionOptions<Accum<T>>& options,
                                                                    const ForwardOutputs<T>& outputs,
                                                                    const ComputeConfig& config = {});

// Given the forward's out and lse, and dO, writes dq, dk, dv and, with sinks, dsinks.
template <class T>
ATTNLAB_API typename ReferenceElement<T>::returns attention_backward(
    ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out, ConstView<Accum<T>> lse, ConstView<T> grad_out,
    const AttentionOptions<Accum<T>>& options, const BackwardOutputs<T>& grads, const ComputeConfig& config = {});

}  // namespace attnlab::reference
