// Experiment `heads` (C11): seed 001's BERT shapes. Q, K, V of [batch 2, 12 heads,
// seq 128, d_k 64] go through the library in one batched call, and the result must
// equal the same computation done head by head on [1, 1, seq, d_k] slices (forward
// and backward, double reference) and the float engine's (with its per-row
// diagnostics). Then per-head saturation with and without the scale: each head's
// q and k are drawn with their own σ_h (heads differ in practice), so the heads
// whose dot products are larger saturate first when the scale is missing.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_results.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct HeadsConfig {
  int64_t batch = 2, heads = 12, seq = 128, d_k = 64;
  double sigma_min = 0.6, sigma_max = 1.4;  // σ of q and k, spread linearly over the heads
  std::string layout = "bhsd";  // bhsd | bshd_strided (a strided view: must agree) | bshd_misread (must fail)
  double exact_tolerance = 1e-12;   // batched vs per-head, double
  double engine_tolerance = 2e-4;   // float engine vs double reference (relative to max |out|, and on max p)
  void bind(Params& p) {
    using namespace rules;
    p.add("batch", batch, "batch size", positive());
    p.add("heads", heads, "attention heads", positive());
    p.add("seq", seq, "sequence length", positive());
    p.add("d_k", d_k, "head dim", positive());
    p.add("sigma_min", sigma_min, "σ of q and k in the first head", positive());
    p.add("sigma_max", sigma_max, "σ of q and k in the last head", positive());
    p.add("layout", layout, "memory layout of Q, K, V: bhsd; bshd_strided (passed as a strided view); bshd_misread (passed as if bhsd: C11 must fail)", one_of({"bhsd", "bshd_strided", "bshd_misread"}));
    p.add("exact_tolerance", exact_tolerance, "batched vs head-by-head, double precision");
    p.add("engine_tolerance", engine_tolerance, "float engine vs double reference, relative");
  }
};

Tensor<double> slice(ConstView<double> t, int64_t b, int64_t h) {
  Tensor<double> s({1, 1, t.seq(), t.dim()});
  for (int64_t i = 0; i < t.seq(); ++i)
    for (int64_t d = 0; d < t.dim(); ++d) s(0, 0, i, d) = t(b, h, i, d);
  return s;
}

// ---- inputs -------------------------------------------------------------------

// σ of head h's q and k, spread linearly from sigma_min (head 0) to sigma_max (the last).
double sigma_of(const HeadsConfig& c, int64_t h) {
  return c.heads == 1 ? c.sigma_min
                      : c.sigma_min + (c.sigma_max - c.sigma_min) * static_cast<double>(h) / static_cast<double>(c.heads - 1);
}

// The logical tensors [B, H, S, D] (what the per-head computation sees), and the
// memory handed to the batched call when the layout is not bhsd.
struct Inputs {
  Tensor<double> q, k, v, dout;             // [B, H, S, D]
  std::vector<double> mq, mk, mv, mo;       // [B, S, H, D] copies (layouts other than bhsd)
};

Inputs make_inputs(const HeadsConfig& c, uint64_t seed) {
  const int64_t B = c.batch, H = c.heads, S = c.seq, D = c.d_k;
  const Shape shape{B, H, S, D};
  auto g = util::rng(seed, "heads");
  std::normal_distribution<double> normal(0, 1);
  Inputs in{Tensor<double>(shape), Tensor<double>(shape), Tensor<double>(shape), Tensor<double>(shape), {}, {}, {}, {}};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t d = 0; d < D; ++d) {
          in.q(b, h, i, d) = sigma_of(c, h) * normal(g);
          in.k(b, h, i, d) = sigma_of(c, h) * normal(g);
          in.v(b, h, i, d) = normal(g);
          in.dout(b, h, i, d) = normal(g);
        }
  // BERT implementations often hold [B, S, H, D] (heads split from the hidden dim); a
  // strided view describes it exactly.
  auto to_bshd = [&](const Tensor<double>& t) {
    std::vector<double> m(static_cast<size_t>(t.numel()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < D; ++d) m[static_cast<size_t>(((b * S + i) * H + h) * D + d)] = t(b, h, i, d);
    return m;
  };
  if (c.layout != "bhsd") in.mq = to_bshd(in.q), in.mk = to_bshd(in.k), in.mv = to_bshd(in.v), in.mo = to_bshd(in.dout);
  return in;
}

// Q, K, V, dO as the batched call receives them: the tensors themselves (bhsd), the
// [B, S, H, D] memory as a strided view (bshd_strided), or that memory misread as
// contiguous [B, H, S, D] (bshd_misread, where C11 must fail).
struct Views {
  ConstView<double> q, k, v, dout;
};

Views as_passed(const HeadsConfig& c, const Inputs& in) {
  if (c.layout == "bhsd") return {in.q.view(), in.k.view(), in.v.view(), in.dout.view()};
  const int64_t H = c.heads, S = c.seq, D = c.d_k;
  const Shape shape{c.batch, H, S, D};
  const Shape strides = c.layout == "bshd_strided" ? Shape{S * H * D, D, H * D, 1} : contiguous_strides(shape);
  return {{in.mq.data(), shape, strides}, {in.mk.data(), shape, strides}, {in.mv.data(), shape, strides},
          {in.mo.data(), shape, strides}};
}

Tensor<float> to_float(ConstView<double> t) {
  Tensor<float> f(t.shape());
  for (int64_t b = 0; b < t.shape()[0]; ++b)
    for (int64_t h = 0; h < t.shape()[1]; ++h)
      for (int64_t i = 0; i < t.shape()[2]; ++i)
        for (int64_t d = 0; d < t.shape()[3]; ++d) f(b, h, i, d) = static_cast<float>(t(b, h, i, d));
  return f;
}

// ---- measure ------------------------------------------------------------------

// Largest |batched − head by head| over out, L, dQ, dK, dV: the reference on [1, 1, S, D]
// slices of the logical tensors against its batched call.
double batched_vs_per_head(const Inputs& in, const detail::AttentionForward<double>& f,
                           const detail::AttentionGrads<double>& gr, const AttentionOptions<double>& o) {
  double worst = 0;
  const int64_t B = in.q.shape()[0], H = in.q.shape()[1], S = in.q.shape()[2], D = in.q.shape()[3];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const auto sq = slice(in.q, b, h), sk = slice(in.k, b, h), sv = slice(in.v, b, h), so = slice(in.dout, b, h);
      const auto fh = detail::allocating_forward(sq, sk, sv, o);
      const auto gh = detail::allocating_backward(sq, sk, sv, fh, so, o);
      for (int64_t i = 0; i < S; ++i) {
        worst = std::max(worst, std::abs(fh.lse(0, 0, i, 0) - f.lse(b, h, i, 0)));
        for (int64_t d = 0; d < D; ++d) {
          worst = std::max(worst, std::abs(fh.out(0, 0, i, d) - f.out(b, h, i, d)));
          worst = std::max(worst, std::abs(gh.dq(0, 0, i, d) - gr.dq(b, h, i, d)));
          worst = std::max(worst, std::abs(gh.dk(0, 0, i, d) - gr.dk(b, h, i, d)));
          worst = std::max(worst, std::abs(gh.dv(0, 0, i, d) - gr.dv(b, h, i, d)));
        }
      }
    }
  return worst;
}

// The attention rows P of the batched double forward: per row its largest probability
// and entropy, and the whole matrix of one head (batch 0, the last head) for the figure.
struct Rows {
  Tensor<double> max_prob, entropy;  // [B, H, S, 1]
  Tensor<double> sample_p;           // [1, 1, S, S]
};

Rows attention_rows(const Views& in, const detail::AttentionForward<double>& f, const ScalePolicy& policy) {
  const int64_t B = in.q.shape()[0], H = in.q.shape()[1], S = in.q.shape()[2], D = in.q.shape()[3];
  Rows r{Tensor<double>({B, H, S, 1}), Tensor<double>({B, H, S, 1}), Tensor<double>({1, 1, S, S})};
  std::vector<double> p(static_cast<size_t>(S));
  const double scale = policy(D, S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += in.q(b, h, i, d) * in.k(b, h, j, d);
          p[static_cast<size_t>(j)] = std::exp(s * scale - f.lse(b, h, i, 0));
          if (b == 0 && h == H - 1) r.sample_p(0, 0, i, j) = p[static_cast<size_t>(j)];
        }
        r.max_prob(b, h, i, 0) = *std::max_element(p.begin(), p.end());
        r.entropy(b, h, i, 0) = entropy<double>(p);
      }
  return r;
}

// The float engine's batched forward (with its row diagnostics) and backward against the reference.
struct EngineAgreement {
  double out = 0;   // max |out − reference| / max |reference out|
  double grad = 0;  // the same for dQ, dK, dV, each relative to its largest entry
  double rows = 0;  // max p absolute, entropy relative to max(1, H)
};

EngineAgreement engine_vs_reference(const Views& in, const detail::AttentionForward<double>& f,
                                    const detail::AttentionGrads<double>& gr, const Rows& rows,
                                    const ScalePolicy& policy) {
  const Shape shape = in.q.shape();
  const int64_t B = shape[0], H = shape[1], S = shape[2];
  Tensor<float> fq = to_float(in.q), fk = to_float(in.k), fv = to_float(in.v);
  Tensor<float> out(shape), lse({B, H, S, 1}), max_prob({B, H, S, 1}), entropy_({B, H, S, 1});
  RowDiagnostics<float> diag;
  diag.max_prob = max_prob.view();
  diag.entropy = entropy_.view();
  AttentionOptions<float> of;
  of.scale = policy;
  attention_forward(fq.view(), fk.view(), fv.view(), of, {out.view(), lse.view(), diag});
  EngineAgreement a;
  double out_scale = 0;
  for (double x : f.out.storage()) out_scale = std::max(out_scale, std::abs(x));
  for (int64_t e = 0; e < f.out.numel(); ++e)
    a.out = std::max(a.out, std::abs(out.data()[e] - f.out.data()[e]) / out_scale);
  Tensor<float> fo = to_float(in.dout), dq(shape), dk(shape), dv(shape);
  attention_backward(fq.view(), fk.view(), fv.view(), out.view(), lse.view(), fo.view(), of,
                     {dq.view(), dk.view(), dv.view()});
  for (auto [engine, ref] : {std::pair{&dq, &gr.dq}, {&dk, &gr.dk}, {&dv, &gr.dv}}) {
    double scale = 0, diff = 0;
    for (double x : ref->storage()) scale = std::max(scale, std::abs(x));
    for (int64_t e = 0; e < ref->numel(); ++e)
      diff = std::max(diff, std::abs(static_cast<double>(engine->data()[e]) - ref->data()[e]));
    a.grad = std::max(a.grad, scale > 0 ? diff / scale : diff);
  }
  for (int64_t e = 0; e < rows.max_prob.numel(); ++e) {
    const double mp = rows.max_prob.data()[e], h = rows.entropy.data()[e];
    a.rows = std::max(a.rows, std::abs(mp - max_prob.data()[e]));
    a.rows = std::max(a.rows, std::abs(h - entropy_.data()[e]) / std::max(1.0, h));
  }
  return a;
}

// Everything measured under one policy.
struct PolicyMeasure {
  double exact = 0;          // batched vs head by head (double)
  EngineAgreement engine;
  std::vector<double> saturated, entropy;  // per head, averaged over the batch
  Tensor<double> sample_p;
};

PolicyMeasure measure_policy(const HeadsConfig& c, const Inputs& in, const Views& views, const ScalePolicy& policy,
                             double policy_code, Table& table) {
  AttentionOptions<double> o;
  o.scale = policy;
  const auto f = detail::allocating_forward(views.q, views.k, views.v, o);
  const auto gr = detail::allocating_backward(views.q, views.k, views.v, f, views.dout, o);
  PolicyMeasure m;
  m.exact = batched_vs_per_head(in, f, gr, o);
  Rows rows = attention_rows(views, f, policy);
  m.engine = engine_vs_reference(views, f, gr, rows, policy);
  const int64_t B = c.batch, H = c.heads, S = c.seq;
  m.saturated.assign(static_cast<size_t>(H), 0.0);
  m.entropy.assign(static_cast<size_t>(H), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double saturated = 0, mp_sum = 0, ent_sum = 0;
      for (int64_t i = 0; i < S; ++i) {
        const double mp = rows.max_prob(b, h, i, 0), e = rows.entropy(b, h, i, 0);
        if (mp > 0.99) saturated += 1;
        mp_sum += mp;
        ent_sum += e;
      }
      const double Sd = static_cast<double>(S);
      table.add_row({policy_code, static_cast<double>(b), static_cast<double>(h), sigma_of(c, h), saturated / Sd,
                     mp_sum / Sd, ent_sum / Sd});
      m.saturated[static_cast<size_t>(h)] += saturated / Sd / static_cast<double>(B);
      m.entropy[static_cast<size_t>(h)] += ent_sum / Sd / static_cast<double>(B);
    }
  m.sample_p = std::move(rows.sample_p);
  return m;
}

// ---- figures ------------------------------------------------------------------

// measured[0] without the scale, measured[1] with 1/√d_k.
Figure figure_heads(const HeadsConfig& c, const std::vector<PolicyMeasure>& measured, const Words& words) {
  const int64_t H = c.heads, S = c.seq;
  Figure f;
  f.name = "heads";
  words.fill(f, "figure",
             {{"batch", c.batch},
              {"heads", H},
              {"seq", S},
              {"d_k", c.d_k},
              {"sigma_min", c.sigma_min},
              {"sigma_max", c.sigma_max}});
  std::vector<double> hx;
  for (int64_t h = 0; h < H; ++h) hx.push_back(static_cast<double>(h + 1));
  const std::string head_label = fmt::format("head (σ of q, k from {:g} to {:g})", c.sigma_min, c.sigma_max);
  Panel ps = util::panel(words("figure.panel_saturated"), head_label, "fraction of rows", false, false);
  ps.series.push_back(util::series("no scale", Style::linespoints, hx, measured[0].saturated, util::colour(1)));
  ps.series.push_back(util::series("1/√d_k", Style::linespoints, hx, measured[1].saturated, util::colour(0)));
  ps.y_min = -0.02;
  ps.y_max = 1.05;
  ps.x_min = 0.5;
  ps.x_max = static_cast<double>(H) + 0.5;
  ps.x_tics = hx;
  ps.legend_position = "below";
  Panel pe = util::panel(words("figure.panel_entropy"), head_label, "entropy (nats)", false, false);
  pe.series.push_back(util::series("no scale", Style::linespoints, hx, measured[0].entropy, util::colour(1)));
  pe.series.push_back(util::series("1/√d_k", Style::linespoints, hx, measured[1].entropy, util::colour(0)));
  pe.series.push_back(util::series(fmt::format("uniform: ln {}", S), Style::theory, {0.5, static_cast<double>(H) + 0.5},
                                   {std::log(static_cast<double>(S)), std::log(static_cast<double>(S))}, "#000000"));
  pe.y_min = 0;
  pe.y_max = std::log(static_cast<double>(S)) * 1.15;
  pe.x_min = 0.5;
  pe.x_max = static_cast<double>(H) + 0.5;
  pe.x_tics = hx;
  pe.legend_position = "below";
  f.panels = {ps, pe};
  for (size_t pi = 0; pi < 2; ++pi) {
    Panel hp;
    hp.title = words(pi == 0 ? "figure.panel_p_none" : "figure.panel_p_scaled", {{"heads", H}});
    hp.x_label = "key j";
    hp.y_label = "query i";
    Heatmap hm;
    hm.rows = hm.cols = S;
    hm.values.assign(measured[pi].sample_p.storage().begin(), measured[pi].sample_p.storage().end());
    hm.symmetric_range = false;
    hm.color_limit = 1.0;  // both panels on the same scale, 0..1
    hm.colorbar_label = "P_ij";
    hp.heatmap = hm;
    f.panels.push_back(hp);
  }
  util::stack_panels(f);
  return f;
}

// ---- verdicts -----------------------------------------------------------------

// The smallest and largest share of saturated rows over the heads, in percent.
std::pair<double, double> saturated_percent(const PolicyMeasure& m) {
  const auto [lo, hi] = std::minmax_element(m.saturated.begin(), m.saturated.end());
  return {100 * *lo, 100 * *hi};
}

Verdict verdict_c11(const HeadsConfig& c, const std::vector<PolicyMeasure>& measured, const Words& words) {
  double worst_exact = 0, worst_engine = 0, worst_engine_p = 0, worst_engine_grad = 0;
  for (const auto& m : measured) {
    worst_exact = std::max(worst_exact, m.exact);
    worst_engine = std::max(worst_engine, m.engine.out);
    worst_engine_grad = std::max(worst_engine_grad, m.engine.grad);
    worst_engine_p = std::max(worst_engine_p, m.engine.rows);
  }
  const auto [none_min, none_max] = saturated_percent(measured[0]);
  const auto [scaled_min, scaled_max] = saturated_percent(measured[1]);
  Verdict vd = make_verdict("C11");
  vd.theory = 0;
  vd.measured = worst_exact;
  vd.tolerance = c.exact_tolerance;
  vd.outcome = util::outcome_of(worst_exact <= c.exact_tolerance && worst_engine <= c.engine_tolerance &&
                                worst_engine_grad <= c.engine_tolerance && worst_engine_p <= c.engine_tolerance);
  vd.figure = "heads";
  words.fill(vd, "c11",
             {{"layout", c.layout},
              {"exact", worst_exact},
              {"engine_out", worst_engine},
              {"engine_grad", worst_engine_grad},
              {"engine_rows", worst_engine_p},
              {"none_min", none_min},
              {"none_max", none_max},
              {"scaled_min", scaled_min},
              {"scaled_max", scaled_max},
              {"shape", attnlab::to_string(Shape{c.batch, c.heads, c.seq, c.d_k})},
              {"seq", c.seq},
              {"d_k", c.d_k},
              {"exact_tolerance", c.exact_tolerance},
              {"engine_tolerance", c.engine_tolerance},
              {"terms", std::max(c.seq, c.d_k)},
              {"exactness", worst_exact == 0 ? words("c11.exactly")
                                             : words("c11.to_within", {{"difference", util::pretty(worst_exact, 1)}})},
              {"engine", util::pretty(std::max(worst_engine, worst_engine_grad), 1)},
              {"scaled",
               scaled_max == 0 ? words("c11.scaled_none") : words("c11.scaled_at_most", {{"percent", scaled_max}})}});
  return vd;
}

Result run_heads(const HeadsConfig& c, RunContext& ctx) {
  const Inputs in = make_inputs(c, ctx.seed);
  const Views views = as_passed(c, in);
  Table table("heads", {"policy", "batch", "head", "sigma", "saturated_fraction", "mean_max_prob", "mean_entropy"});
  std::vector<PolicyMeasure> measured;
  const std::vector<ScalePolicy> policies{ScalePolicy::none(), ScalePolicy::inv_sqrt_d()};
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    ctx.report(fmt::format("policy {}: batched forward/backward on {} and head by head", policies[pi].name(),
                           attnlab::to_string(views.q.shape())));
    measured.push_back(measure_policy(c, in, views, policies[pi], static_cast<double>(pi), table));
  }
  const Words words("heads");
  Result result;
  result.tables = {table};
  result.notes.push_back(words("note"));
  result.figures = {figure_heads(c, measured, words)};
  result.verdicts = {verdict_c11(c, measured, words)};
  return result;
}

}  // namespace

Experiment heads_experiment() {
  return make_experiment<HeadsConfig>("heads",
                                           "Seed 001's BERT shapes [2, 12, 128, 64]: batched = head by head; per-head saturation",
                                           {"C11"}, run_heads, {{"seq", "32"}, {"heads", "4"}, {"d_k", "64"}});
}

}  // namespace attnlab::lab
