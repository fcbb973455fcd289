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
  attention_forward(q.view(), k.view(), v.view(), o, out.view(), lse.view(), &diag);
  RowStats r;
  for (int64_t i = 0; i < in.queries; ++i) {
    r.entropy += ent(0, 0, i, 0) / static_cast<double>(in.queries);
    r.max_prob += mp(0, 0, i, 0) / static_cast<double>(in.queries);
    r.max_logit = std::max(r.max_logit, static_cast<double>(lse(0, 0, i, 0)) + std::log(static_cast<double>(mp(0, 0, i, 0))));
  }
  return r;
}

}  // namespace attnlab::lab::util
