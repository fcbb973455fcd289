#pragma once
// What a user would otherwise write: attention as matmul + softmax + matmul in
// float32, the Nq×Nk score and probability matrices materialised, and the
// matching backward (dV = Pᵀ dO, dP = dO Vᵀ, dS = P∘(dP − rowsum(P∘dP)),
// dQ = scale dS K, dK = scale dSᵀ Q), with the variants written element by element.
// Float accumulation in the obvious order.
// The engine's accuracy rule is stated relative to this implementation's
// error: both are measured against the double reference.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnlab/float16.hpp"
#include "core/philox.hpp"
#include "problem.hpp"

namespace attnlab::test {

struct FloatProblem {
  Tensor<float> q, k, v, grad_out, additive_mask;
  std::vector<float> alibi_slopes, sinks;
  explicit FloatProblem(const Problem& p)
      : q(cast<float>(p.q)), k(cast<float>(p.k)), v(cast<float>(p.v)), grad_out(cast<float>(p.grad_out)),
        additive_mask(cast<float>(p.additive_mask)), alibi_slopes(p.alibi_slopes.begin(), p.alibi_slopes.end()),
        sinks(p.sinks.begin(), p.sinks.end()) {}
  // p's options in float, over these copies (they must outlive the options).
  AttentionOptions<float> options(const Problem& p) const {
    return p.options<float>(&additive_mask, alibi_slopes, sinks);
  }
  // The double problem whose inputs are exactly these floats: the reference
  // must see the same inputs as the float implementations.
  static Problem rounded(const Problem& p) {
    Problem r = p;
    for (auto* t : {&r.q, &r.k, &r.v, &r.grad_out, &r.additive_mask})
      for (double& x : t->storage()) x = static_cast<double>(static_cast<float>(x));
    for (auto* t : {&r.alibi_slopes, &r.sinks})
      for (double& x : *t) x = static_cast<double>(static_cast<float>(x));
    if (r.softcap) r.softcap = static_cast<double>(static_cast<float>(*r.softcap));
    return r;
  }
};

struct NaiveResult {
  Tensor<float> out, lse, dq, dk, dv, dsinks;  // dsinks [1, Hq, 1, 1] (all 0 without sinks)
  double max_abs_D = 0;       // max_i |D_i|, D_i = rowsum(dO∘O)
  double max_column_mass = 0;  // max_j Σ_i P_ij over the rows of the query heads sharing a key head
};

// The variants as a user would write them around the matrices: scores treated element by
// element (softcap, ALiBi, score_mod), the sink as one more logit, dropout as a mask on P.
// d_from_out: D = rowsum(dO∘O) with O this forward's, or `out_for_D` when given (the
// 16-bit regime: the O a caller holds is the forward's, rounded to the type).
// p_to_bfloat16: P rounded to bfloat16 for O = P·V, as FlashAttention's bfloat16 products
// (and the engine's on VDPBF16PS) do; the sums stay float32.
inline NaiveResult naive_float_attention(const Problem& p, const FloatProblem& f, bool d_from_out = false,
                                         const Tensor<float>* out_for_D = nullptr, bool p_to_bfloat16 = false,
                                         bool grads_bfloat16 = false) {
  // grads_bfloat16: P (after dropout) rounded to bfloat16 for dV, dS for dQ and dK, as the
  // engine's backward on VDPBF16PS and FlashAttention's do.
  const auto r16 = [grads_bfloat16](float x) { return grads_bfloat16 ? round_to<bfloat16>(x) : x; };
  NaiveResult r{Tensor<float>({p.B, p.Hq, p.Nq, p.dv}), Tensor<float>({p.B, p.Hq, p.Nq, 1}),
                Tensor<float>(p.q.shape()),          Tensor<float>(p.k.shape()),
                Tensor<float>(p.v.shape()),          Tensor<float>({1, p.Hq, 1, 1})};
  const int64_t group = p.Hq / p.Hkv;
  std::vector<float> S(static_cast<size_t>(p.Nq * p.Nk)), P(S.size()), dP(S.size()), G(S.size()), Z(S.size(), 1.0f);
  std::vector<float> scale(static_cast<size_t>(p.Nq));
  const uint32_t threshold = detail::dropout_threshold(p.dropout_p);
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
  const float cap = p.softcap ? static_cast<float>(*p.softcap) : 0.0f;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t hk = h / group;
      const float sink = p.sinks.empty() ? -INFINITY : f.sinks[static_cast<size_t>(h)];
      for (int64_t i = 0; i < p.Nq; ++i) {
        const std::vector<bool> vis = p.visible_keys(b, h, i);
        const auto visible = static_cast<int64_t>(std::count(vis.begin(), vis.end(), true));
        const float sc = static_cast<float>(p.scale(p.d, visible));
        scale[static_cast<size_t>(i)] = sc;
        float m = sink;
        for (int64_t j = 0; j < p.Nk; ++j) {
          const size_t ij = static_cast<size_t>(i * p.Nk + j);
          float s = -INFINITY, g = 1.0f;
          if (vis[static_cast<size_t>(j)]) {
            float dot = 0;
            for (int64_t c = 0; c < p.d; ++c) dot += f.q(b, h, i, c) * f.k(b, hk, j, c);
            s = dot * sc;
            if (cap != 0) {
              const float t = std::tanh(s / cap);
              s = cap * t;
              g = 1 - t * t;
            }
            s += static_cast<float>(p.alibi_bias(b, h, i, j));
            if (p.score_mod != nullptr) {
              float ds = 1;
              p.score_mod->score_row(b, h, i, j, 1, &s, &ds);
              g *= ds;
            }
            if (p.additive_mask.numel())
              s += f.additive_mask(p.additive_mask.shape()[0] == 1 ? 0 : b, p.additive_mask.shape()[1] == 1 ? 0 : h, i,
                                   j);
          }
          if (p.dropout_p != 0)
            Z[ij] = detail::dropout_keep(p.seed, threshold, b, h, i, j) ? keep_scale : 0.0f;
          S[ij] = s;
          G[ij] = g;
          m = std::max(m, s);
        }
        float l = m == -INFINITY ? 0.0f : std::exp(sink - m);
        for (int64_t j = 0; j < p.Nk; ++j) {
          const float e = m == -INFINITY ? 0.0f : std::exp(S[static_cast<size_t>(i * p.Nk + j)] - m);
          P[static_cast<size_t>(i * p.Nk + j)] = e;
          l += e;
        }
        for (int64_t j = 0; j < p.Nk; ++j) P[static_cast<size_t>(i * p.Nk + j)] = l > 0 ? P[static_cast<size_t>(i * p.Nk + j)] / l : 0.0f;
        r.lse(b, h, i, 0) = l > 0 ? m + std::log(l) : -INFINITY;
        for (int64_t c = 0; c < p.dv; ++c) {
          float o = 0;
          for (int64_t j = 0; j < p.Nk; ++j) {
            const size_t ij = static_cast<size_t>(i * p.Nk + j);
            o += (p_to_bfloat16 ? round_to<bfloat16>(P[ij]) : P[ij]) * Z[ij] * f.v(b, hk, j, c);
          }
          r.out(b, h, i, c) = o;
        }
      }
      // Backward.
      for (int64_t i = 0; i < p.Nq; ++i) {
        float D = 0;
        for (int64_t j = 0; j < p.Nk; ++j) {
          const size_t ij = static_cast<size_t>(i * p.Nk + j);
          float dp = 0;
          for (int64_t c = 0; c < p.dv; ++c) dp += f.grad_out(b, h, i, c) * f.v(b, hk, j, c);
          dP[ij] = dp * Z[ij];
          D += P[ij] * dP[ij];
        }
        if (d_from_out) {
          D = 0;
          const Tensor<float>& o = out_for_D != nullptr ? *out_for_D : r.out;
          for (int64_t c = 0; c < p.dv; ++c) D += f.grad_out(b, h, i, c) * o(b, h, i, c);
        }
        r.max_abs_D = std::max(r.max_abs_D, static_cast<double>(std::abs(D)));
        if (!p.sinks.empty() && r.lse(b, h, i, 0) != -INFINITY)
          r.dsinks(0, h, 0, 0) -= std::exp(sink - r.lse(b, h, i, 0)) * D;
        for (int64_t j = 0; j < p.Nk; ++j) {
          const size_t ij = static_cast<size_t>(i * p.Nk + j);
          dP[ij] = P[ij] * (dP[ij] - D) * scale[static_cast<size_t>(i)] * G[ij];  // now ∂/∂(q·k)
        }
      }
      for (int64_t i = 0; i < p.Nq; ++i)
        for (int64_t c = 0; c < p.d; ++c) {
          float acc = 0;
          for (int64_t j = 0; j < p.Nk; ++j) acc += r16(dP[static_cast<size_t>(i * p.Nk + j)]) * f.k(b, hk, j, c);
          r.dq(b, h, i, c) = acc;
        }
      for (int64_t j = 0; j < p.Nk; ++j) {
        double mass = 0;
        for (int64_t i = 0; i < p.Nq; ++i) mass += P[static_cast<size_t>(i * p.Nk + j)];
        r.max_column_mass = std::max(r.max_column_mass, mass * static_cast<double>(group));
        for (int64_t c = 0; c < p.d; ++c) {
          float acc = 0;
          for (int64_t i = 0; i < p.Nq; ++i) acc += r16(dP[static_cast<size_t>(i * p.Nk + j)]) * f.q(b, h, i, c);
          r.dk(b, hk, j, c) += acc;
        }
        for (int64_t c = 0; c < p.dv; ++c) {
          float acc = 0;
          for (int64_t i = 0; i < p.Nq; ++i) {
            const size_t ij = static_cast<size_t>(i * p.Nk + j);
            acc += r16(P[ij] * Z[ij]) * f.grad_out(b, h, i, c);
          }
          r.dv(b, hk, j, c) += acc;
        }
      }
    }
  return r;
}

template <class T>
Tensor<double> to_double(const Tensor<T>& x) {
  Tensor<double> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = x.data()[i];
  return y;
}

// A view of the same values as `x` stored with a different memory layout:
// axes permuted in memory and every element `spread` floats apart, so the
// engine must honour arbitrary strides. `storage` keeps the memory alive.
inline TensorView<float> strided_copy(const Tensor<float>& x, const std::array<int, 4>& memory_order, int spread,
                                      std::vector<float>& storage) {
  const Shape s = x.shape();
  Shape strides{};
  int64_t stride = spread;
  for (int a = 3; a >= 0; --a) {  // memory_order[3] is the fastest axis
    strides[memory_order[a]] = stride;
    stride *= s[memory_order[a]];
  }
  storage.assign(static_cast<size_t>(stride), 12345.0f);  // garbage between elements
  TensorView<float> v(storage.data(), s, strides);
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 0; j < s[3]; ++j) v(b, h, i, j) = x(b, h, i, j);
  return v;
}

}  // namespace attnlab::test
