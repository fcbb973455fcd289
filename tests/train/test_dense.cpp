// The float matrix kernels of the training path (dense.cpp: register strips of 64
// and 32 columns, cache blocks of 64 along the reduction, a plain tail) against
// the plain double loops of dense.hpp, on shapes that hit every path.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "train/dense.hpp"

namespace attnlab::train {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// float sums of K products of N(0,1) numbers: error ≲ K·2⁻²⁴·√K·(typical |term|); 1e−5·K is generous.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, int64_t K, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * static_cast<double>(K) + 1e-6) << what << " at " << i;
}

struct Dims {
  int64_t M, K, N;
};

class DenseKernels : public ::testing::TestWithParam<Dims> {};

TEST_P(DenseKernels, MatchThePlainLoops) {
  const auto [M, K, N] = GetParam();
  const auto A = random_floats(static_cast<size_t>(M * K), 1), B = random_floats(static_cast<size_t>(K * N), 2);
  const auto C0 = random_floats(static_cast<size_t>(M * N), 3);
  const auto Ad = to_double(A), Bd = to_double(B);
  // C = A·B and C += A·B
  for (bool acc : {false, true}) {
    std::vector<float> C = C0;
    std::vector<double> Cd = to_double(C0);
    dense::matmul(A.data(), B.data(), C.data(), M, K, N, acc);
    dense::matmul<double>(Ad.data(), Bd.data(), Cd.data(), M, K, N, acc);
    expect_close(C, Cd, K, acc ? "matmul accumulate" : "matmul");
  }
  // C[K, N] += A[M, K]ᵀ · B2[M, N]
  const auto B2 = random_floats(static_cast<size_t>(M * N), 4);
  const auto B2d = to_double(B2);
  std::vector<float> G = random_floats(static_cast<size_t>(K * N), 5);
  std::vector<double> Gd = to_double(G);
  dense::matmul_at_b_acc(A.data(), B2.data(), G.data(), M, K, N);
  dense::matmul_at_b_acc<double>(Ad.data(), B2d.data(), Gd.data(), M, K, N);
  expect_close(G, Gd, M, "matmul_at_b_acc");
  // C[M, K] (+)= B2[M, N] · B[K, N]ᵀ
  for (bool acc : {false, true}) {
    std::vector<float> D = random_floats(static_cast<size_t>(M * K), 6);
    std::vector<double> Dd = to_double(D);
    dense::matmul_a_bt(B2.data(), B.data(), D.data(), M, N, K, acc);
    dense::matmul_a_bt<double>(B2d.data(), Bd.data(), Dd.data(), M, N, K, acc);
    expect_close(D, Dd, N, "matmul_a_bt");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseKernels,
                         ::testing::Values(Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{4, 32, 32}, Dims{5, 33, 64},
                                           Dims{7, 64, 65}, Dims{9, 130, 96}, Dims{2, 65, 127},
                                           Dims{17, 32, 1024}, Dims{6, 1024, 32}, Dims{3, 200, 200}));

}  // namespace
}  // namespace attnlab::train
