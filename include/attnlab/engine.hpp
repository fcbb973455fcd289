#pragma once
// The fused attention engine: float32 in and out, the FlashAttention-2 algorithm
// (online softmax, no N×N buffer), multi-threaded (OpenMP), SIMD (Highway, with the
// target chosen at run time). Same arguments, options, errors and fully-masked-row
// rules as the reference (attnlab/reference.hpp), against which it is tested.
// attnlab::attention_forward / attention_backward (attnlab/attention.hpp) route float
// here; call these directly only to insist on the engine.
#include <span>
#include <string>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::engine {

ATTNLAB_API void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                   const AttentionOptions<float>& options, TensorView<float> out,
                                   TensorView<float> lse, const RowDiagnostics<float>* diagnostics = nullptr,
                                   const ComputeConfig& config = {});

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

// The SIMD target the runtime dispatch chose on this machine (e.g. "AVX3", "AVX2", "EMU128").
ATTNLAB_API std::string target_name();

}  // namespace attnlab::engine
