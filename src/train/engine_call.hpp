#pragma once
// How the training models call the attention (private to src/train): through the front door
// (attnlab/attention.hpp), float on the engine and double on the exact reference, on the
// calling thread (the studies spread runs, not rows, over cores), and the rows of q and k
// normalised for qk-norm.
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnlab/attention_options.hpp"

namespace attnlab::train {

// The trainers check the loss for NaN/inf themselves (a non-finite q, k or v always reaches
// it), so the engine's extra pass over the inputs is skipped. The gradient checks (double)
// never feed non-finite values.
template <class T>
AttentionOptions<T> attention_options(ScalePolicy scale, Causal causal = Causal::none) {
  AttentionOptions<T> o;
  o.scale = scale;
  o.causal = causal;
  o.check_finite = false;
  return o;
}

inline ComputeConfig single_thread() {
  ComputeConfig c;
  c.threads = 1;
  return c;
}

// Added under the square root of the qk-norm so that a zero row cannot divide by zero.
inline constexpr double kQkNormEps = 1e-12;

// Rows of x [M, d] divided by their norms: y = x/‖x‖, norms[i] = ‖x_i‖ (y, norms sized here).
template <class T>
void normalise_rows(const std::vector<T>& x, std::vector<T>& y, std::vector<T>& norms, int64_t M, int64_t d) {
  y.resize(x.size());
  norms.resize(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += static_cast<double>(x[i * d + c]) * x[i * d + c];
    const double n = std::sqrt(s + kQkNormEps);
    norms[static_cast<size_t>(i)] = static_cast<T>(n);
    for (int64_t c = 0; c < d; ++c) y[i * d + c] = static_cast<T>(x[i * d + c] / n);
  }
}

// Back through y = x/‖x‖: dx = (dy − y (y·dy)) / ‖x‖, in place on dy.
template <class T>
void normalise_rows_backward(const std::vector<T>& y, const std::vector<T>& norms, T* dy, int64_t M, int64_t d) {
  for (int64_t i = 0; i < M; ++i) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(y[i * d + c]) * dy[i * d + c];
    const double inv = 1.0 / norms[static_cast<size_t>(i)];
    for (int64_t c = 0; c < d; ++c) dy[i * d + c] = static_cast<T>((dy[i * d + c] - y[i * d + c] * dot) * inv);
  }
}

// qk-norm's learned temperature: exp(s) with s initialised to log √d_k, so that at init the
// logits q̂·k̂·√d_k spread like q·k/√d_k's. exp is taken in double, as the policies are.
inline double qk_norm_initial_log_temperature(int64_t d_k) { return 0.5 * std::log(static_cast<double>(d_k)); }
inline ScalePolicy qk_norm_policy(double log_temperature) { return ScalePolicy::fixed(std::exp(log_temperature)); }

}  // namespace attnlab::train
