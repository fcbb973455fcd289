#pragma once
// The front door: scaled dot-product attention for every element type attnlab has,
// one function template per verb. float, bfloat16 and float16 (attnlab/float16.hpp) run on the fused
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
// Each writes into caller memory (no allocation in the API; the engine allocates only its
// tile scratch). The library holds the instantiations for float, double, bfloat16 and
// float16; any other element type is a compile-time error (Accumulation, attention_options.hpp).
#include "attnlab/attention_options.hpp"
#include "attnlab/export.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab {

// Writes outputs.out, outputs.lse and, if asked, the diagnostics and the dropout mask.
template <class T>
ATTNLAB_API void attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                   const AttentionOptions<Accum<T>>& options, const ForwardOutputs<T>& outputs,
                                   const ComputeConfig& config = {});

// Given the forward's out and lse, and dO, writes dq, dk, dv and, with sinks, dsinks.
template <class T>
ATTNLAB_API void attention_backward(ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out,
                                    ConstView<Accum<T>> lse, ConstView<T> grad_out,
                                    const AttentionOptions<Accum<T>>& options, const BackwardOutputs<T>& grads,
                                    const ComputeConfig& config = {});

}  // namespace attnlab
