#pragma once
// Random attention problems for tests: shapes, masks, padding, causality and
// scale policies drawn from a seeded generator, so every failure is reproducible
// from the printed seed and description.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/score_mod.hpp"
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
  // The variants (attention_variants.hpp); off unless a test asks for them.
  double p_window = 0, p_softcap = 0, p_alibi = 0, p_sinks = 0, p_packed = 0, p_dropout = 0;
  double p_mask_mod = 0, p_score_mod = 0;  // one of the test mods below
};

// Programmable masks and scores for random problems (score_mod.hpp), written as a user
// would: lambdas over (b, h, q, k), generic in the score's type.
inline const std::vector<const MaskMod*>& test_mask_mods() {
  static const auto stripes = make_mask_mod([](int64_t b, int64_t h, int64_t q, int64_t k) { return (q + 2 * k + b + h) % 5 != 0; });
  static const auto blocks = make_mask_mod([](int64_t, int64_t, int64_t q, int64_t k) { return (q / 70) == (k / 90); });
  static const auto local = make_mask_mod([](int64_t, int64_t h, int64_t q, int64_t k) {
    return k <= q + 3 && k + 40 * (h + 1) >= q;  // a per-head window around the top-left diagonal
  });
  static const auto far_keys = make_mask_mod([](int64_t, int64_t, int64_t, int64_t k) { return k >= 300; });
  static const std::vector<const MaskMod*> mods{&stripes, &blocks, &local, &far_keys};
  return mods;
}

inline const std::vector<const ScoreMod*>& test_score_mods() {
  static const auto cap = make_score_mod(
      [](auto s, int64_t, int64_t, int64_t, int64_t) { return decltype(s)(4) * std::tanh(s / decltype(s)(4)); },
      [](auto s, int64_t, int64_t, int64_t, int64_t) {
        const auto t = std::tanh(s / decltype(s)(4));
        return decltype(s)(1) - t * t;
      });
  static const auto bias = make_score_mod(
      [](auto s, int64_t, int64_t h, int64_t q, int64_t k) {
        return s - decltype(s)(0.05) * decltype(s)(h + 1) * decltype(s)(std::abs(q - k));  // ALiBi-like, top-left
      },
      [](auto s, int64_t, int64_t, int64_t, int64_t) { return decltype(s)(1); });
  static const auto wave = make_score_mod(
      [](auto s, int64_t, int64_t, int64_t q, int64_t k) {
        return s + decltype(s)(0.5) * std::sin(s + decltype(s)(q % 7 - k % 5));
      },
      [](auto s, int64_t, int64_t, int64_t q, int64_t k) {
        return decltype(s)(1) + decltype(s)(0.5) * std::cos(s + decltype(s)(q % 7 - k % 5));
      });
  static const std::vector<const ScoreMod*> mods{&cap, &bias, &wave};
  return mods;
}

struct Problem {
  int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, d = 1, dv = 1;
  Tensor<double> q, k, v, grad_out;
  Tensor<uint8_t> bool_mask;     // empty when absent
  Tensor<double> additive_mask;  // empty when absent
  std::vector<int64_t> key_lengths;
  Causal causal = Causal::none;
  ScalePolicy scale{};
  // Variants (attention_variants.hpp).
  Window window{};
  std::optional<double> softcap{};
  std::vector<double> alibi_slopes, sinks;  // empty when absent
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  double dropout_p = 0;
  uint64_t seed = 0;
  const MaskMod* mask_mod = nullptr;
  const ScoreMod* score_mod = nullptr;
  int64_t query_offset = 0, key_offset = 0;  // where the call sits in a longer sequence

  // Options in precision T; the float caller passes float copies of the additive mask,
  // slopes and sinks (FloatProblem).
  template <class T>
  AttentionOptions<T> options(const Tensor<T>* additive, std::span<const T> slopes = {},
                              std::span<const T> sink_logits = {}) const {
    AttentionOptions<T> o;
    o.scale = scale;
    o.causal = causal;
    if (bool_mask.numel() > 0) o.bool_mask = bool_mask.view();
    if (additive != nullptr && additive->numel() > 0) o.additive_mask = additive->view();
    o.key_lengths = key_lengths;
    o.window = window;
    o.softcap = softcap;
    o.alibi_slopes = slopes;
    o.sinks = sink_logits;
    o.cu_seqlens_q = cu_seqlens_q;
    o.cu_seqlens_k = cu_seqlens_k;
    o.dropout.p = dropout_p;
    o.dropout.seed = seed;
    o.mask_mod = mask_mod;
    o.score_mod = score_mod;
    o.query_offset = query_offset;
    o.key_offset = key_offset;
    return o;
  }
  AttentionOptions<double> options() const { return options<double>(&additive_mask, alibi_slopes, sinks); }

  // The sequence frame of row i: its first key, key count, index within the sequence
  // and query count (one sequence per batch entry unless packed).
  struct Frame {
    int64_t seq, key0, n_keys, i_local, n_q;
  };
  Frame frame(int64_t b, int64_t i) const {
    if (cu_seqlens_q.empty())
      return {b, 0, key_lengths.empty() ? Nk : key_lengths[static_cast<size_t>(b)], i, Nq};
    int64_t s = 0;
    while (!(cu_seqlens_q[static_cast<size_t>(s)] <= i && i < cu_seqlens_q[static_cast<size_t>(s) + 1])) ++s;
    const auto u = static_cast<size_t>(s);
    return {s, cu_seqlens_k[u], cu_seqlens_k[u + 1] - cu_seqlens_k[u], i - cu_seqlens_q[u],
            cu_seqlens_q[u + 1] - cu_seqlens_q[u]};
  }

  // The keys row i of (batch b, head h) may see by padding, causality, the window,
  // packed sequences, the boolean mask and mask_mod, written out here rather than taken
  // from the library, so that the tests' independent formulations stay independent of its rule.
  std::vector<bool> visible_keys(int64_t b, int64_t h, int64_t i) const {
    const Frame f = frame(b, i);
    // Positions in the longer sequence: row i_local is row query_offset + i_local, key jl is key_offset + jl.
    const int64_t row = f.i_local + query_offset, diag = row + f.n_keys - f.n_q;
    std::vector<bool> vis(static_cast<size_t>(Nk));
    for (int64_t j = 0; j < Nk; ++j) {
      const int64_t jl = j - f.key0;
      bool ok = 0 <= jl && jl < f.n_keys;
      const int64_t key = jl + key_offset;
      if (causal == Causal::top_left) ok = ok && key <= row;
      if (causal == Causal::bottom_right) ok = ok && key <= diag;
      if (window.left >= 0) ok = ok && key >= diag - window.left;
      if (window.right >= 0) ok = ok && key <= diag + window.right;
      if (bool_mask.numel())
        ok = ok && bool_mask(bool_mask.shape()[0] == 1 ? 0 : b, bool_mask.shape()[1] == 1 ? 0 : h, i, j);
      if (mask_mod != nullptr) {
        uint8_t keep = 0;
        mask_mod->keep_row(b, h, i, j, 1, &keep);
        ok = ok && keep != 0;
      }
      vis[static_cast<size_t>(j)] = ok;
    }
    return vis;
  }

  // ALiBi's bias of (b, h, i, j): −slope·|i + n_k − n_q − j| within the sequence; 0 without ALiBi.
  double alibi_bias(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (alibi_slopes.empty()) return 0.0;
    const Frame f = frame(b, i);
    const auto n = static_cast<int64_t>(alibi_slopes.size());
    const double slope = alibi_slopes[static_cast<size_t>(n == Hq ? h : f.seq * Hq + h)];
    return -slope *
           static_cast<double>(std::abs(query_offset + f.i_local + f.n_keys - f.n_q - (key_offset + j - f.key0)));
  }

  std::string describe() const {
    std::ostringstream s;
    s << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nk=" << Nk << " d=" << d << " dv=" << dv
      << " causal=" << to_string(causal) << " scale=" << scale.name()
      << " bool_mask=" << (bool_mask.numel() ? to_string(bool_mask.shape()) : "none")
      << " additive=" << (additive_mask.numel() ? to_string(additive_mask.shape()) : "none") << " padding=";
    if (key_lengths.empty()) s << "none";
    for (int64_t l : key_lengths) s << l << ",";
    if (window.present()) s << " window=(" << window.left << "," << window.right << ")";
    if (softcap) s << " softcap=" << *softcap;
    if (!alibi_slopes.empty()) s << " alibi=" << alibi_slopes.size() << " slopes";
    if (!sinks.empty()) s << " sinks";
    if (!cu_seqlens_q.empty()) {
      s << " cu_seqlens_q=";
      for (int64_t c : cu_seqlens_q) s << c << ",";
      s << " cu_seqlens_k=";
      for (int64_t c : cu_seqlens_k) s << c << ",";
    }
    if (dropout_p != 0) s << " dropout=" << dropout_p << " seed=" << seed;
    if (mask_mod != nullptr) s << " mask_mod";
    if (score_mod != nullptr) s << " score_mod";
    if (query_offset != 0 || key_offset != 0) s << " offsets=(" << query_offset << "," << key_offset << ")";
    return s.str();
  }
};

// Offsets 0 = c_0 ≤ c_1 ≤ … ≤ c_n = total of n packed sequences with random lengths
// (some empty when allow_empty).
inline std::vector<int64_t> random_offsets(std::mt19937_64& rng, int64_t n, int64_t total, bool allow_empty) {
  std::vector<int64_t> cuts;
  for (int64_t s = 1; s < n; ++s)
    cuts.push_back(std::uniform_int_distribution<int64_t>(allow_empty ? 0 : std::min<int64_t>(1, total), total)(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> c{0};
  c.insert(c.end(), cuts.begin(), cuts.end());
  c.push_back(total);
  return c;
}

inline void fill_normal(Tensor<double>& t, std::mt19937_64& rng, double sigma = 1.0) {
  std::normal_distribution<double> n(0.0, sigma);
  for (double& x : t.storage()) x = n(rng);
}

// A problem of the given sizes, q, k, v and dO standard normal, no options.
inline Problem make_problem(std::mt19937_64& rng, int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk,
                            int64_t d, int64_t dv) {
  Problem p;
  p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.Nq = Nq, p.Nk = Nk, p.d = d, p.dv = dv;
  p.q = Tensor<double>({B, Hq, Nq, d});
  p.k = Tensor<double>({B, Hkv, Nk, d});
  p.v = Tensor<double>({B, Hkv, Nk, dv});
  p.grad_out = Tensor<double>({B, Hq, Nq, dv});
  for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) fill_normal(*t, rng);
  return p;
}

// Draws the variants of lim into p (a problem of random_problem's making).
inline void add_random_variants(Problem& p, std::mt19937_64& rng, const ProblemLimits& lim) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto coin = [&](double prob) { return prob > 0 && std::bernoulli_distribution(prob)(rng); };
  if (coin(lim.p_window)) {
    const int64_t span = std::max(p.Nq, p.Nk);
    p.window.left = coin(0.2) ? -1 : uni(0, span);
    p.window.right = coin(0.3) ? -1 : coin(0.3) ? 0 : uni(0, span);
  }
  if (coin(lim.p_softcap)) p.softcap = std::uniform_real_distribution<double>(0.5, 30.0)(rng);
  if (coin(lim.p_packed) && p.B == 1) {
    const int64_t n = uni(1, 5);
    p.key_lengths.clear();
    p.cu_seqlens_q = random_offsets(rng, n, p.Nq, coin(0.3));
    p.cu_seqlens_k = random_offsets(rng, n, p.Nk, coin(0.3));
  }
  if (coin(lim.p_alibi)) {
    const int64_t n_seq = p.cu_seqlens_q.empty() ? p.B : static_cast<int64_t>(p.cu_seqlens_q.size()) - 1;
    p.alibi_slopes.resize(static_cast<size_t>(coin(0.5) ? p.Hq : n_seq * p.Hq));
    for (double& x : p.alibi_slopes) x = std::uniform_real_distribution<double>(0.0, 0.5)(rng);
  }
  if (coin(lim.p_sinks)) {
    p.sinks.resize(static_cast<size_t>(p.Hq));
    for (double& x : p.sinks) x = std::normal_distribution<double>(0.0, 1.5)(rng);
  }
  if (coin(lim.p_dropout)) {
    p.dropout_p = std::uniform_real_distribution<double>(0.05, 0.6)(rng);
    p.seed = rng();
  }
  if (coin(lim.p_mask_mod)) p.mask_mod = test_mask_mods()[static_cast<size_t>(uni(0, 3))];
  if (coin(lim.p_score_mod)) p.score_mod = test_score_mods()[static_cast<size_t>(uni(0, 2))];
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
  add_random_variants(p, rng, lim);
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
