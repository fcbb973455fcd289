// Additive and multiplicative attention scores: forward and backward (see the header).
#include "lab/additive_attention.hpp"

#include <cmath>

#include "attnlab/error.hpp"

namespace attnlab::lab {

ScoreWeights ScoreWeights::init(int64_t d_in, int64_t d_a, const std::string& init, std::mt19937_64& g) {
  if (d_in <= 0 || d_a <= 0) throw Error("additive attention: d_in and d_a must be positive");
  ScoreWeights w;
  w.d_in = d_in;
  w.d_a = d_a;
  w.W1.resize(static_cast<size_t>(d_a * d_in));
  w.W2.resize(w.W1.size());
  w.v.resize(static_cast<size_t>(d_a));
  if (init == "xavier") {
    std::uniform_real_distribution<double> wu(-std::sqrt(6.0 / static_cast<double>(d_in + d_a)),
                                              std::sqrt(6.0 / static_cast<double>(d_in + d_a)));
    std::uniform_real_distribution<double> vu(-std::sqrt(6.0 / static_cast<double>(d_a + 1)),
                                              std::sqrt(6.0 / static_cast<double>(d_a + 1)));
    for (auto& x : w.W1) x = wu(g);
    for (auto& x : w.W2) x = wu(g);
    for (auto& x : w.v) x = vu(g);
  } else if (init == "standard_normal") {
    std::normal_distribution<double> n(0, 1);
    for (auto* m : {&w.W1, &w.W2, &w.v})
      for (auto& x : *m) x = n(g);
  } else {
    throw Error("init: '" + init + "' is not xavier or standard_normal");
  }
  return w;
}

namespace {
void check(const ScoreWeights& w, std::span<const double> h, std::span<const double> s) {
  if (static_cast<int64_t>(h.size()) != w.d_in || static_cast<int64_t>(s.size()) != w.d_in)
    throw Error("attention score: h and s must have d_in = " + std::to_string(w.d_in) + " entries");
}
// out[a] = Σ_i W[a, i] x[i]
std::vector<double> matvec(const std::vector<double>& W, int64_t rows, int64_t cols, std::span<const double> x) {
  std::vector<double> out(static_cast<size_t>(rows), 0.0);
  for (int64_t a = 0; a < rows; ++a) {
    double acc = 0;
    for (int64_t i = 0; i < cols; ++i) acc += W[static_cast<size_t>(a * cols + i)] * x[static_cast<size_t>(i)];
    out[static_cast<size_t>(a)] = acc;
  }
  return out;
}
// out[i] = Σ_a W[a, i] y[a]
std::vector<double> matvec_t(const std::vector<double>& W, int64_t rows, int64_t cols, const std::vector<double>& y) {
  std::vector<double> out(static_cast<size_t>(cols), 0.0);
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t i = 0; i < cols; ++i) out[static_cast<size_t>(i)] += W[static_cast<size_t>(a * cols + i)] * y[static_cast<size_t>(a)];
  return out;
}
std::vector<double> outer(const std::vector<double>& y, std::span<const double> x) {
  std::vector<double> out(y.size() * x.size());
  for (size_t a = 0; a < y.size(); ++a)
    for (size_t i = 0; i < x.size(); ++i) out[a * x.size() + i] = y[a] * x[i];
  return out;
}
}  // namespace

double additive_score(const ScoreWeights& w, std::span<const double> h, std::span<const double> s) {
  check(w, h, s);
  const auto u1 = matvec(w.W1, w.d_a, w.d_in, h), u2 = matvec(w.W2, w.d_a, w.d_in, s);
  double e = 0;
  for (int64_t a = 0; a < w.d_a; ++a) e += w.v[static_cast<size_t>(a)] * std::tanh(u1[static_cast<size_t>(a)] + u2[static_cast<size_t>(a)]);
  return e;
}

ScoreGrads additive_score_backward(const ScoreWeights& w, std::span<const double> h, std::span<const double> s,
                                   double g) {
  check(w, h, s);
  const auto u1 = matvec(w.W1, w.d_a, w.d_in, h), u2 = matvec(w.W2, w.d_a, w.d_in, s);
  // e = Σ_a v_a t_a, t = tanh(u): ∂e/∂v_a = t_a, ∂e/∂u_a = v_a (1 − t_a²).
  std::vector<double> t(static_cast<size_t>(w.d_a)), du(t.size());
  ScoreGrads r;
  r.dv.resize(t.size());
  for (size_t a = 0; a < t.size(); ++a) {
    t[a] = std::tanh(u1[a] + u2[a]);
    r.dv[a] = g * t[a];
    du[a] = g * w.v[a] * (1 - t[a] * t[a]);
  }
  r.dh = matvec_t(w.W1, w.d_a, w.d_in, du);
  r.ds = matvec_t(w.W2, w.d_a, w.d_in, du);
  r.dW1 = outer(du, h);
  r.dW2 = outer(du, s);
  return r;
}

double multiplicative_score(const ScoreWeights& w, std::span<const double> h, std::span<const double> s) {
  check(w, h, s);
  const auto a = matvec(w.W1, w.d_a, w.d_in, h), b = matvec(w.W2, w.d_a, w.d_in, s);
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += a[i] * b[i];
  return e;
}

ScoreGrads multiplicative_score_backward(const ScoreWeights& w, std::span<const double> h, std::span<const double> s,
                                         double g) {
  check(w, h, s);
  auto a = matvec(w.W1, w.d_a, w.d_in, h), b = matvec(w.W2, w.d_a, w.d_in, s);
  // e = aᵀb with a = W₁h, b = W₂s: ∂e/∂a = b, ∂e/∂b = a.
  for (auto& x : a) x *= g;
  for (auto& x : b) x *= g;
  ScoreGrads r;
  r.dh = matvec_t(w.W1, w.d_a, w.d_in, b);
  r.ds = matvec_t(w.W2, w.d_a, w.d_in, a);
  r.dW1 = outer(b, h);
  r.dW2 = outer(a, s);
  return r;
}

}  // namespace attnlab::lab
