#pragma once
// Dense row-major matrix products for the training model, written so that the
// innermost loop runs over contiguous memory (the compiler vectorises it).
// Sizes here are small (D ≤ 64, d_k ≤ 1024, rows = batch·seq ≤ a few thousand).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace attnlab::train::dense {

// C[M, N] (+)= A[M, K] · B[K, N]
// The pointers must not overlap (__restrict lets the compiler keep rows of C in registers).
template <class T>
void matmul(const T* __restrict A, const T* __restrict B, T* __restrict C, int64_t M, int64_t K, int64_t N,
            bool accumulate) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * N;
    if (!accumulate)
      for (int64_t j = 0; j < N; ++j) c[j] = T(0);
    const T* a = A + i * K;
    for (int64_t p = 0; p < K; ++p) {
      const T ap = a[p];
      const T* b = B + p * N;
      for (int64_t j = 0; j < N; ++j) c[j] += ap * b[j];
    }
  }
}

// C[K, N] += A[M, K]ᵀ · B[M, N]   (weight gradients: dW += xᵀ dy)
template <class T>
void matmul_at_b_acc(const T* __restrict A, const T* __restrict B, T* __restrict C, int64_t M, int64_t K, int64_t N) {
  for (int64_t i = 0; i < M; ++i) {
    const T* a = A + i * K;
    const T* b = B + i * N;
    for (int64_t p = 0; p < K; ++p) {
      const T ap = a[p];
      if (ap == T(0)) continue;
      T* c = C + p * N;
      for (int64_t j = 0; j < N; ++j) c[j] += ap * b[j];
    }
  }
}

// C[M, K] (+)= A[M, N] · B[K, N]ᵀ   (input gradients: dx = dy Wᵀ)
// B is transposed into a scratch buffer first so that the product runs as
// matmul's contiguous, vectorisable axpy loop rather than as strided dot products.
template <class T>
void matmul_a_bt(const T* A, const T* B, T* C, int64_t M, int64_t N, int64_t K, bool accumulate) {
  thread_local std::vector<T> bt;  // [N, K]
  bt.resize(static_cast<size_t>(N * K));
  for (int64_t p = 0; p < K; ++p)
    for (int64_t j = 0; j < N; ++j) bt[static_cast<size_t>(j * K + p)] = B[p * N + j];
  matmul(A, bt.data(), C, M, N, K, accumulate);
}

// float overloads (the training path): the same loops compiled twice, for
// x86-64-v3 (AVX2 + FMA) and baseline, chosen at load time (dense.cpp).
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N, bool accumulate);
void matmul_at_b_acc(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N);
void matmul_a_bt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool accumulate);

}  // namespace attnlab::train::dense
