// OpenBLAS opened on first use (attnlab/blas.hpp). <cblas.h> gives the functions' types
// and constants only: nothing here links against the library.
#include "attnlab/blas.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <atomic>
#include <fmt/format.h>
#include <mutex>

#include "attnlab/error.hpp"

#ifndef ATTNLAB_OPENBLAS_SONAME
#error "ATTNLAB_OPENBLAS_SONAME must be defined (the build system finds it)"
#endif

namespace attnlab::blas {
namespace {

struct Api {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_num_threads) get_num_threads = nullptr;
};

std::atomic<int> g_threads_when_loaded{0};
std::atomic<bool> g_loaded{false};

template <class F>
F symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (p == nullptr) throw Error(fmt::format("{} has no {}", ATTNLAB_OPENBLAS_SONAME, name));
  return reinterpret_cast<F>(p);
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = dlopen(ATTNLAB_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);  // never closed
    if (handle == nullptr)
      throw Error(fmt::format("cannot load OpenBLAS ({}): {} (install libopenblas0)", ATTNLAB_OPENBLAS_SONAME, dlerror()));
    Api loaded;
    loaded.sgemm = symbol<decltype(&cblas_sgemm)>(handle, "cblas_sgemm");
    loaded.dgemm = symbol<decltype(&cblas_dgemm)>(handle, "cblas_dgemm");
    loaded.set_num_threads = symbol<decltype(&openblas_set_num_threads)>(handle, "openblas_set_num_threads");
    loaded.get_num_threads = symbol<decltype(&openblas_get_num_threads)>(handle, "openblas_get_num_threads");
    if (const int n = g_threads_when_loaded.load(); n > 0) loaded.set_num_threads(n);
    a = loaded;
    g_loaded = true;
  });
  return a;
}

CBLAS_TRANSPOSE cblas(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

}  // namespace

void gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  api().sgemm(CblasRowMajor, cblas(ta), cblas(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* A, int lda, const double* B, int ldb,
          double beta, double* C, int ldc) {
  api().dgemm(CblasRowMajor, cblas(ta), cblas(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

int threads() { return api().get_num_threads(); }
void set_threads(int n) { api().set_num_threads(n); }
void set_threads_when_loaded(int n) { g_threads_when_loaded = n; }
bool loaded() { return g_loaded; }

}  // namespace attnlab::blas
