// Reference attention in double precision: one query row at a time, with every
// score kept in a row buffer of length Nk. Clarity over speed; this is the oracle.
// Every option of attention_options.hpp and attention_variants.hpp is written out
// here as its definition, row by row.
#include "attnlab/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "attnlab/attention.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_checks.hpp"
#include "core/interrupt_poll.hpp"
#include "core/philox.hpp"

namespace attnlab::reference {
namespace {

using detail::AttentionDims;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double dot(const double* a, int64_t sa, const double* b, int64_t sb, int64_t n) {
  double s = 0;
  for (int64_t t = 0; t < n; ++t) s += a[t * sa] * b[t * sb];
  return s;
}

// The scores of one query row. S[j] = −inf for keys the row may not see; with sinks,
// S has one more entry, S[Nk] = sink_h, the sink's logit (no value row).
struct RowScores {
  std::vector<double> S;  // [Nk] (+1 with sinks)
  std::vector<double> G;  // [Nk] ∂S_j/∂(scale_i q_i·k_j): through softcap and score_mod, else 1
  double scale = 0;       // scale_i, which may depend on the row's visible-key count
  bool poisoned = false;  // a visible score was NaN or ±inf, with check_finite off: NaN out
};

// S_ij for the visible keys of row i, in the order of attention_variants.hpp: the
// scale, softcap, ALiBi, score_mod, then the additive mask.
void compute_row_scores(ConstView<double> q, ConstView<double> k, const AttentionOptions<double>& opt,
                        const AttentionDims& dims, int64_t b, int64_t h, int64_t i, RowScores& row) {
  const int64_t hk = h / dims.group();
  const double* am = detail::mask_row(opt.additive_mask, b, h, i);
  const int64_t am_st = opt.additive_mask.stride(Axis::dim);
  const detail::RowFrame frame = detail::row_frame(dims, opt, b, i);
  const double slope = opt.alibi_slopes.empty() ? 0.0 : detail::alibi_slope(dims, opt, frame.seq, h);
  row.scale = opt.scale(dims.d, detail::visible_keys(dims, opt, b, h, i));
  row.S.assign(static_cast<size_t>(dims.Nk), kNegInf);
  row.G.assign(static_cast<size_t>(dims.Nk), 1.0);
  if (!opt.sinks.empty()) row.S.push_back(opt.sinks[static_cast<size_t>(h)]);
  row.poisoned = false;
  const double* qi = q.row(b, h, i);
  detail::for_each_visible_key(dims, opt, b, h, i, [&](int64_t j) {
    double s = row.scale * dot(qi, q.stride(Axis::dim), k.row(b, hk, j), k.stride(Axis::dim), dims.d);
    // Finite inputs can still overflow the dot product (|q|,|k| ~ 1e160); a
    // +inf or NaN score has no softmax, so it is an error rather than a NaN output.
    // With check_finite off the caller takes NaN in, NaN out: the row's O and L become NaN.
    if (!std::isfinite(s) && !opt.check_finite) {
      row.poisoned = true;
      return true;
    }
    if (!std::isfinite(s))
      throw Error(fmt::format("attention: score of q[{}, {}, {}] and k[{}, {}, {}] overflows to {} (inputs too large)",
                              b, h, i, b, hk, j, s));
    double g = 1.0;
    if (opt.softcap) {  // s ← c·tanh(s/c); ∂/∂s = 1 − tanh²
      const double c = *opt.softcap, t = std::tanh(s / c);
      s = c * t;
      g = 1.0 - t * t;
    }
    if (slope != 0.0) s -= slope * static_cast<double>(std::abs(frame.diag - j));
    if (opt.score_mod != nullptr) {
      double ds = 1.0;
      opt.score_mod->score_row(b, h, i, j, 1, &s, &ds);
      g *= ds;
    }
    if (am != nullptr) s += am[j * am_st];
    row.S[static_cast<size_t>(j)] = s;
    row.G[static_cast<size_t>(j)] = g;
    return false;
  });
}

// Dropout's factor for P_ij in O: 1/(1 − p) if kept, 0 if dropped (1 without dropout).
double dropout_factor(const AttentionOptions<double>& opt, uint32_t threshold, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
  if (!opt.dropout.present()) return 1.0;
  return detail::dropout_keep(opt.dropout.seed, threshold, b, h, i, j) ? 1.0 / (1.0 - opt.dropout.p) : 0.0;
}

// The forward, row by row; diagnostics, when given, from each row's probabilities.
void forward(ConstView<double> q, ConstView<double> k, ConstView<double> v, const AttentionOptions<double>& options,
             TensorView<double> out, TensorView<double> lse, const RowDiagnostics<double>* diag,
             TensorView<uint8_t> applied, const ComputeConfig& config) {
  detail::InterruptPoll interrupted(&config.interrupt);
  const AttentionDims dims = detail::check_forward_args(q, k, v, options, out, lse);
  detail::check_dropout_mask(applied, dims);
  if (diag != nullptr) detail::check_diagnostics(*diag, dims);
  RowScores row;
  std::vector<double> P;  // [Nk] the row's probabilities, for the diagnostics
  // A row's diagnostics from its scores S and max m. Near one-hot, p_max = 1 − ε
  // rounds away most of ε ~ 1e-11, so the entropy is not taken as −Σ p log p of
  // the rounded p but as log1p(lo) + Σ p_j (m − S_j), with lo = Σ_{j≠argmax} e^{S_j−m}
  // (l = 1 + lo): every term ≥ 0, nothing cancels. ‖J‖_F² comes from
  // jacobian_frobenius_sq, which is written to be stable there already.
  auto write_diagnostics = [&](int64_t b, int64_t h, int64_t i, double m) {
    double max_prob = 0, ent = 0, fro = 0;
    const auto n = static_cast<int64_t>(row.S.size());  // the keys, and the sink if any
    if (m != kNegInf) {  // a fully masked row keeps 0 in all three
      const int64_t argmax = std::find(row.S.begin(), row.S.end(), m) - row.S.begin();
      P.resize(static_cast<size_t>(n));
      double lo = 0;
      for (int64_t j = 0; j < n; ++j) {
        P[static_cast<size_t>(j)] = std::exp(row.S[static_cast<size_t>(j)] - m);  // u_j, normalised below
        if (j != argmax) lo += P[static_cast<size_t>(j)];
      }
      const double l = 1 + lo;
      for (int64_t j = 0; j < n; ++j) {
        const double s = row.S[static_cast<size_t>(j)];
        P[static_cast<size_t>(j)] /= l;
        if (s != kNegInf) ent += P[static_cast<size_t>(j)] * (m - s);
      }
      ent += std::log1p(lo);
      max_prob = 1 / l;
      fro = jacobian_frobenius_sq(std::span<const double>(P));
    }
    if (diag->max_prob.present()) diag->max_prob(b, h, i, 0) = max_prob;
    if (diag->entropy.present()) diag->entropy(b, h, i, 0) = ent;
    if (diag->jacobian_fro_sq.present()) diag->jacobian_fro_sq(b, h, i, 0) = fro;
  };
  if (applied.present())
    for (int64_t b = 0; b < dims.B; ++b)
      for (int64_t h = 0; h < dims.Hq; ++h)
        for (int64_t i = 0; i < dims.Nq; ++i)
          for (int64_t j = 0; j < dims.Nk; ++j) applied(b, h, i, j) = 0;
  const uint32_t threshold = detail::dropout_threshold(options.dropout.p);
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t h = 0; h < dims.Hq; ++h) {
      const int64_t hk = h / dims.group();
      for (int64_t i = 0; i < dims.Nq; ++i) {
        if (interrupted.ask()) throw Interrupted("attention: interrupted by the caller (ComputeConfig::interrupt)");
        compute_row_scores(q, k, options, dims, b, h, i, row);
        double m = kNegInf;
        for (double s : row.S) m = std::max(m, s);
        for (int64_t c = 0; c < dims.dv; ++c) out(b, h, i, c) = 0.0;
        if (row.poisoned) {  // check_finite off and a NaN/inf score: NaN out (the engine does the same)
          constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
          for (int64_t c = 0; c < dims.dv; ++c) out(b, h, i, c) = kNaN;
          lse(b, h, i, 0) = kNaN;
          if (diag != nullptr)
            for (auto* d : {&diag->max_prob, &diag->entropy, &diag->jacobian_fro_sq})
              if (d->present()) (*d)(b, h, i, 0) = kNaN;
          continue;
        }
        if (m == kNegInf) {  // fully masked row: O = 0, L = −inf
          lse(b, h, i, 0) = kNegInf;
          if (diag != nullptr) write_diagnostics(b, h, i, m);
          continue;
        }
        double l = 0;
        for (double s : row.S) l += std::exp(s - m);  // exp(−inf) = 0 for masked keys; the sink too
        for (int64_t j = 0; j < dims.Nk; ++j) {
          const double s = row.S[static_cast<size_t>(j)];
          if (s == kNegInf) continue;
          const double z = dropout_factor(options, threshold, b, h, i, j);
          if (applied.present()) applied(b, h, i, j) = z != 0.0;
          const double p = std::exp(s - m) * z;
          if (p == 0) continue;
          for (int64_t c = 0; c < dims.dv; ++c) out(b, h, i, c) += p * v(b, hk, j, c);
        }
        for (int64_t c = 0; c < dims.dv; ++c) out(b, h, i, c) /= l;
        lse(b, h, i, 0) = m + std::log(l);
        if (diag != nullptr) write_diagnostics(b, h, i, m);
      }
    }
  if (options.check_finite) detail::check_result_finite<double>(out, "out");
}

void backward(ConstView<double> q, ConstView<double> k, ConstView<double> v, ConstView<double> out,
              ConstView<double> lse, ConstView<double> grad_out, const AttentionOptions<double>& options,
              TensorView<double> dq, TensorView<double> dk, TensorView<double> dv, std::span<double> dsinks,
              const ComputeConfig& config) {
  const AttentionDims dims = detail::check_backward_args(q, k, v, out, lse, grad_out, options, dq, dk, dv, dsinks);
  detail::InterruptPoll interrupted(&config.interrupt);
  for (int64_t b = 0; b < dims.B; ++b) {
    for (int64_t h = 0; h < dims.Hq; ++h)
      for (int64_t i = 0; i < dims.Nq; ++i)
        for (int64_t c = 0; c < dims.d; ++c) dq(b, h, i, c) = 0.0;
    for (int64_t h = 0; h < dims.Hkv; ++h)
      for (int64_t j = 0; j < dims.Nk; ++j) {
        for (int64_t c = 0; c < dims.d; ++c) dk(b, h, j, c) = 0.0;
        for (int64_t c = 0; c < dims.dv; ++c) dv(b, h, j, c) = 0.0;
      }
  }
  std::fill(dsinks.begin(), dsinks.end(), 0.0);
  const uint32_t threshold = detail::dropout_threshold(options.dropout.p);
  RowScores row;
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t h = 0; h < dims.Hq; ++h) {
      const int64_t hk = h / dims.group();  // heads sharing this K/V head add into the same dK, dV
      for (int64_t i = 0; i < dims.Nq; ++i) {
        if (interrupted.ask()) throw Interrupted("attention: interrupted by the caller (ComputeConfig::interrupt)");
        const double L = lse(b, h, i, 0);
        if (L == kNegInf) continue;  // fully masked row: no gradient flows
        compute_row_scores(q, k, options, dims, b, h, i, row);
        const double* dOi = grad_out.row(b, h, i);
        const int64_t do_st = grad_out.stride(Axis::dim);
        // D_i = dO_i·O_i = Σ_j P_ij dP_ij, also with dropout (O holds the dropped P) and sinks
        // (the sink has no value row: its dP is 0).
        const double D = dot(dOi, do_st, out.row(b, h, i), out.stride(Axis::dim), dims.dv);
        for (int64_t j = 0; j < dims.Nk; ++j) {
          // P_ij = exp(S_ij − L_i). L ≥ S exactly (L is a log-sum-exp over S), so clamping the
          // exponent at 0 changes nothing mathematically but keeps a rounded L from making P > 1.
          const double P = std::exp(std::min(row.S[static_cast<size_t>(j)] - L, 0.0));
          if (P == 0) continue;
          const double z = dropout_factor(options, threshold, b, h, i, j);  // O used P_ij·z
          const double dP = dot(dOi, do_st, v.row(b, hk, j), v.stride(Axis::dim), dims.dv);  // dO_i·v_j
          const double dS = P * (z * dP - D);
          const double g = row.scale * row.G[static_cast<size_t>(j)] * dS;  // back through softcap, score_mod
          for (int64_t c = 0; c < dims.dv; ++c) dv(b, hk, j, c) += P * z * dOi[c * do_st];
          for (int64_t c = 0; c < dims.d; ++c) {
            dq(b, h, i, c) += g * k(b, hk, j, c);
            dk(b, hk, j, c) += g * q(b, h, i, c);
          }
        }
        // The sink is one more logit with dP = 0: dS_sink = P_sink (0 − D).
        if (!dsinks.empty()) dsinks[static_cast<size_t>(h)] -= std::exp(std::min(row.S.back() - L, 0.0)) * D;
      }
    }
  if (options.check_finite) detail::check_result_finite<double>(dq, "dq");
  if (options.check_finite) detail::check_result_finite<double>(dk, "dk");
  if (options.check_finite) detail::check_result_finite<double>(dv, "dv");
}

}  // namespace

template <class T>
typename ReferenceElement<T>::returns attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                        const AttentionOptions<Accum<T>>& options,
                                                        const ForwardOutputs<T>& outputs, const ComputeConfig& config) {
  forward(q, k, v, options, outputs.out, outputs.lse, outputs.diagnostics ? &*outputs.diagnostics : nullptr,
          outputs.dropout_mask, config);
}

template <class T>
typename ReferenceElement<T>::returns attention_backward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                         ConstView<T> out, ConstView<Accum<T>> lse,
                                                         ConstView<T> grad_out,
                                                         const AttentionOptions<Accum<T>>& options,
                                                         const BackwardOutputs<T>& grads, const ComputeConfig& config) {
  backward(q, k, v, out, lse, grad_out, options, grads.dq, grads.dk, grads.dv, grads.dsinks, config);
}

template ATTNLAB_API void attention_forward<double>(ConstView<double>, ConstView<double>, ConstView<double>,
                                                    const AttentionOptions<double>&, const ForwardOutputs<double>&,
                                                    const ComputeConfig&);
template ATTNLAB_API void attention_backward<double>(ConstView<double>, ConstView<double>, ConstView<double>,
                                                     ConstView<double>, ConstView<double>, ConstView<double>,
                                                     const AttentionOptions<double>&, const BackwardOutputs<double>&,
                                                     const ComputeConfig&);

}  // namespace attnlab::reference
