#pragma once
// OpenBLAS, opened on first use (dlopen of its soname), for the applications that need
// dense products: the training study (train/dense.hpp) and `attnlab bench`'s openblas
// peer. A program that never multiplies a matrix this way (`attnlab --version`,
// `attnlab attention`, `import attnlab`) never loads OpenBLAS nor starts its threads
// (Debian's OpenBLAS starts them when loaded, and under a memory limit they could spin at
// exit). Throws attnlab::Error naming the library if it cannot be loaded.
namespace attnlab::blas {

enum class Trans { no, yes };

// C = alpha·op(A)·op(B) + beta·C, row-major (cblas_sgemm / cblas_dgemm).
void gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc);
void gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* A, int lda, const double* B, int ldb,
          double beta, double* C, int ldc);

// OpenBLAS's process-wide thread count (loads it).
int threads();
void set_threads(int n);

// The thread count OpenBLAS gets when this process loads it (a program's choice, made
// before any use; 0: OpenBLAS's own default). Does not load it.
void set_threads_when_loaded(int n);

// True if this process has loaded it through this interface.
bool loaded();

}  // namespace attnlab::blas
