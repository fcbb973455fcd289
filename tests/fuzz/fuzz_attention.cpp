// libFuzzer target: the attention API with fuzzer-chosen shapes, options and
// values (NaN, ±inf, ±1e30, denormals, float max, ordinary numbers).
// Property: no crash, no sanitizer report, and either an attnlab::Error or a
// result that (a) has no NaN, (b) for the float engine agrees with the double
// reference on the same inputs within a tolerance scaled to the values' size.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"

namespace al = attnlab;

namespace {

double pick_value(FuzzedDataProvider& in) {
  static const double specials[] = {0.0,
                                    -0.0,
                                    1.0,
                                    -1.0,
                                    std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(),
                                    1e30,
                                    -1e30,
                                    1e-40,  // a float denormal
                                    std::numeric_limits<float>::max(),
                                    std::numeric_limits<float>::denorm_min(),
                                    1e-310};
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0)
    return specials[in.ConsumeIntegralInRange<size_t>(0, std::size(specials) - 1)];
  return in.ConsumeFloatingPointInRange<double>(-4.0, 4.0);
}

void fill(FuzzedDataProvider& in, al::Tensor<double>& t) {
  for (double& x : t.storage()) x = in.remaining_bytes() ? pick_value(in) : 0.5;
}

al::Tensor<float> to_float(const al::Tensor<double>& x) {
  al::Tensor<float> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<float>(x.data()[i]);
  return y;
}

// A description of the current input, printed when a property fails.
std::string g_problem;

[[noreturn]] void fail(const char* what, double a, double b) {
  std::fprintf(stderr, "fuzz_attention: %s (%g vs %g)\n%s\n", what, a, b, g_problem.c_str());
  std::abort();
}

std::string dump(const char* name, const al::Tensor<double>& t) {
  std::string s = std::string(name) + " " + al::to_string(t.shape()) + ":";
  for (double x : t.storage()) s += " " + std::to_string(x);
  return s + "\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int64_t B = in.ConsumeIntegralInRange<int64_t>(0, 2);
  const int64_t Hkv = in.ConsumeIntegralInRange<int64_t>(0, 2);
  const int64_t Hq = Hkv * in.ConsumeIntegralInRange<int64_t>(1, 3) + in.ConsumeIntegralInRange<int64_t>(0, 1);
  const int64_t Nq = in.ConsumeIntegralInRange<int64_t>(0, 9), Nk = in.ConsumeIntegralInRange<int64_t>(0, 9);
  const int64_t d = in.ConsumeIntegralInRange<int64_t>(0, 9), dv = in.ConsumeIntegralInRange<int64_t>(0, 9);
  al::Tensor<double> q({B, Hq, Nq, d}), k({B, Hkv, Nk, d}), v({B, Hkv, Nk, dv}), dout({B, Hq, Nq, dv});
  al::AttentionOptions<double> opt;
  opt.causal = static_cast<al::Causal>(in.ConsumeIntegralInRange<int>(0, 2));
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: opt.scale = al::ScalePolicy::none(); break;
    case 1: opt.scale = al::ScalePolicy::inv_d(); break;
    case 2: opt.scale = al::ScalePolicy::entropy_invariant(); break;
    case 3: {
      // s ≤ 0 is refused (issue 18: ssmax:-1 was accepted); the refusal must be an Error.
      const double s = in.ConsumeFloatingPointInRange<double>(-2, 2);
      try {
        opt.scale = al::ScalePolicy::scalable_softmax(s);
      } catch (const al::Error&) {
        if (s > 0) std::abort();  // a valid s must be accepted
        return 0;
      }
      break;
    }
    case 4: opt.scale = al::ScalePolicy::fixed(in.ConsumeFloatingPointInRange<double>(-1e6, 1e6)); break;
    default: break;
  }
  al::Tensor<uint8_t> bool_mask;
  al::Tensor<double> additive;
  std::vector<int64_t> lengths;
  if (in.ConsumeBool()) {
    bool_mask = al::Tensor<uint8_t>({in.ConsumeBool() ? 1 : B, in.ConsumeBool() ? 1 : Hq, Nq, Nk});
    for (auto& m : bool_mask.storage()) m = in.ConsumeBool();
    opt.bool_mask = bool_mask.view();
  }
  if (in.ConsumeBool()) {
    additive = al::Tensor<double>({in.ConsumeBool() ? 1 : B, in.ConsumeBool() ? 1 : Hq, Nq, Nk});
    fill(in, additive);
    opt.additive_mask = additive.view();
  }
  if (in.ConsumeBool()) {
    lengths.resize(static_cast<size_t>(std::max<int64_t>(0, B + in.ConsumeIntegralInRange<int64_t>(-1, 1))));
    for (auto& l : lengths) l = in.ConsumeIntegralInRange<int64_t>(-1, Nk + 1);
    opt.key_lengths = lengths;
  }
  // The variants (issue 17), valid or not: windows with sides below −1, softcaps of any
  // value, slopes and sinks of any count, cu_seqlens of any order, dropout_p of any value.
  std::vector<double> slopes, sinks;
  std::vector<int64_t> cu_q, cu_k;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0)
    opt.window = {in.ConsumeIntegralInRange<int64_t>(-3, 10), in.ConsumeIntegralInRange<int64_t>(-3, 10)};
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) opt.softcap = pick_value(in);
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    slopes.resize(in.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(B * Hq + 1)));
    for (double& x : slopes) x = in.ConsumeFloatingPointInRange<double>(-1, 1);
    opt.alibi_slopes = slopes;
  }
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    sinks.resize(in.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(Hq + 1)));
    for (double& x : sinks) x = pick_value(in);
    opt.sinks = sinks;
  }
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    const size_t n = in.ConsumeIntegralInRange<size_t>(0, 5);
    for (size_t s = 0; s < n; ++s) cu_q.push_back(in.ConsumeIntegralInRange<int64_t>(-1, Nq + 1));
    for (size_t s = 0; s < n + in.ConsumeIntegralInRange<size_t>(0, 1); ++s)
      cu_k.push_back(in.ConsumeIntegralInRange<int64_t>(-1, Nk + 1));
    if (in.ConsumeBool()) std::sort(cu_q.begin(), cu_q.end()), std::sort(cu_k.begin(), cu_k.end());
    opt.cu_seqlens_q = cu_q;
    opt.cu_seqlens_k = cu_k;
  }
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    opt.dropout.p = in.ConsumeFloatingPointInRange<double>(-0.2, 1.2);
    opt.dropout.seed = in.ConsumeIntegral<uint64_t>();
  }
  opt.check_finite = in.ConsumeIntegralInRange<int>(0, 9) != 0;
  fill(in, q);
  fill(in, k);
  fill(in, v);
  fill(in, dout);
  g_problem = "window=" + std::to_string(opt.window.left) + "," + std::to_string(opt.window.right) +
              " softcap=" + (opt.softcap ? std::to_string(*opt.softcap) : "none") + " slopes=" +
              std::to_string(slopes.size()) + " sinks=" + std::to_string(sinks.size()) + " cu=" +
              std::to_string(cu_q.size()) + "/" + std::to_string(cu_k.size()) + " dropout=" +
              std::to_string(opt.dropout.p) + " causal=" + std::string(al::to_string(opt.causal)) + " scale=" + opt.scale.name() +
              " check_finite=" + std::to_string(opt.check_finite) + " bool_mask=" +
              (bool_mask.numel() ? al::to_string(bool_mask.shape()) : "none") + " lengths=" +
              std::to_string(lengths.size()) + "\n" + dump("q", q) + dump("k", k) + dump("v", v) +
              dump("dout", dout) + dump("additive", additive);
  for (auto m : bool_mask.storage()) g_problem += m ? "1" : "0";
  for (auto l : lengths) g_problem += " len " + std::to_string(l);

  // The reference first: an Error is a fine answer; anything else must be finite.
  al::detail::AttentionForward<double> ref;
  al::detail::AttentionGrads<double> ref_grads;
  bool ref_ok = true;
  try {
    ref = al::detail::allocating_forward(q.view(), k.view(), v.view(), opt);
    ref_grads = al::detail::allocating_backward(q.view(), k.view(), v.view(), ref, dout.view(), opt);
  } catch (const al::Error&) {
    ref_ok = false;
  }
  // With the finiteness check off, non-finite inputs may legitimately give NaN: nothing to compare.
  if (!opt.check_finite) return 0;
  if (ref_ok)
    for (const auto* t : {&ref.out, &ref_grads.dq, &ref_grads.dk, &ref_grads.dv})
      for (double x : t->storage())
        if (std::isnan(x)) fail("reference returned NaN on checked input", x, 0);

  // The float engine on the same inputs (rounded to float).
  const auto qf = to_float(q), kf = to_float(k), vf = to_float(v), df = to_float(dout), af = to_float(additive);
  al::AttentionOptions<float> optf;
  optf.scale = opt.scale;
  optf.causal = opt.causal;
  optf.bool_mask = opt.bool_mask;
  if (opt.additive_mask.present()) optf.additive_mask = af.view();
  optf.key_lengths = opt.key_lengths;
  const std::vector<float> slopes_f(slopes.begin(), slopes.end()), sinks_f(sinks.begin(), sinks.end());
  optf.window = opt.window;
  optf.softcap = opt.softcap;
  optf.alibi_slopes = slopes_f;
  optf.sinks = sinks_f;
  optf.cu_seqlens_q = opt.cu_seqlens_q;
  optf.cu_seqlens_k = opt.cu_seqlens_k;
  optf.dropout = opt.dropout;
  try {
    const auto f = al::detail::allocating_forward(qf.view(), kf.view(), vf.view(), optf);
    const auto g = al::detail::allocating_backward(qf.view(), kf.view(), vf.view(), f, df.view(), optf);
    for (const auto* t : {&f.out, &g.dq, &g.dk, &g.dv})
      for (float x : t->storage())
        if (std::isnan(x)) fail("engine returned NaN on checked input", x, 0);
    if (!ref_ok) return 0;  // float inputs differ from double ones (rounding of 1e-310, 1e40...)
    // Compare only where the problem is well conditioned. Rounding the inputs to
    // float and computing S in float perturbs each score by at most about
    //   δS ≤ |scale|·max_ij Σ_c |q_ic k_jc| · (d + 2)·2⁻²⁴ + max|mask|·2⁻²⁴,
    // and ∂O/∂S_j = P_j (v_j − O), so |ΔO| ≤ 2·max|v|·δS (plus v's own rounding).
    // With scale 1e6 a perturbation of 1e-7 can change which key wins: skip those.
    double vmax = 0, qk = 0, mmax = 0;
    for (float x : vf.storage()) vmax = std::max(vmax, std::abs(static_cast<double>(x)));
    for (double x : additive.storage()) mmax = std::max(mmax, std::isfinite(x) ? std::abs(x) : 0.0);
    // ALiBi's biases and the sinks are scores too (rounded to float like the rest).
    for (double x : slopes) mmax += std::abs(x) * static_cast<double>(std::max(Nq, Nk));
    for (double x : sinks) mmax = std::max(mmax, std::abs(x));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Nq; ++i)
          for (int64_t j = 0; j < Nk; ++j) {
            double s = 0;
            for (int64_t c = 0; c < d; ++c) s += std::abs(q(b, h, i, c) * k(b, h / (Hq / Hkv), j, c));
            qk = std::max(qk, s);
          }
    double max_scale = 0;
    for (int64_t n = 0; n <= Nk; ++n) max_scale = std::max(max_scale, std::abs(opt.scale(d, n)));
    const double dS = max_scale * qk * static_cast<double>(d + 2) * 6e-8 + mmax * 6e-8;
    if (dS > 1e-3) return 0;
    // Dropout scales the kept probabilities by 1/(1 − p) (the same mask in both).
    const double tol = vmax * (2 * dS + 1e-5) / (1 - std::clamp(opt.dropout.p, 0.0, 0.99)) + 1e-30;
    for (int64_t i = 0; i < f.out.numel(); ++i) {
      const double a = f.out.data()[i], b = ref.out.data()[i];
      if (std::abs(a - b) > tol) fail("engine out differs from reference", a, b);
    }
  } catch (const al::Error&) {
    // A clear error is an acceptable answer (e.g. float overflow of q·k that double survives).
  }
  return 0;
}
