#pragma once
// The front door: scaled dot-product attention for every element type attnlab has,
// one overload set. float, bfloat16 and float16 (attnlab/float16.hpp) run on the fused
// engine (attnlab/engine.hpp; the 16-bit types compute in float32, with lse, the options
// and dsinks in float), double on
// the double-precision reference (attnlab/reference.hpp); both take the same
// arguments, apply the same rules (attnlab/attention_options.hpp) and throw the same
// errors, so a caller never writes "float → engine, double → reference" itself.
//
//   q [B, Hq, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv]
//   out [B, Hq, Nq, dv], lse [B, Hq, Nq, 1]   (L = m + log l per query row)
//   dq, dk, dv: the shapes of q, k, v
//
// The view-writing forms write into caller memory (no allocation in the API; the
// engine allocates only its tile scratch). The allocating forms return tensors.
#include <span>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab {

ATTNLAB_API void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                   const AttentionOptions<float>& options, TensorView<float> out,
                                   TensorView<float> lse, const RowDiagnostics<float>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});
ATTNLAB_API void attention_forward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                   const AttentionOptions<double>& options, TensorView<double> out,
                                   TensorView<double> lse, const RowDiagnostics<double>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});

// Given the forward's out and lse, and dO, writes dq, dk, dv (overwritten, not accumulated).
ATTNLAB_API void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                    ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                                    const AttentionOptions<float>& options, TensorView<float> dq,
                                    TensorView<float> dk, TensorView<float> dv, const ComputeConfig& config = {});
// The same, and with options.sinks also dsinks [Hq] = ∂loss/∂sink_h (overwritten; an
// empty span skips it). Without sinks, dsinks must be empty.
ATTNLAB_API void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                    ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                                    const AttentionOptions<float>& options, TensorView<float> dq,
                                    TensorView<float> dk, TensorView<float> dv, const ComputeConfig& config,
                                    std::span<float> dsinks);
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

// 16-bit inputs and outputs, lse in float.
ATTNLAB_API void attention_forward(ConstView<bfloat16> q, ConstView<bfloat16> k, ConstView<bfloat16> v,
                                   const AttentionOptions<float>& options, TensorView<bfloat16> out,
                                   TensorView<float> lse, const RowDiagnostics<float>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});
ATTNLAB_API void attention_forward(ConstView<float16> q, ConstView<float16> k, ConstView<float16> v,
                                   const AttentionOptions<float>& options, TensorView<float16> out,
                                   TensorView<float> lse, const RowDiagnostics<float>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});
ATTNLAB_API void attention_backward(ConstView<bfloat16> q, ConstView<bfloat16> k, ConstView<bfloat16> v,
                                    ConstView<bfloat16> out, ConstView<float> lse, ConstView<bfloat16> grad_out,
                                    const AttentionOptions<float>& options, TensorView<bfloat16> dq,
                                    TensorView<bfloat16> dk, TensorView<bfloat16> dv, const ComputeConfig& config = {},
                                    std::span<float> dsinks = {});
ATTNLAB_API void attention_backward(ConstView<float16> q, ConstView<float16> k, ConstView<float16> v,
                                    ConstView<float16> out, ConstView<float> lse, ConstView<float16> grad_out,
                                    const AttentionOptions<float>& options, TensorView<float16> dq,
                                    TensorView<float16> dk, TensorView<float16> dv, const ComputeConfig& config = {},
                                    std::span<float> dsinks = {});

ATTNLAB_API AttentionForward<float> attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                                      const AttentionOptions<float>& options = {},
                                                      const ComputeConfig& config = {});
ATTNLAB_API AttentionForward<double> attention_forward(ConstView<double> q, ConstView<double> k,
                                                       ConstView<double> v,
                                                       const AttentionOptions<double>& options = {},
                                                       const ComputeConfig& config = {});
ATTNLAB_API AttentionGrads<float> attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                                     const AttentionForward<float>& forward,
                                                     ConstView<float> grad_out,
                                                     const AttentionOptions<float>& options = {},
                                                     const ComputeConfig& config = {});
ATTNLAB_API AttentionGrads<double> attention_backward(ConstView<double> q, ConstView<double> k,
                                                      ConstView<double> v, const AttentionForward<double>& forward,
                                                      ConstView<double> grad_out,
                                                      const AttentionOptions<double>& options = {},
                                                      const ComputeConfig& config = {});

}  // namespace attnlab
