#pragma once
// Entry points of the per-target kernels (flash_kernels.cpp), dispatched at run
// time to the best SIMD target this CPU supports.
#include "engine/plan.hpp"

namespace attnlab::engine {

void flash_forward(const Plan& p, TensorView<float> out, TensorView<float> lse, const RowDiagnostics* diag);
void flash_backward(const Plan& p, ConstView<float> out, ConstView<float> lse, ConstView<float> grad_out,
                    TensorView<float> dq, TensorView<float> dk, TensorView<float> dv);
const char* flash_target_name();  // "AVX3", "AVX2", "EMU128", ...

// Pieces of the kernels, for the microbenchmarks (bench/micro/bench_engine.cpp):
// the register-blocked product C (+)= A·B (gemm-inl.h; N a multiple of 16), and
// exp over n floats in place (n a multiple of 16), and the forward's softmax
// step: `steps` times, the scores s [rows × kBc, nc used] turned into
// probabilities with the running max and sum updated (s gets the last result).
void gemm_piece(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B, size_t b_rs,
                float* C, size_t c_rs, bool accumulate);
void exp_piece(float* x, size_t n);
void softmax_piece(float* s, int64_t rows, int64_t nc, int64_t steps);

}  // namespace attnlab::engine
