#pragma once
// A learnable tensor of the training model and its gradient, both row-major
// [rows, cols]. Layers accumulate into `grad`; the optimiser reads it.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace attnlab::train {

template <class T>
struct Param {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::vector<T> value;  // [rows, cols]
  std::vector<T> grad;   // [rows, cols]

  Param() = default;
  Param(std::string n, int64_t r, int64_t c)
      : name(std::move(n)), rows(r), cols(c), value(static_cast<size_t>(r * c)), grad(static_cast<size_t>(r * c)) {}

  int64_t size() const { return rows * cols; }
  void zero_grad() { std::fill(grad.begin(), grad.end(), T(0)); }
  // Draws in double from the given generator, so float and double models built
  // from the same seed hold the same weights (up to rounding).
  void fill_normal(std::mt19937_64& rng, double stddev) {
    std::normal_distribution<double> n(0.0, stddev);
    for (T& x : value) x = static_cast<T>(n(rng));
  }
  void fill(T x) { std::fill(value.begin(), value.end(), x); }
};

}  // namespace attnlab::train
