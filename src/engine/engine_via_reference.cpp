// TEMPORARY (replaced by the fused kernel, issue 3): the engine's API served by
// the double-precision reference, so that the lab, training and bindings can be
// written against attnlab/engine.hpp while the kernel is built. Correct, slow,
// O(N) memory per row.
#include <cmath>
#include <vector>

#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_checks.hpp"

namespace attnlab {
namespace {

Tensor<double> to_double(ConstView<float> x) {
  Tensor<double> y(x.shape());
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t h = 0; h < x.heads(); ++h)
      for (int64_t i = 0; i < x.seq(); ++i)
        for (int64_t j = 0; j < x.dim(); ++j) y(b, h, i, j) = x(b, h, i, j);
  return y;
}

void store(const Tensor<double>& x, TensorView<float> y) {
  for (int64_t b = 0; b < y.batch(); ++b)
    for (int64_t h = 0; h < y.heads(); ++h)
      for (int64_t i = 0; i < y.seq(); ++i)
        for (int64_t j = 0; j < y.dim(); ++j) y(b, h, i, j) = static_cast<float>(x(b, h, i, j));
}

struct DoubleOptions {
  Tensor<double> additive;
  AttentionOptions<double> options;
  explicit DoubleOptions(const AttentionOptions<float>& o) {
    options.scale = o.scale;
    options.causal = o.causal;
    options.bool_mask = o.bool_mask;
    options.key_lengths = o.key_lengths;
    options.check_finite = o.check_finite;
    if (o.additive_mask.present()) {
      additive = to_double(o.additive_mask);
      options.additive_mask = additive.view();
    }
  }
};

}  // namespace

void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                       const AttentionOptions<float>& options, TensorView<float> out, TensorView<float> lse,
                       const RowDiagnostics* diagnostics, const EngineConfig&) {
  const auto dims = detail::check_forward_args(q, k, v, options, out, lse);
  const DoubleOptions o(options);
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
  const auto f = reference::attention_forward(qd.view(), kd.view(), vd.view(), o.options);
  store(f.out, out);
  store(f.lse, lse);
  if (diagnostics == nullptr) return;
  std::vector<double> p(static_cast<size_t>(dims.Nk));
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t h = 0; h < dims.Hq; ++h)
      for (int64_t i = 0; i < dims.Nq; ++i) {
        const double L = f.lse(b, h, i, 0);
        const int64_t end = detail::key_end(dims, o.options, b, i);
        const uint8_t* bm = detail::mask_row(o.options.bool_mask, b, h, i);
        const double* am = detail::mask_row(o.options.additive_mask, b, h, i);
        const double scale = o.options.scale(dims.d, detail::visible_keys(dims, o.options, b, h, i));
        double pmax = 0, ent = 0, s2 = 0, s3 = 0;
        for (int64_t j = 0; L != -INFINITY && j < end; ++j) {
          if (bm != nullptr && bm[j * o.options.bool_mask.stride(kDim)] == 0) continue;
          double s = 0;
          for (int64_t c = 0; c < dims.d; ++c) s += qd(b, h, i, c) * kd(b, h / dims.group(), j, c);
          s = s * scale + (am ? am[j * o.options.additive_mask.stride(kDim)] : 0.0);
          const double pj = std::exp(s - L);
          pmax = std::max(pmax, pj);
          if (pj > 0) ent -= pj * std::log(pj);
          s2 += pj * pj;
          s3 += pj * pj * pj;
        }
        if (diagnostics->max_prob.present()) diagnostics->max_prob(b, h, i, 0) = static_cast<float>(pmax);
        if (diagnostics->entropy.present()) diagnostics->entropy(b, h, i, 0) = static_cast<float>(ent);
        if (diagnostics->jacobian_fro_sq.present())
          diagnostics->jacobian_fro_sq(b, h, i, 0) = static_cast<float>(s2 - 2 * s3 + s2 * s2);
      }
}

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, const EngineConfig&) {
  detail::check_backward_args(q, k, v, out, lse, grad_out, options, dq, dk, dv);
  const DoubleOptions o(options);
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), od = to_double(out), ld = to_double(lse),
             gd = to_double(grad_out);
  Tensor<double> dqd(q.shape()), dkd(k.shape()), dvd(v.shape());
  reference::attention_backward(qd.view(), kd.view(), vd.view(), od.view(), ld.view(), gd.view(), o.options,
                                dqd.view(), dkd.view(), dvd.view());
  store(dqd, dq);
  store(dkd, dk);
  store(dvd, dv);
}

AttentionForward<float> attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                          const AttentionOptions<float>& options, const EngineConfig& config) {
  AttentionForward<float> r{Tensor<float>({q.batch(), q.heads(), q.seq(), v.dim()}),
                            Tensor<float>({q.batch(), q.heads(), q.seq(), 1})};
  attention_forward(q, k, v, options, r.out.view(), r.lse.view(), nullptr, config);
  return r;
}

AttentionGrads<float> attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                         const AttentionForward<float>& forward, ConstView<float> grad_out,
                                         const AttentionOptions<float>& options, const EngineConfig& config) {
  AttentionGrads<float> g{Tensor<float>(q.shape()), Tensor<float>(k.shape()), Tensor<float>(v.shape())};
  attention_backward(q, k, v, forward.out.view(), forward.lse.view(), grad_out, options, g.dq.view(), g.dk.view(),
                     g.dv.view(), config);
  return g;
}

std::string engine_target() { return "reference (temporary)"; }

}  // namespace attnlab
