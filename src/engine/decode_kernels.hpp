#pragma once
// Entry point of the decode path's per-target kernels (decode_kernels.cpp; when it
// runs: decode_path.hpp), dispatched at run time to the best SIMD target.
#include "engine/decode_strategy.hpp"
#include "engine/plan.hpp"

namespace attnlab::engine {

// The forward without diagnostics: out [B, Hq, Nq, dv] and lse [B, Hq, Nq, 1]. With
// options.check_finite, returns true if K or V may hold a NaN or ±inf (a non-finite
// score or output was met, or one in the keys no row sees): the caller then checks
// their values; false means they are all finite. Without it, returns false.
bool decode_forward(const Plan& p, TensorView<float> out, TensorView<float> lse);

// The strategy a decode call of shape c takes on this CPU's best target (the library's
// switches, or a test probe's).
DecodeStrategy decode_strategy_for(const DecodeShape& c);

}  // namespace attnlab::engine
