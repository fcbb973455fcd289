#pragma once
// Random attention problems for tests: shapes, masks, padding, causality and
// scale policies drawn from a seeded generator, so every failure is reproducible
// from the printed seed and description.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::test {

struct ProblemLimits {
  int64_t max_batch = 2, max_kv_heads = 2, max_group = 3;
  int64_t max_seq = 12, max_dim = 8;
  std::vector<int64_t> dims{};  // if non-empty, d and dv are drawn from this list
  // If max_seq_q > 0: a KV-cache shape instead, Nq in [1, max_seq_q] against
  // Nk in [min_seq_k, max_seq_k] (max_seq is then unused).
  int64_t max_seq_q = 0, min_seq_k = 1, max_seq_k = 1;
  double p_causal = 0.4, p_bool_mask = 0.3, p_additive_mask = 0.3, p_padding = 0.3, p_other_scale = 0.4;
};

struct Problem {
  int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, d = 1, dv = 1;
  Tensor<double> q, k, v, grad_out;
  Tensor<uint8_t> bool_mask;     // empty when absent
  Tensor<double> additive_mask;  // empty when absent
  std::vector<int64_t> key_lengths;
  Causal causal = Causal::none;
  ScalePolicy scale{};

  template <class T>
  AttentionOptions<T> options(const Tensor<T>* additive = nullptr) const {
    AttentionOptions<T> o;
    o.scale = scale;
    o.causal = causal;
    if (bool_mask.numel() > 0) o.bool_mask = bool_mask.view();
    if (additive != nullptr && additive->numel() > 0) o.additive_mask = additive->view();
    o.key_lengths = key_lengths;
    return o;
  }
  AttentionOptions<double> options() const { return options<double>(&additive_mask); }

  // The keys row i of (batch b, head h) may see by padding, causality and the
  // boolean mask, written out here rather than taken from the library, so that
  // the tests' independent formulations stay independent of its rule.
  std::vector<bool> visible_keys(int64_t b, int64_t h, int64_t i) const {
    const int64_t n_keys = key_lengths.empty() ? Nk : key_lengths[static_cast<size_t>(b)];
    std::vector<bool> vis(static_cast<size_t>(Nk));
    for (int64_t j = 0; j < Nk; ++j) {
      bool ok = j < n_keys;
      if (causal == Causal::top_left) ok = ok && j <= i;
      if (causal == Causal::bottom_right) ok = ok && j <= i + n_keys - Nq;
      if (bool_mask.numel()) ok = ok && bool_mask(bool_mask.size(0) == 1 ? 0 : b, bool_mask.size(1) == 1 ? 0 : h, i, j);
      vis[static_cast<size_t>(j)] = ok;
    }
    return vis;
  }

  std::string describe() const {
    std::ostringstream s;
    s << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nk=" << Nk << " d=" << d << " dv=" << dv
      << " causal=" << to_string(causal) << " scale=" << scale.name()
      << " bool_mask=" << (bool_mask.numel() ? to_string(bool_mask.shape()) : "none")
      << " additive=" << (additive_mask.numel() ? to_string(additive_mask.shape()) : "none") << " padding=";
    if (key_lengths.empty()) s << "none";
    for (int64_t l : key_lengths) s << l << ",";
    return s.str();
  }
};

inline void fill_normal(Tensor<double>& t, std::mt19937_64& rng, double sigma = 1.0) {
  std::normal_distribution<double> n(0.0, sigma);
  for (double& x : t.storage()) x = n(rng);
}

inline Problem random_problem(std::mt19937_64& rng, const ProblemLimits& lim = {}) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  Problem p;
  p.B = uni(1, lim.max_batch);
  p.Hkv = uni(1, lim.max_kv_heads);
  p.Hq = p.Hkv * uni(1, lim.max_group);
  if (lim.max_seq_q > 0) {
    p.Nq = uni(1, lim.max_seq_q);
    p.Nk = uni(lim.min_seq_k, lim.max_seq_k);
  } else {
    p.Nq = uni(1, lim.max_seq);
    p.Nk = coin(0.5) ? p.Nq : uni(1, lim.max_seq);
  }
  if (lim.dims.empty()) {
    p.d = uni(1, lim.max_dim);
    p.dv = coin(0.5) ? p.d : uni(1, lim.max_dim);
  } else {
    p.d = lim.dims[static_cast<size_t>(uni(0, static_cast<int64_t>(lim.dims.size()) - 1))];
    p.dv = coin(0.7) ? p.d : lim.dims[static_cast<size_t>(uni(0, static_cast<int64_t>(lim.dims.size()) - 1))];
  }
  p.q = Tensor<double>({p.B, p.Hq, p.Nq, p.d});
  p.k = Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
  p.v = Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
  p.grad_out = Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
  fill_normal(p.q, rng);
  fill_normal(p.k, rng);
  fill_normal(p.v, rng);
  fill_normal(p.grad_out, rng);
  if (coin(lim.p_causal)) p.causal = coin(0.5) ? Causal::top_left : Causal::bottom_right;
  if (coin(lim.p_bool_mask)) {
    p.bool_mask = Tensor<uint8_t>({coin(0.5) ? 1 : p.B, coin(0.5) ? 1 : p.Hq, p.Nq, p.Nk});
    const double keep = coin(0.2) ? 0.0 : 0.7;  // sometimes every row fully masked
    for (auto& m : p.bool_mask.storage()) m = coin(keep) ? 1 : 0;
  }
  if (coin(lim.p_additive_mask)) {
    p.additive_mask = Tensor<double>({coin(0.5) ? 1 : p.B, coin(0.5) ? 1 : p.Hq, p.Nq, p.Nk});
    std::normal_distribution<double> n(0.0, 2.0);
    for (auto& m : p.additive_mask.storage()) m = coin(0.15) ? -std::numeric_limits<double>::infinity() : n(rng);
  }
  if (coin(lim.p_padding)) {
    p.key_lengths.resize(static_cast<size_t>(p.B));
    for (auto& l : p.key_lengths) l = uni(0, p.Nk);
  }
  if (coin(lim.p_other_scale)) {
    switch (uni(0, 4)) {
      case 0: p.scale = ScalePolicy::none(); break;
      case 1: p.scale = ScalePolicy::inv_d(); break;
      case 2: p.scale = ScalePolicy::entropy_invariant(); break;
      case 3: p.scale = ScalePolicy::scalable_softmax(0.7); break;
      default: p.scale = ScalePolicy::fixed(0.3); break;
    }
  }
  return p;
}

template <class T>
Tensor<T> cast(const Tensor<double>& x) {
  Tensor<T> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
  return y;
}

inline double max_abs_diff(const Tensor<double>& a, const Tensor<double>& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data()[i], y = b.data()[i];
    if (x == y) continue;  // also equal infinities
    m = std::max(m, std::abs(x - y));
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
  }
  return m;
}

inline double max_abs(const Tensor<double>& a) {
  double m = 0;
  for (double x : a.storage()) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace attnlab::test
