#pragma once
// Dense row-major matrix products of the training model, through OpenBLAS
// (cblas_sgemm / cblas_dgemm, opened on first use: attnlab/blas.hpp): the
// projections W_q, W_k, W_v, W_o and the
// classifier, forward and backward. Shapes are small (rows = batch·seq ≤ about
// 512, D = 32, d_k ≤ 1024); the attention itself goes through the engine.
//
// Threads: the study trains several runs at once on OpenMP threads, and each run
// calls these from its thread. OpenBLAS's own thread count is process-wide and
// left to the program (the attnlab command line sets 1 at start-up, so that two
// runs do not each ask OpenBLAS's shared worker pool for every core); it changes
// the speed, not the results (see run_study in attnlab/train.hpp).
#include <algorithm>
#include <cstdint>

#include "attnlab/blas.hpp"

namespace attnlab::train::dense {

namespace detail {
inline int blas_int(int64_t x) { return static_cast<int>(x); }  // shapes here are far below 2^31

template <class T>
void gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  blas::gemm(ta, tb, blas_int(m), blas_int(n), blas_int(k), T(1), A, blas_int(lda), B, blas_int(ldb), beta, C,
             blas_int(ldc));
}

// BLAS rejects a leading dimension of 0 (it prints an error and returns), so
// empty products are done here: C is m × n, zeroed unless accumulating.
template <class T>
bool empty_product(int64_t m, int64_t n, int64_t k, T* C, bool accumulate) {
  if (m > 0 && n > 0 && k > 0) return false;
  if (!accumulate && m > 0 && n > 0) std::fill(C, C + m * n, T(0));
  return true;
}
}  // namespace detail

// C[M, N] (+)= A[M, K] · B[K, N]
template <class T>
void matmul(const T* A, const T* B, T* C, int64_t M, int64_t K, int64_t N, bool accumulate) {
  if (detail::empty_product(M, N, K, C, accumulate)) return;
  detail::gemm(blas::Trans::no, blas::Trans::no, M, N, K, A, K, B, N, accumulate ? T(1) : T(0), C, N);
}

// C[K, N] += A[M, K]ᵀ · B[M, N]   (weight gradients: dW += xᵀ dy)
template <class T>
void matmul_at_b_acc(const T* A, const T* B, T* C, int64_t M, int64_t K, int64_t N) {
  if (detail::empty_product(K, N, M, C, true)) return;
  detail::gemm(blas::Trans::yes, blas::Trans::no, K, N, M, A, K, B, N, T(1), C, N);
}

// C[M, K] (+)= A[M, N] · B[K, N]ᵀ   (input gradients: dx = dy Wᵀ)
template <class T>
void matmul_a_bt(const T* A, const T* B, T* C, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (detail::empty_product(M, K, N, C, accumulate)) return;
  detail::gemm(blas::Trans::no, blas::Trans::yes, M, K, N, A, N, B, N, accumulate ? T(1) : T(0), C, K);
}

}  // namespace attnlab::train::dense
