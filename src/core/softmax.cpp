#include "attnlab/softmax.hpp"

#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "attnlab/error.hpp"

namespace attnlab {
namespace {

// Every reduction runs in double, for float inputs too: these are the exact
// maths the rest of the library is checked against.
using Acc = double;

template <class T>
void require_same_size(std::span<const T> a, size_t n, const char* what, const char* fn) {
  if (a.size() != n) throw Error(fmt::format("{}: {} has {} elements, expected {}", fn, what, a.size(), n));
}

template <class T>
void require_logits(std::span<const T> x, const char* fn) {
  if (x.empty()) throw Error(fmt::format("{}: empty input", fn));
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<T>::infinity())
      throw Error(fmt::format("{}: input {} at index {} (only finite values and -inf are allowed)", fn, x[i], i));
}

// Every function of the maths API validates its input: logits by require_logits,
// probabilities and upstream gradients by require_finite (a NaN in is an error, as it
// is for softmax, never a NaN out).
template <class T>
void require_finite(std::span<const T> x, const char* what, const char* fn) {
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      throw Error(fmt::format("{}: {} has the non-finite value {} at index {}", fn, what, x[i], i));
}

// max and Σ exp(x − max); max = −inf when every entry is −inf.
template <class T>
std::pair<Acc, Acc> max_and_sum(std::span<const T> x) {
  Acc m = -std::numeric_limits<Acc>::infinity();
  for (T v : x) m = std::max<Acc>(m, v);
  if (m == -std::numeric_limits<Acc>::infinity()) return {m, 0.0};
  Acc sum = 0;
  for (T v : x) sum += std::exp(static_cast<Acc>(v) - m);
  return {m, sum};
}

}  // namespace

template <class T>
void softmax(std::span<const T> x, std::span<T> s) {
  require_logits(x, "softmax");
  require_same_size<T>(s, x.size(), "output", "softmax");
  const auto [m, sum] = max_and_sum(x);
  for (size_t i = 0; i < x.size(); ++i)
    s[i] = sum == 0 ? T(0) : static_cast<T>(std::exp(static_cast<Acc>(x[i]) - m) / sum);
}

template <class T>
T logsumexp(std::span<const T> x) {
  require_logits(x, "logsumexp");
  const auto [m, sum] = max_and_sum(x);
  if (sum == 0) return -std::numeric_limits<T>::infinity();
  return static_cast<T>(m + std::log(sum));
}

template <class T>
void log_softmax(std::span<const T> x, std::span<T> out) {
  require_logits(x, "log_softmax");
  require_same_size<T>(out, x.size(), "output", "log_softmax");
  const auto [m, sum] = max_and_sum(x);
  const Acc log_sum = std::log(sum);  // −inf when sum == 0
  for (size_t i = 0; i < x.size(); ++i) {
    // (x − m) − log Σ: subtracting m first keeps ±1e30 inputs exact.
    const Acc xi = x[i];
    out[i] = (sum == 0 || xi == -std::numeric_limits<Acc>::infinity())
                 ? -std::numeric_limits<T>::infinity()
                 : static_cast<T>((xi - m) - log_sum);
  }
}

template <class T>
void softmax_jacobian(std::span<const T> s, std::span<T> jacobian) {
  const size_t n = s.size();
  require_same_size<T>(jacobian, n * n, "jacobian", "softmax_jacobian");
  require_finite(s, "s", "softmax_jacobian");
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      jacobian[i * n + j] = static_cast<T>(static_cast<Acc>(s[i]) * ((i == j ? 1.0 : 0.0) - static_cast<Acc>(s[j])));
}

template <class T>
void softmax_vjp(std::span<const T> s, std::span<const T> g, std::span<T> grad_x) {
  require_same_size<T>(g, s.size(), "g", "softmax_vjp");
  require_same_size<T>(grad_x, s.size(), "grad_x", "softmax_vjp");
  require_finite(s, "s", "softmax_vjp");
  require_finite(g, "g", "softmax_vjp");
  Acc dot = 0;
  for (size_t i = 0; i < s.size(); ++i) dot += static_cast<Acc>(g[i]) * s[i];
  for (size_t i = 0; i < s.size(); ++i) grad_x[i] = static_cast<T>(s[i] * (static_cast<Acc>(g[i]) - dot));
}

template <class T>
void softmax_jvp(std::span<const T> s, std::span<const T> v, std::span<T> jv) {
  require_same_size<T>(v, s.size(), "v", "softmax_jvp");
  require_same_size<T>(jv, s.size(), "jv", "softmax_jvp");
  require_finite(s, "s", "softmax_jvp");
  require_finite(v, "v", "softmax_jvp");
  softmax_vjp(s, v, jv);  // J is symmetric, so J v = Jᵀ v
}

template <class T>
T softmax_cross_entropy(std::span<const T> logits, int64_t target, std::span<T> grad) {
  require_logits(logits, "softmax_cross_entropy");
  if (target < 0 || target >= static_cast<int64_t>(logits.size()))
    throw Error(fmt::format("softmax_cross_entropy: target {} is outside [0, {})", target, logits.size()));
  if (!grad.empty()) {
    require_same_size<T>(grad, logits.size(), "grad", "softmax_cross_entropy");
    softmax(logits, grad);
    grad[static_cast<size_t>(target)] -= T(1);
  }
  const auto [m, sum] = max_and_sum(logits);
  // −log s_t = log Σ exp(x − m) − (x_t − m); +inf when the target's logit is −inf.
  return static_cast<T>(std::log(sum) - (static_cast<Acc>(logits[static_cast<size_t>(target)]) - m));
}

template <class T>
T softmax_cross_entropy(std::span<const T> logits, std::span<const T> target, std::span<T> grad) {
  require_logits(logits, "softmax_cross_entropy");
  require_same_size<T>(target, logits.size(), "target", "softmax_cross_entropy");
  Acc total = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    if (!(target[i] >= 0) || !std::isfinite(target[i]))
      throw Error(fmt::format("softmax_cross_entropy: target probability {} at index {} is not a finite "
                              "non-negative number", target[i], i));
    total += target[i];
  }
  const auto [m, sum] = max_and_sum(logits);
  const Acc log_sum = std::log(sum);
  Acc loss = 0;
  for (size_t i = 0; i < target.size(); ++i)
    if (target[i] > 0) loss -= target[i] * ((static_cast<Acc>(logits[i]) - m) - log_sum);
  if (!grad.empty()) {
    require_same_size<T>(grad, logits.size(), "grad", "softmax_cross_entropy");
    for (size_t i = 0; i < logits.size(); ++i) {
      const Acc p = sum == 0 ? 0.0 : std::exp(static_cast<Acc>(logits[i]) - m) / sum;
      grad[i] = static_cast<T>(p * total - target[i]);
    }
  }
  return static_cast<T>(loss);
}

template <class T>
T entropy(std::span<const T> s) {
  require_finite(s, "s", "entropy");
  Acc h = 0;
  for (T p : s)
    if (p > 0) h -= static_cast<Acc>(p) * std::log(static_cast<Acc>(p));
  return static_cast<T>(h);
}

// Near one-hot, 1 − s_max computed as 1 − s_max loses every digit (s_max rounds
// to 1). Both closed forms below are therefore written in terms of 1 − s_i,
// taken for the largest entry as the sum of all the others, which is exact to
// rounding. This keeps ‖J‖_F accurate down to 1e-300 instead of flooring at
// √eps ≈ 1e-8 (the textbook ‖s‖₂² − 2‖s‖₃³ + ‖s‖₂⁴ cancels to 0 there).
namespace {
template <class T>
struct OneHotSplit {
  size_t argmax = 0;
  Acc rest = 0;   // Σ_{j≠argmax} s_j   (= 1 − s_max)
  Acc rest2 = 0;  // Σ_{j≠argmax} s_j²
  Acc sum2 = 0;   // Σ s_j²
  Acc one_minus(std::span<const T> s, size_t i) const { return i == argmax ? rest : 1.0 - static_cast<Acc>(s[i]); }
  Acc others2(std::span<const T> s, size_t i) const {
    return i == argmax ? rest2 : sum2 - static_cast<Acc>(s[i]) * s[i];
  }
};

template <class T>
OneHotSplit<T> split(std::span<const T> s) {
  OneHotSplit<T> r;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] > s[r.argmax]) r.argmax = i;
  for (size_t i = 0; i < s.size(); ++i) {
    const Acc p = s[i];
    r.sum2 += p * p;
    if (i == r.argmax) continue;
    r.rest += p;
    r.rest2 += p * p;
  }
  return r;
}
}  // namespace

template <class T>
T jacobian_trace(std::span<const T> s) {
  require_finite(s, "s", "jacobian_trace");
  // tr J = Σ s_i (1 − s_i) = 1 − ‖s‖₂² for a probability vector.
  const auto sp = split(s);
  Acc tr = 0;
  for (size_t i = 0; i < s.size(); ++i) tr += static_cast<Acc>(s[i]) * sp.one_minus(s, i);
  return static_cast<T>(tr);
}

template <class T>
T jacobian_frobenius_sq(std::span<const T> s) {
  require_finite(s, "s", "jacobian_frobenius_sq");
  // ‖J‖_F² = Σ_i s_i²(1 − s_i)² + Σ_i s_i² Σ_{j≠i} s_j²  (diagonal + off-diagonal terms)
  //        = ‖s‖₂² − 2‖s‖₃³ + ‖s‖₂⁴ for a probability vector.
  const auto sp = split(s);
  Acc fro2 = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const Acc p2 = static_cast<Acc>(s[i]) * s[i], om = sp.one_minus(s, i);
    fro2 += p2 * om * om + p2 * sp.others2(s, i);
  }
  return static_cast<T>(fro2);
}

#define ATTNLAB_INSTANTIATE(T)                                                                    \
  template void softmax<T>(std::span<const T>, std::span<T>);                                     \
  template void log_softmax<T>(std::span<const T>, std::span<T>);                                 \
  template T logsumexp<T>(std::span<const T>);                                                    \
  template void softmax_jacobian<T>(std::span<const T>, std::span<T>);                            \
  template void softmax_vjp<T>(std::span<const T>, std::span<const T>, std::span<T>);             \
  template void softmax_jvp<T>(std::span<const T>, std::span<const T>, std::span<T>);             \
  template T softmax_cross_entropy<T>(std::span<const T>, int64_t, std::span<T>);                 \
  template T softmax_cross_entropy<T>(std::span<const T>, std::span<const T>, std::span<T>);      \
  template T entropy<T>(std::span<const T>);                                                      \
  template T jacobian_trace<T>(std::span<const T>);                                               \
  template T jacobian_frobenius_sq<T>(std::span<const T>);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(double)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab
