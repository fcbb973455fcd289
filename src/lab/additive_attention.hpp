#pragma once
// Bahdanau's additive attention score and the multiplicative (bilinear) score, with
// their own forward and backward passes (the `additive` experiment, C9). Plain loops
// in double: these are small and must be obviously right; they are gradient-checked
// against central finite differences in tests/lab/test_additive.cpp and in the experiment.
//
//   additive:        e = vᵀ tanh(W₁ h + W₂ s)
//   multiplicative:  e = (W₁ h)ᵀ (W₂ s)
// Shapes: h, s [d_in]; W₁, W₂ [d_a, d_in] row-major; v [d_a].
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace attnlab::lab {

struct ScoreWeights {
  int64_t d_in = 0, d_a = 0;
  std::vector<double> W1, W2;  // [d_a, d_in]
  std::vector<double> v;       // [d_a] (additive only)

  // Xavier/Glorot uniform: U(±√(6/(fan_in + fan_out))) per matrix; v is a d_a → 1 layer.
  // init = "xavier" or "standard_normal" (N(0, 1) entries, no fan scaling). Throws Error otherwise.
  static ScoreWeights init(int64_t d_in, int64_t d_a, const std::string& init, std::mt19937_64& g);
};

struct ScoreGrads {
  std::vector<double> dh, ds;       // [d_in]
  std::vector<double> dW1, dW2;     // [d_a, d_in]
  std::vector<double> dv;           // [d_a] (empty for the multiplicative score)
};

double additive_score(const ScoreWeights& w, std::span<const double> h, std::span<const double> s);
// Gradients of g·e with respect to every input and weight.
ScoreGrads additive_score_backward(const ScoreWeights& w, std::span<const double> h, std::span<const double> s, double g);

double multiplicative_score(const ScoreWeights& w, std::span<const double> h, std::span<const double> s);
ScoreGrads multiplicative_score_backward(const ScoreWeights& w, std::span<const double> h, std::span<const double> s,
                                         double g);

}  // namespace attnlab::lab
