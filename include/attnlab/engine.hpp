#pragma once
// The fused attention engine: float32, bfloat16 or float16 in and out (16-bit inputs are
// converted to float32 as the kernels load them, everything is accumulated in float32,
// lse is float32, and 16-bit outputs are rounded once at the end), the FlashAttention-2 algorithm
// (online softmax, no N×N buffer), multi-threaded (OpenMP), SIMD (Highway, with the
// target chosen at run time). Same arguments, options, errors and fully-masked-row
// rules as the reference (attnlab/reference.hpp), against which it is tested.
// attnlab::attention_forward / attention_backward (attnlab/attention.hpp) route float
// here; call these directly only to insist on the engine.
#include <string>
#include <type_traits>

#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::engine {

// void for the element types the engine is compiled for; any other stops the compilation
// at the call, with this message.
template <class T>
struct EngineElement {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>,
                "attnlab::engine computes float, bfloat16 and float16; double runs on attnlab::reference "
                "(attnlab::attention_forward routes each type)");
  using returns = void;
};

// As attnlab::attention_forward / attention_backward (attnlab/attention.hpp). For bfloat16
// and float16, q, k, v, out, grad_out and the gradients are of the one type; lse, the
// options (masks, slopes, sinks) and dsinks are float (Accum). The results equal the float32
// engine's on the inputs converted to float32, rounded to the type (docs/engine.md).
template <class T>
ATTNLAB_API typename EngineElement<T>::returns attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                                 const AttentionOptions<Accum<T>>& options,
                                                                 const ForwardOutputs<T>& outputs,
                                                                 const ComputeConfig& config = {});
template <class T>
ATTNLAB_API typename EngineElement<T>::returns attention_backward(
    ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out, ConstView<Accum<T>> lse, ConstView<T> grad_out,
    const AttentionOptions<Accum<T>>& options, const BackwardOutputs<T>& grads, const ComputeConfig& config = {});

// Frees the working buffers the engine keeps between calls. Each call takes its scratch
// (tiles, packed rows, split-KV partials) from a process-wide cache and gives it back
// when it returns, so that a loop of calls, decoding above all, does not ask the system
// for the same memory every time; the cache holds at most 32 MiB. Safe to call at any
// time, from any thread; calls running meanwhile keep their buffers.
ATTNLAB_API void release_cached_memory();

// The SIMD target the runtime dispatch chose on this machine (e.g. "AVX3", "AVX2", "EMU128").
ATTNLAB_API std::string target_name();

// The last-level cache of CPU 0 in bytes as the engine plans with it (Linux sysfs, else the
// CPU's own description through CPUID, else sysconf), at most 48 MiB per core the process may
// run on (a guest's sysconf can report the host's whole L3), or 0 if unknown. A decoding step whose K and V are larger cannot find them in
// cache from an earlier call, and reads them as a stream from memory (docs/engine.md,
// "The decision table").
ATTNLAB_API int64_t last_level_cache_bytes();

}  // namespace attnlab::engine
