// float kernels of the training path. Each keeps a 64-wide strip of the output in
// a local accumulator (8 AVX registers) across the whole reduction, instead of
// loading and storing the output row once per reduction step; compiled for
// x86-64-v3 (AVX2 + FMA) and baseline, chosen at load time by CPU features
// ("arch=haswell" would dispatch on the CPU model, and so never on AMD). Results equal the
// plain loops of dense.hpp up to the order of float additions.
#include "train/dense.hpp"

#include <algorithm>

namespace attnlab::train::dense {

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNLAB_TRAIN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ATTNLAB_TRAIN_CLONES
#endif

namespace {

// 8 floats; unaligned (aligned(4)) so it can load from any float*, and may_alias
// because it reads and writes memory whose declared type is float.
typedef float v8 __attribute__((vector_size(32), aligned(4), may_alias));

// c[0..8V) += Σ_r x_r · b_r[0..8V) over `count` pairs: x_r = xs[r·x_stride], b_r = bs + r·b_stride.
// The V accumulators are a fixed-size array of vectors the compiler keeps in registers.
template <int V>
inline __attribute__((always_inline)) void strip(float* __restrict c, const float* __restrict xs, int64_t x_stride,
                                                 const float* __restrict bs, int64_t b_stride, int64_t count) {
  v8 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = *reinterpret_cast<const v8*>(c + 8 * v);
  for (int64_t r = 0; r < count; ++r) {
    const float x = xs[r * x_stride];
    const float* b = bs + r * b_stride;
    for (int v = 0; v < V; ++v) acc[v] += x * *reinterpret_cast<const v8*>(b + 8 * v);
  }
  for (int v = 0; v < V; ++v) *reinterpret_cast<v8*>(c + 8 * v) = acc[v];
}

// The same for a strip narrower than 64 (the right edge), plainly.
inline void strip_tail(float* __restrict c, int64_t w, const float* __restrict xs, int64_t x_stride,
                       const float* __restrict bs, int64_t b_stride, int64_t count) {
  for (int64_t r = 0; r < count; ++r) {
    const float x = xs[r * x_stride];
    const float* b = bs + r * b_stride;
    for (int64_t j = 0; j < w; ++j) c[j] += x * b[j];
  }
}

// One row of output columns [0, N): 64-wide strips, then one 32-wide strip, then the rest plainly.
inline __attribute__((always_inline)) void row(float* __restrict c, int64_t N, const float* __restrict xs, int64_t x_stride,
                const float* __restrict bs, int64_t b_stride, int64_t count) {
  int64_t j0 = 0;
  for (; j0 + 64 <= N; j0 += 64) strip<8>(c + j0, xs, x_stride, bs + j0, b_stride, count);
  if (j0 + 32 <= N) {
    strip<4>(c + j0, xs, x_stride, bs + j0, b_stride, count);
    j0 += 32;
  }
  if (j0 < N) strip_tail(c + j0, N - j0, xs, x_stride, bs + j0, b_stride, count);
}

}  // namespace

// Cache blocking: a block of B of kBlock rows × 64 columns (16 KB) stays in L1
// while every row of A passes over it.
constexpr int64_t kBlock = 64;

// C[M, N] (+)= A[M, K] · B[K, N]
ATTNLAB_TRAIN_CLONES void matmul(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N,
                                 bool accumulate) {
  if (!accumulate) std::fill(C, C + M * N, 0.0f);
  for (int64_t p0 = 0; p0 < K; p0 += kBlock) {
    const int64_t kc = std::min(kBlock, K - p0);
    for (int64_t j0 = 0; j0 < N; j0 += 64) {
      const int64_t w = std::min<int64_t>(64, N - j0);
      for (int64_t i = 0; i < M; ++i) row(C + i * N + j0, w, A + i * K + p0, 1, B + p0 * N + j0, N, kc);
    }
  }
}

// C[K, N] += A[M, K]ᵀ · B[M, N]
ATTNLAB_TRAIN_CLONES void matmul_at_b_acc(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N) {
  // kBlock/8 rows of A and B at a time, so that the slice of B stays in cache for every p.
  constexpr int64_t rows = 8;
  for (int64_t i0 = 0; i0 < M; i0 += rows) {
    const int64_t mc = std::min(rows, M - i0);
    for (int64_t p = 0; p < K; ++p) row(C + p * N, N, A + i0 * K + p, K, B + i0 * N, N, mc);
  }
}

void matmul_a_bt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool accumulate) {
  thread_local std::vector<float> bt;  // [N, K]
  bt.resize(static_cast<size_t>(N * K));
  for (int64_t p = 0; p < K; ++p)
    for (int64_t j = 0; j < N; ++j) bt[static_cast<size_t>(j * K + p)] = B[p * N + j];
  matmul(A, bt.data(), C, M, N, K, accumulate);
}

}  // namespace attnlab::train::dense
