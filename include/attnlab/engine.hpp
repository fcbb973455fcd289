#pragma once
// The fused attention engine: float32, bfloat16 or float16 in and out (16-bit inputs are
// converted to float32 as the kernels load them, everything is accumulated in float32,
// lse is float32, and 16-bit outputs are rounded once at the end), the FlashAttention-2 algorithm
// (online softmax, no N×N buffer), multi-threaded (OpenMP), SIMD (Highway, with the
// target chosen at run time). Same arguments, options, errors and fully-masked-row
// rules as the reference (attnlab/reference.hpp), against which it is tested.
// attnlab::attention_forward / attention_backward (attnlab/attention.hpp) route float
// here; call these directly only to insist on the engine.
#include <span>
#include <string>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/float16.hpp"
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

// bfloat16 and float16: q, k, v, out, grad_out and the gradients of the one type, lse,
// the options (masks, slopes, sinks) and dsinks in float. The results equal the float32
// engine's on the inputs converted to float32, rounded to the type (docs/engine.md).
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

// Frees the working buffers the engine keeps between calls. Each call takes its scratch
// (tiles, packed rows, split-KV partials) from a process-wide cache and gives it back
// when it returns, so that a loop of calls, decoding above all, does not ask the system
// for the same memory every time; the cache holds at most 32 MiB. Safe to call at any
// time, from any thread; calls running meanwhile keep their buffers.
ATTNLAB_API void release_cached_memory();

// The SIMD target the runtime dispatch chose on this machine (e.g. "AVX3", "AVX2", "EMU128").
ATTNLAB_API std::string target_name();

// The last-level cache of CPU 0 in bytes as the engine plans with it (Linux sysfs, else
// sysconf), or 0 if unknown. A decoding step whose K and V are larger cannot find them in
// cache from an earlier call, and reads them as a stream from memory (docs/engine.md,
// "The decision table").
ATTNLAB_API int64_t last_level_cache_bytes();

}  // namespace attnlab::engine
