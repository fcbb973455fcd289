#pragma once
// Entry point of the decode path's per-target kernels (decode_kernels.cpp; when it
// runs: decode_path.hpp), dispatched at run time to the best SIMD target.
#include "engine/plan.hpp"

namespace attnlab::engine {

// The forward without diagnostics: out [B, Hq, Nq, dv] and lse [B, Hq, Nq, 1].
void decode_forward(const Plan& p, TensorView<float> out, TensorView<float> lse);

}  // namespace attnlab::engine
