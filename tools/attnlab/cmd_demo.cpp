// `attnlab demo`: seed 001's example on the reference maths. softmax(a·x) for
// x = (1, 1, 2, 4) as a grows: the output turns one-hot and the Jacobian
// diag(s) − s sᵀ collapses to zero, which is why unscaled attention stops learning.
#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <vector>

#include "attnlab/softmax.hpp"
#include "command.hpp"

namespace {

void run_demo() {
  const std::array<double, 4> x{1, 1, 2, 4};
  fmt::print("softmax(a * x) for x = (1, 1, 2, 4)  [seed 001]\n\n");
  fmt::print("{:>6}  {:>34}  {:>9}  {:>11}  {:>8}\n", "a", "s = softmax(a x)", "max s", "||J||_F", "H(s)");
  for (double a : {0.01, 0.1, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0}) {
    std::array<double, 4> ax{}, s{};
    for (size_t i = 0; i < 4; ++i) ax[i] = a * x[i];
    attnlab::softmax<double>(ax, s);
    const double fro = std::sqrt(attnlab::jacobian_frobenius_sq<double>(s));
    fmt::print("{:>6}  ({:.4f}, {:.4f}, {:.4f}, {:.4f})  {:>9.6f}  {:>11.3e}  {:>8.5f}\n", a, s[0], s[1], s[2], s[3],
               *std::max_element(s.begin(), s.end()), fro, attnlab::entropy<double>(s));
  }
  for (double a : {1.0, 16.0}) {
    std::array<double, 4> ax{}, s{};
    for (size_t i = 0; i < 4; ++i) ax[i] = a * x[i];
    attnlab::softmax<double>(ax, s);
    std::vector<double> J(16);
    attnlab::softmax_jacobian<double>(s, J);
    fmt::print("\nJacobian diag(s) - s s^T at a = {}:\n", a);
    for (int i = 0; i < 4; ++i)
      fmt::print("  [{:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e}]\n", J[i * 4], J[i * 4 + 1], J[i * 4 + 2], J[i * 4 + 3]);
  }
  fmt::print("\nAs a grows, s tends to one-hot (0, 0, 0, 1) and J to the zero matrix: no gradient flows.\n");
}

}  // namespace

attnlab::cli::Command attnlab::cli::demo_command() {
  return {"demo", "Seed 001's softmax-saturation example on the reference maths",
          [](CLI::App& sub) { sub.callback(run_demo); }};
}
