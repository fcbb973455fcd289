#pragma once
// Entry point of the decode path's per-target kernels (decode_kernels.cpp; when it
// runs: decode_path.hpp), dispatched at run time to the best SIMD target.
#include "engine/plan.hpp"

namespace attnlab::engine {

// The forward without diagnostics: out [B, Hq, Nq, dv] and lse [B, Hq, Nq, 1]. With
// options.check_finite, returns true if K or V may hold a NaN or ±inf (a non-finite
// score or output was met, or one in the keys no row sees): the caller then checks
// their values; false means they are all finite. Without it, returns false.
bool decode_forward(const Plan& p, TensorView<float> out, TensorView<float> lse);

}  // namespace attnlab::engine
