#pragma once
// Softmax rows of attention on synthetic inputs, summarised (private to the library):
// the experiments on n (entropy, fading, entropy_invariance) and on the softcap share it.
//
// A few query rows against n keys, through the engine's fused forward with its per-row
// diagnostics (largest probability, entropy) and its lse, which is all a row statistic
// needs. Two inputs:
//   random   q, k ~ N(0, I): no key is preferred;
//   planted  each query is β·k_t + N(0, I) for one key t: one relevant key among n − 1
//            distractors, the situation the log n-aware scales were designed for.
// The same (seed, stream) gives the same q, k, v for any policy: comparisons are paired.
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/scale.hpp"
#include "lab/lab_util.hpp"

namespace attnlab::lab::util {

struct RowStats {
  double entropy = 0;      // mean over rows of −Σ p ln p (nats)
  double max_prob = 0;     // mean over rows of the largest probability
  double max_logit = -INFINITY;  // largest logit of any row (after scale and softcap): lse + ln(max p)
};

struct RowInput {
  bool planted = false;
  double beta = 1.0;       // β of the planted input
  int64_t n = 16, d = 64, queries = 16;
};

inline RowStats row_stats(const ScalePolicy& policy, const RowInput& in, uint64_t seed, const std::string& stream,
                          std::optional<double> softcap = std::nullopt) {
  auto g = rng(seed, stream);
  std::normal_distribution<float> normal(0, 1);
  Tensor<float> q({1, 1, in.queries, in.d}), k({1, 1, in.n, in.d}), v({1, 1, in.n, 1});  // [B, H, N, d]
  for (auto& x : k.storage()) x = normal(g);
  for (auto& x : v.storage()) x = normal(g);
  std::uniform_int_distribution<int64_t> pick(0, in.n - 1);
  for (int64_t i = 0; i < in.queries; ++i) {
    const int64_t t = pick(g);
    for (int64_t c = 0; c < in.d; ++c)
      q(0, 0, i, c) = (in.planted ? static_cast<float>(in.beta) * k(0, 0, t, c) : 0.0f) + normal(g);
  }
  Tensor<float> out({1, 1, in.queries, 1}), lse({1, 1, in.queries, 1}), mp({1, 1, in.queries, 1}),
      ent({1, 1, in.queries, 1});  // each [1, 1, queries, 1]
  RowDiagnostics<float> diag;
  diag.max_prob = mp.view();
  diag.entropy = ent.view();
  AttentionOptions<float> o;
  o.scale = policy;
  o.softcap = softcap;
  attention_forward(q.view(), k.view(), v.view(), o, {out.view(), lse.view(), diag});
  RowStats r;
  for (int64_t i = 0; i < in.queries; ++i) {
    r.entropy += ent(0, 0, i, 0) / static_cast<double>(in.queries);
    r.max_prob += mp(0, 0, i, 0) / static_cast<double>(in.queries);
    r.max_logit = std::max(r.max_logit, static_cast<double>(lse(0, 0, i, 0)) + std::log(static_cast<double>(mp(0, 0, i, 0))));
  }
  return r;
}

// The mean-field theory of a planted row (see `fading` and `invariance`): the planted logit
// a = scale·q·k_t ~ N(scale·β·d, scale²·d·(2β² + 1)) against n − 1 others ≈ N(0, τ²),
// τ² = scale²·d·(β² + 1), whose Σe^x ≈ (n − 1)e^{τ²/2} while it self-averages (τ² < ½ ln n).
// The planted key's weight is p(a) = 1/(1 + (n − 1)e^{τ²/2 − a}); the rest is spread with
// entropy ln(n − 1) − τ²/2. Expectations over a (β = 0: a random key, the same formulas).
struct PlantedTheory {
  double max_prob = NAN;  // E[p(a)]: the planted key's weight (the largest while it dominates)
  double entropy = NAN;   // E[h(p) + (1 − p)(ln(n − 1) − τ²/2)]
};
inline PlantedTheory planted_theory(double scale, double beta, double d, double n) {
  const double mean = scale * beta * d, sd = scale * std::sqrt(d * (2 * beta * beta + 1));
  const double tau2 = scale * scale * d * (beta * beta + 1);
  if (!(tau2 < 0.5 * std::log(n))) return {};  // the sum over the others does not self-average
  const double rest = std::log(n - 1) - tau2 / 2;
  double weight = 0, sum_p = 0, sum_h = 0;
  for (int i = -400; i <= 400; ++i) {  // the normal density on ±8 sd, step sd/50
    const double z = i / 50.0, w = std::exp(-0.5 * z * z);
    const double p = 1 / (1 + (n - 1) * std::exp(tau2 / 2 - (mean + sd * z)));
    const double h = (p > 0 ? -p * std::log(p) : 0) + (p < 1 ? -(1 - p) * std::log(1 - p) : 0);
    weight += w, sum_p += w * p, sum_h += w * (h + (1 - p) * rest);
  }
  return {sum_p / weight, sum_h / weight};
}

}  // namespace attnlab::lab::util
