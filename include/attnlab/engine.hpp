#pragma once
// The fused attention engine: float32 in and out, the FlashAttention-2
// algorithm (online softmax, no N×N buffer), multi-threaded, SIMD.
// Same arguments, options, errors and fully-masked-row rules as the reference
// (attnlab/reference.hpp, attnlab/attention_options.hpp), against which it is tested.
#include <string>

#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab {

struct EngineConfig {
  int threads = 0;  // 0: all available cores (OpenMP's default); results are bitwise identical for any count
};

// Optional per-row diagnostics of the softmax, from the same fused forward.
// Each present view has shape [B, Hq, Nq, 1]. A fully masked row gets 0 in each.
struct RowDiagnostics {
  TensorView<float> max_prob;         // largest probability of the row
  TensorView<float> entropy;          // −Σ p log p (nats)
  TensorView<float> jacobian_fro_sq;  // ‖diag(p) − p pᵀ‖_F²
};

void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                       const AttentionOptions<float>& options, TensorView<float> out, TensorView<float> lse,
                       const RowDiagnostics* diagnostics = nullptr, const EngineConfig& config = {});

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv,
                        const EngineConfig& config = {});

AttentionForward<float> attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                          const AttentionOptions<float>& options = {},
                                          const EngineConfig& config = {});
AttentionGrads<float> attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                         const AttentionForward<float>& forward, ConstView<float> grad_out,
                                         const AttentionOptions<float>& options = {},
                                         const EngineConfig& config = {});

// The SIMD target the runtime dispatch chose on this machine (e.g. "AVX3", "AVX2", "EMU128").
std::string engine_target();

}  // namespace attnlab
