#pragma once
// Entry points of the per-target tiled kernels (flash_forward_kernels.cpp,
// flash_backward_kernels.cpp), dispatched at run time to the best SIMD target this CPU supports.
#include "engine/plan.hpp"

namespace attnlab::engine {

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics<float>* diag);
// dsinks: [Hq] when p.sinks and the caller asked for it, else nullptr. out and grad_out are
// of the element type of q, k, v; the gradients are float (16-bit ones are rounded by the caller).
void flash_backward(const Plan& p, const Operand& out, ConstView<float> lse, const Operand& grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, float* dsinks);
const char* flash_target_name();  // "AVX3", "AVX2", "EMU128", ...

}  // namespace attnlab::engine
