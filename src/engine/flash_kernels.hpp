#pragma once
// Entry points of the per-target kernels (flash_kernels.cpp), dispatched at run
// time to the best SIMD target this CPU supports.
#include "engine/plan.hpp"

namespace attnlab::engine {

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag);
// dsinks: [Hq] when p.sinks and the caller asked for it, else nullptr.
void flash_backward(const Plan& p, ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, float* dsinks);
const char* flash_target_name();  // "AVX3", "AVX2", "EMU128", ...

}  // namespace attnlab::engine
