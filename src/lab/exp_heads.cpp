// Experiment `heads` (C11): seed 001's BERT shapes. Q, K, V of [batch 2, 12 heads,
// seq 128, d_k 64] go through the library in one batched call, and the result must
// equal the same computation done head by head on [1, 1, seq, d_k] slices (forward
// and backward, double reference) and the float engine's (with its per-row
// diagnostics). Then per-head saturation with and without the scale: each head's
// q and k are drawn with their own σ_h (heads differ in practice), so the heads
// whose dot products are larger saturate first when the scale is missing.
#include <cmath>
#include <fmt/format.h>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/softmax.hpp"
#include "lab/lab_util.hpp"
#include "lab/experiments.hpp"

namespace attnlab::lab {
namespace {

struct HeadsConfig {
  int64_t batch = 2, heads = 12, seq = 128, d_k = 64;
  double sigma_min = 0.6, sigma_max = 1.4;  // σ of q and k, spread linearly over the heads
  std::string layout = "bhsd";  // bhsd | bshd_strided (a strided view: must agree) | bshd_misread (must fail)
  double exact_tolerance = 1e-12;   // batched vs per-head, double
  double engine_tolerance = 2e-4;   // float engine vs double reference (relative to max |out|, and on max p)
  void bind(Params& p) {
    p.add("batch", batch, "batch size");
    p.add("heads", heads, "attention heads");
    p.add("seq", seq, "sequence length");
    p.add("d_k", d_k, "head dim");
    p.add("sigma_min", sigma_min, "σ of q and k in the first head");
    p.add("sigma_max", sigma_max, "σ of q and k in the last head");
    p.add("layout", layout, "memory layout of Q, K, V: bhsd; bshd_strided (passed as a strided view); bshd_misread (passed as if bhsd: C11 must fail)");
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

Result run_heads(const HeadsConfig& c, RunContext& ctx) {
  for (auto [k, v] : {std::pair{"batch", c.batch}, {"heads", c.heads}, {"seq", c.seq}, {"d_k", c.d_k}})
    util::require_positive(k, v);
  util::require_positive("sigma_min", c.sigma_min);
  util::require_positive("sigma_max", c.sigma_max);
  if (c.layout != "bhsd" && c.layout != "bshd_strided" && c.layout != "bshd_misread")
    throw Error("layout: '" + c.layout + "' is not bhsd, bshd_strided or bshd_misread");
  Result result;
  const int64_t B = c.batch, H = c.heads, S = c.seq, D = c.d_k;
  const Shape shape{B, H, S, D};
  auto sigma_of = [&](int64_t h) {
    return H == 1 ? c.sigma_min : c.sigma_min + (c.sigma_max - c.sigma_min) * static_cast<double>(h) / static_cast<double>(H - 1);
  };
  // The logical tensors [B, H, S, D] (what the per-head computation sees) ...
  auto g = util::rng(ctx.seed, "heads");
  std::normal_distribution<double> normal(0, 1);
  Tensor<double> q(shape), k(shape), v(shape), dout(shape);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t d = 0; d < D; ++d) {
          q(b, h, i, d) = sigma_of(h) * normal(g);
          k(b, h, i, d) = sigma_of(h) * normal(g);
          v(b, h, i, d) = normal(g);
          dout(b, h, i, d) = normal(g);
        }
  // ... and the memory handed to the batched call. BERT implementations often hold
  // [B, S, H, D] (heads split from the hidden dim); a strided view describes it exactly.
  auto to_bshd = [&](const Tensor<double>& t) {
    std::vector<double> m(static_cast<size_t>(t.numel()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < D; ++d) m[static_cast<size_t>(((b * S + i) * H + h) * D + d)] = t(b, h, i, d);
    return m;
  };
  std::vector<double> mq, mk, mv, mo;
  ConstView<double> vq = q.view(), vk = k.view(), vv = v.view(), vo = dout.view();
  if (c.layout != "bhsd") {
    mq = to_bshd(q), mk = to_bshd(k), mv = to_bshd(v), mo = to_bshd(dout);
    const Shape strides = c.layout == "bshd_strided" ? Shape{S * H * D, D, H * D, 1} : contiguous_strides(shape);
    vq = {mq.data(), shape, strides}, vk = {mk.data(), shape, strides};
    vv = {mv.data(), shape, strides}, vo = {mo.data(), shape, strides};
  }

  Table t("heads", {"policy", "batch", "head", "sigma", "saturated_fraction", "mean_max_prob", "mean_entropy"});
  double worst_exact = 0, worst_engine = 0, worst_engine_p = 0, worst_engine_grad = 0;
  std::vector<std::vector<double>> sat(2), ent(2);  // per policy: per head, averaged over the batch
  std::vector<Tensor<double>> sample_p(2);
  const std::vector<ScalePolicy> policies{ScalePolicy::none(), ScalePolicy::inv_sqrt_d()};
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    ctx.report(fmt::format("policy {}: batched forward/backward on {} and head by head", policies[pi].name(), attnlab::to_string(shape)));
    AttentionOptions<double> o;
    o.scale = policies[pi];
    const auto f = reference::attention_forward(vq, vk, vv, o);
    const auto gr = reference::attention_backward(vq, vk, vv, f, vo, o);
    // Head by head, on slices of the logical tensors.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const auto sq = slice(q, b, h), sk = slice(k, b, h), sv = slice(v, b, h), so = slice(dout, b, h);
        const auto fh = reference::attention_forward(sq, sk, sv, o);
        const auto gh = reference::attention_backward(sq, sk, sv, fh, so, o);
        for (int64_t i = 0; i < S; ++i) {
          worst_exact = std::max(worst_exact, std::abs(fh.lse(0, 0, i, 0) - f.lse(b, h, i, 0)));
          for (int64_t d = 0; d < D; ++d) {
            worst_exact = std::max(worst_exact, std::abs(fh.out(0, 0, i, d) - f.out(b, h, i, d)));
            worst_exact = std::max(worst_exact, std::abs(gh.dq(0, 0, i, d) - gr.dq(b, h, i, d)));
            worst_exact = std::max(worst_exact, std::abs(gh.dk(0, 0, i, d) - gr.dk(b, h, i, d)));
            worst_exact = std::max(worst_exact, std::abs(gh.dv(0, 0, i, d) - gr.dv(b, h, i, d)));
          }
        }
      }
    // The float engine, batched, with its per-row diagnostics.
    Tensor<float> fq(shape), fk(shape), fv(shape);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < D; ++d) {
            fq(b, h, i, d) = static_cast<float>(vq(b, h, i, d));
            fk(b, h, i, d) = static_cast<float>(vk(b, h, i, d));
            fv(b, h, i, d) = static_cast<float>(vv(b, h, i, d));
          }
    Tensor<float> out(shape), lse({B, H, S, 1}), max_prob({B, H, S, 1}), entropy_({B, H, S, 1});
    RowDiagnostics<float> diag;
    diag.max_prob = max_prob.view();
    diag.entropy = entropy_.view();
    AttentionOptions<float> of;
    of.scale = policies[pi];
    attention_forward(fq.view(), fk.view(), fv.view(), of, out.view(), lse.view(), &diag);
    double out_scale = 0;
    for (double x : f.out.storage()) out_scale = std::max(out_scale, std::abs(x));
    // The engine's backward, batched, against the reference's (relative to each gradient's largest entry).
    {
      Tensor<float> fo(shape), dq(shape), dk(shape), dv(shape);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < S; ++i)
            for (int64_t d = 0; d < D; ++d) fo(b, h, i, d) = static_cast<float>(vo(b, h, i, d));
      attention_backward(fq.view(), fk.view(), fv.view(), out.view(), lse.view(), fo.view(), of, dq.view(), dk.view(),
                         dv.view());
      for (auto [engine, ref] : {std::pair{&dq, &gr.dq}, {&dk, &gr.dk}, {&dv, &gr.dv}}) {
        double scale = 0, diff = 0;
        for (double x : ref->storage()) scale = std::max(scale, std::abs(x));
        for (int64_t e = 0; e < ref->numel(); ++e)
          diff = std::max(diff, std::abs(static_cast<double>(engine->data()[e]) - ref->data()[e]));
        worst_engine_grad = std::max(worst_engine_grad, scale > 0 ? diff / scale : diff);
      }
    }
    // P of the batched double forward, for the per-head statistics and the engine's diagnostics.
    sat[pi].assign(static_cast<size_t>(H), 0.0);
    ent[pi].assign(static_cast<size_t>(H), 0.0);
    sample_p[pi] = Tensor<double>({1, 1, S, S});
    std::vector<double> p(static_cast<size_t>(S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        double saturated = 0, mp_sum = 0, ent_sum = 0;
        for (int64_t i = 0; i < S; ++i) {
          for (int64_t d = 0; d < D; ++d)
            worst_engine = std::max(worst_engine, std::abs(out(b, h, i, d) - f.out(b, h, i, d)) / out_scale);
          const double scale = policies[pi](D, S);
          for (int64_t j = 0; j < S; ++j) {
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += vq(b, h, i, d) * vk(b, h, j, d);
            p[static_cast<size_t>(j)] = std::exp(s * scale - f.lse(b, h, i, 0));
            if (b == 0 && h == H - 1) sample_p[pi](0, 0, i, j) = p[static_cast<size_t>(j)];
          }
          const double mp = *std::max_element(p.begin(), p.end()), e = entropy<double>(p);
          worst_engine_p = std::max(worst_engine_p, std::abs(mp - max_prob(b, h, i, 0)));
          worst_engine_p = std::max(worst_engine_p, std::abs(e - entropy_(b, h, i, 0)) / std::max(1.0, e));
          if (mp > 0.99) saturated += 1;
          mp_sum += mp;
          ent_sum += e;
        }
        const double Sd = static_cast<double>(S);
        t.add_row({static_cast<double>(pi), static_cast<double>(b), static_cast<double>(h), sigma_of(h), saturated / Sd,
                   mp_sum / Sd, ent_sum / Sd});
        sat[pi][static_cast<size_t>(h)] += saturated / Sd / static_cast<double>(B);
        ent[pi][static_cast<size_t>(h)] += ent_sum / Sd / static_cast<double>(B);
      }
  }
  result.tables.push_back(t);
  result.notes.push_back("heads.csv: policy 0 = none, 1 = inv_sqrt_d");

  Figure f;
  f.name = "heads";
  f.title = fmt::format("BERT shapes [batch {}, {} heads, seq {}, d_k {}]: per-head saturation", B, H, S, D);
  f.caption = fmt::format("Each head's q and k have their own σ_h, from {:g} (head 1) to {:g} (head {}). Without the "
                          "scale many rows of every head are one-hot, more in heads with larger σ_h; with 1/√d_k none "
                          "are. Bottom: the attention matrix P of head {} (batch 0), one row per query.",
                          c.sigma_min, c.sigma_max, H, H);
  f.layout_rows = 2;
  f.layout_cols = 2;
  f.width = 1300;
  f.height = 1100;
  std::vector<double> hx;
  for (int64_t h = 0; h < H; ++h) hx.push_back(static_cast<double>(h + 1));
  const std::string head_label = fmt::format("head (σ of q, k from {:g} to {:g})", c.sigma_min, c.sigma_max);
  Panel ps = util::panel("saturated rows per head (max p > 0.99)", head_label, "fraction of rows", false, false);
  ps.series.push_back(util::series("no scale", Style::linespoints, hx, sat[0], util::colour(1)));
  ps.series.push_back(util::series("1/√d_k", Style::linespoints, hx, sat[1], util::colour(0)));
  ps.y_min = -0.02;
  ps.y_max = 1.05;
  ps.x_min = 0.5;
  ps.x_max = static_cast<double>(H) + 0.5;
  ps.x_tics = hx;
  ps.legend_position = "top left";
  Panel pe = util::panel("mean row entropy per head", head_label, "entropy (nats)", false, false);
  pe.series.push_back(util::series("no scale", Style::linespoints, hx, ent[0], util::colour(1)));
  pe.series.push_back(util::series("1/√d_k", Style::linespoints, hx, ent[1], util::colour(0)));
  pe.series.push_back(util::series(fmt::format("uniform: ln {}", S), Style::theory, {0.5, static_cast<double>(H) + 0.5},
                                   {std::log(static_cast<double>(S)), std::log(static_cast<double>(S))}, "#000000"));
  pe.y_min = 0;
  pe.y_max = std::log(static_cast<double>(S)) * 1.15;
  pe.x_min = 0.5;
  pe.x_max = static_cast<double>(H) + 0.5;
  pe.x_tics = hx;
  pe.legend_position = "bottom left";
  f.panels = {ps, pe};
  for (size_t pi = 0; pi < 2; ++pi) {
    Panel hp;
    hp.title = fmt::format("P of head {}, {}", H, pi == 0 ? "no scale" : "1/√d_k");
    hp.x_label = "key j";
    hp.y_label = "query i";
    Heatmap hm;
    hm.rows = hm.cols = S;
    hm.values = sample_p[pi].storage();
    hm.symmetric_range = false;
    hm.color_limit = 1.0;  // both panels on the same scale, 0..1
    hm.colorbar_label = "P_ij";
    hp.heatmap = hm;
    f.panels.push_back(hp);
  }
  result.figures.push_back(f);

  Verdict vd = make_verdict("C11");
  vd.theory = 0;
  vd.theory_text = "one batched call on [B, H, S, d_k] = the same attention head by head; scores [B, H, S, S]";
  vd.measured = worst_exact;
  vd.measured_text = fmt::format("layout {}: max |batched − per head| over out, L, dQ, dK, dV = {:.2g}; float engine "
                                 "vs reference {:.2g} (out, relative), {:.2g} (dQ, dK, dV, relative), {:.2g} (max p, entropy); no scale saturates "
                                 "{:.0f}–{:.0f} % of rows per head, 1/√d_k {:.0f}–{:.0f} %",
                                 c.layout, worst_exact, worst_engine, worst_engine_grad, worst_engine_p,
                                 100 * *std::min_element(sat[0].begin(), sat[0].end()),
                                 100 * *std::max_element(sat[0].begin(), sat[0].end()),
                                 100 * *std::min_element(sat[1].begin(), sat[1].end()),
                                 100 * *std::max_element(sat[1].begin(), sat[1].end()));
  vd.tolerance = c.exact_tolerance;
  vd.method = fmt::format("Q, K, V of shape {} through the double reference in one call (forward and backward) and "
                          "head by head on [1, 1, {}, {}] slices: the largest difference must be ≤ {:g}; the float "
                          "engine's output, gradients and row diagnostics (batched) must agree with the reference "
                          "within {:g} (float rounding of {}-term sums, relative to the largest entry).",
                          attnlab::to_string(shape), S, D, c.exact_tolerance, c.engine_tolerance, std::max(S, D));
  vd.outcome = util::outcome_of(worst_exact <= c.exact_tolerance && worst_engine <= c.engine_tolerance &&
                                worst_engine_grad <= c.engine_tolerance && worst_engine_p <= c.engine_tolerance);
  vd.figure = f.name;
  result.verdicts.push_back(vd);
  return result;
}

}  // namespace

Experiment heads_experiment() {
  return make_experiment<HeadsConfig>("heads",
                                           "Seed 001's BERT shapes [2, 12, 128, 64]: batched = head by head; per-head saturation",
                                           {"C11"}, run_heads, {{"seq", "32"}, {"heads", "4"}, {"d_k", "64"}});
}

}  // namespace attnlab::lab
