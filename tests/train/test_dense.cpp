// The training path's matrix products (train/dense.hpp: cblas_sgemm and
// cblas_dgemm with the transposes each product needs) against plain loops in
// long double, for float and double, including empty shapes, which BLAS itself
// rejects (a leading dimension of 0).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "train/dense.hpp"

namespace attnlab::train {
namespace {

template <class T>
std::vector<T> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

// want[i, j] = base[i, j]·keep + Σ_p a(i, p)·b(p, j), in long double.
template <class T, class FA, class FB>
std::vector<long double> plain(int64_t M, int64_t K, int64_t N, FA a, FB b, const std::vector<T>& base, bool keep) {
  std::vector<long double> out(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      long double s = keep ? base[static_cast<size_t>(i * N + j)] : 0.0L;
      for (int64_t p = 0; p < K; ++p) s += static_cast<long double>(a(i, p)) * b(p, j);
      out[static_cast<size_t>(i * N + j)] = s;
    }
  return out;
}

// Sums of K products of N(0,1) numbers: error ≲ K·ε·(typical |term|); 4·K·ε + ε is generous
// and still fails for any wrong index or transpose.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<long double>& want, int64_t K, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const double eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), static_cast<double>(want[i]), 4.0 * eps * (static_cast<double>(K) + 1))
        << what << " at " << i;
}

struct Dims {
  int64_t M, K, N;
};

template <class T>
void check_products(const Dims& dims) {
  const int64_t M = dims.M, K = dims.K, N = dims.N;  // not a structured binding: clang 14 cannot capture one
  const auto A = random_values<T>(static_cast<size_t>(M * K), 1), B = random_values<T>(static_cast<size_t>(K * N), 2);
  // C = A·B and C += A·B
  for (bool acc : {false, true}) {
    std::vector<T> C = random_values<T>(static_cast<size_t>(M * N), 3);
    const auto want = plain(M, K, N, [&](int64_t i, int64_t p) { return A[i * K + p]; },
                            [&](int64_t p, int64_t j) { return B[p * N + j]; }, C, acc);
    dense::matmul(A.data(), B.data(), C.data(), M, K, N, acc);
    expect_close(C, want, K, acc ? "matmul accumulate" : "matmul");
  }
  // G[K, N] += A[M, K]ᵀ · B2[M, N]
  const auto B2 = random_values<T>(static_cast<size_t>(M * N), 4);
  std::vector<T> G = random_values<T>(static_cast<size_t>(K * N), 5);
  const auto want_g = plain(K, M, N, [&](int64_t p, int64_t i) { return A[i * K + p]; },
                            [&](int64_t i, int64_t j) { return B2[i * N + j]; }, G, true);
  dense::matmul_at_b_acc(A.data(), B2.data(), G.data(), M, K, N);
  expect_close(G, want_g, M, "matmul_at_b_acc");
  // D[M, K] (+)= B2[M, N] · B[K, N]ᵀ
  for (bool acc : {false, true}) {
    std::vector<T> D = random_values<T>(static_cast<size_t>(M * K), 6);
    const auto want = plain(M, N, K, [&](int64_t i, int64_t j) { return B2[i * N + j]; },
                            [&](int64_t j, int64_t p) { return B[p * N + j]; }, D, acc);
    dense::matmul_a_bt(B2.data(), B.data(), D.data(), M, N, K, acc);
    expect_close(D, want, N, acc ? "matmul_a_bt accumulate" : "matmul_a_bt");
  }
}

class DenseProducts : public ::testing::TestWithParam<Dims> {};

TEST_P(DenseProducts, MatchPlainLoopsInFloat) { check_products<float>(GetParam()); }
TEST_P(DenseProducts, MatchPlainLoopsInDouble) { check_products<double>(GetParam()); }

// The model's shapes (rows = batch·seq, D = 32, d_k up to 1024), odd sizes, and
// empty ones: K = 0 must give C = 0 (or leave it, accumulating), M or N = 0 nothing.
INSTANTIATE_TEST_SUITE_P(Shapes, DenseProducts,
                         ::testing::Values(Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{4, 32, 32}, Dims{5, 33, 64},
                                           Dims{7, 64, 65}, Dims{9, 130, 96}, Dims{288, 32, 1024},
                                           Dims{17, 1024, 32}, Dims{3, 0, 4}, Dims{0, 3, 4}, Dims{3, 4, 0}));

}  // namespace
}  // namespace attnlab::train
