#pragma once
// A symmetric eigen-solver, header-only and free of the rest of the lab, so the lab
// (exp_jacobian) and the Jacobian's property tests (tests/lab/test_jacobian.cpp)
// share one implementation.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace attnlab::lab::util {
// Eigenvalues of a symmetric n×n matrix (row-major) by cyclic Jacobi rotations:
// plain and accurate for the small matrices the lab inspects (n ≤ 64). Ascending.
inline std::vector<double> symmetric_eigenvalues(std::vector<double> a, size_t n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-30) break;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // rotate columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {  // rotate rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> ev(n);
  for (size_t i = 0; i < n; ++i) ev[i] = a[i * n + i];
  std::sort(ev.begin(), ev.end());
  return ev;
}
}  // namespace attnlab::lab::util
