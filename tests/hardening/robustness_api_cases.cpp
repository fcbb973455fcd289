// The API's hostile inputs, each run through the reference (double) and the
// engine (float). Both must give the same answer class; the table shows it.
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <omp.h>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/softmax.hpp"
#include "core/attention_results.hpp"
#include "robustness_cases.hpp"

namespace attnlab::robustness {
namespace {

struct Inputs {
  Tensor<double> q, k, v;
  AttentionOptions<double> options;
  Tensor<uint8_t> bool_mask;
  std::vector<int64_t> lengths;
  std::vector<double> slopes, sinks;            // behind options.alibi_slopes, options.sinks
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;  // behind options.cu_seqlens_*
};

Inputs make(Shape qs, Shape ks, Shape vs, double fill = 0.5) {
  Inputs in{Tensor<double>(qs, fill), Tensor<double>(ks, fill), Tensor<double>(vs, fill), {}, {}, {}, {}, {}, {}, {}};
  // Distinct values so results are not trivially uniform.
  for (auto* t : {&in.q, &in.k, &in.v})
    for (int64_t i = 0; i < t->numel(); ++i) t->data()[i] = fill * std::cos(0.7 * static_cast<double>(i));
  return in;
}

template <class T>
Tensor<T> cast(const Tensor<double>& x) {
  Tensor<T> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
  return y;
}

std::string describe(const Tensor<double>& out, const Tensor<double>& lse) {
  bool nan = false;
  double omax = 0;
  for (double x : out.storage()) {
    nan = nan || std::isnan(x);
    omax = std::max(omax, std::abs(x));
  }
  int masked = 0;
  for (double l : lse.storage()) masked += l == -INFINITY;
  return fmt::format("result: out {} finite{}, max |out| = {:.3g}, {} of {} rows fully masked (L = -inf, out = 0)",
                     to_string(out.shape()), nan ? " NO (NaN!)" : "", omax, masked, lse.numel());
}

// Runs forward + backward through both implementations; returns one line, or
// both lines when they disagree in kind (which the test then fails on).
std::string run_both(Inputs in) {
  std::string ref, eng;
  try {
    const auto f = detail::allocating_forward(in.q, in.k, in.v, in.options);
    Tensor<double> dout(f.out.shape(), 1.0);
    detail::allocating_backward(in.q, in.k, in.v, f, dout, in.options);
    ref = describe(f.out, f.lse);
  } catch (const Error& e) {
    ref = std::string("error: ") + e.what();
  }
  try {
    const auto qf = cast<float>(in.q), kf = cast<float>(in.k), vf = cast<float>(in.v);
    AttentionOptions<float> o;
    o.scale = in.options.scale;
    o.causal = in.options.causal;
    o.bool_mask = in.options.bool_mask;
    o.key_lengths = in.options.key_lengths;
    o.check_finite = in.options.check_finite;
    o.window = in.options.window;
    o.softcap = in.options.softcap;
    const std::vector<float> slopes(in.slopes.begin(), in.slopes.end()), sinks(in.sinks.begin(), in.sinks.end());
    o.alibi_slopes = slopes;
    o.sinks = sinks;
    o.cu_seqlens_q = in.options.cu_seqlens_q;
    o.cu_seqlens_k = in.options.cu_seqlens_k;
    o.dropout.p = in.options.dropout.p;
    o.dropout.seed = in.options.dropout.seed;
    const auto f = detail::allocating_forward(qf, kf, vf, o);
    Tensor<float> dout(f.out.shape(), 1.0f);
    detail::allocating_backward(qf, kf, vf, f, dout, o);
    Tensor<double> out(f.out.shape()), lse(f.lse.shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] = f.out.data()[i];
    for (int64_t i = 0; i < lse.numel(); ++i) lse.data()[i] = f.lse.data()[i];
    eng = describe(out, lse);
  } catch (const Error& e) {
    eng = std::string("error: ") + e.what();
  }
  // One line when both agree (results may differ in the last digits: show the
  // reference's), both lines otherwise, and always both when either has a NaN.
  const bool same_kind = ref.substr(0, 6) == eng.substr(0, 6);
  const bool nan = ref.find("NaN") != std::string::npos || eng.find("NaN") != std::string::npos;
  if (!nan && same_kind && (ref == eng || ref.starts_with("result"))) return ref;
  return "reference: " + ref + " / engine: " + eng;
}

}  // namespace

std::vector<Case> api_cases() {
  std::vector<Case> c;
  auto add = [&](std::string cls, std::string example, std::function<Inputs()> setup) {
    c.push_back({std::move(cls), std::move(example), [setup] { return run_both(setup()); }});
  };
  add("mismatched head dim", "q [1,2,4,8], k [1,2,4,4]", [] { return make({1, 2, 4, 8}, {1, 2, 4, 4}, {1, 2, 4, 8}); });
  add("mismatched batch", "q batch 2, k batch 1", [] { return make({2, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}); });
  add("mismatched heads of k and v", "k 2 heads, v 1 head", [] { return make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 1, 4, 8}); });
  add("Hq not a multiple of Hkv", "q 3 heads, k/v 2 heads", [] { return make({1, 3, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}); });
  add("k and v of different lengths", "k seq 4, v seq 5", [] { return make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 5, 8}); });
  add("zero-length query sequence", "q [1,1,0,8]", [] { return make({1, 1, 0, 8}, {1, 1, 4, 8}, {1, 1, 4, 8}); });
  add("zero-length key sequence", "k, v [1,1,0,8]", [] { return make({1, 1, 4, 8}, {1, 1, 0, 8}, {1, 1, 0, 8}); });
  add("d = 0", "q, k [1,1,4,0]", [] { return make({1, 1, 4, 0}, {1, 1, 4, 0}, {1, 1, 4, 8}); });
  add("empty batch", "B = 0", [] { return make({0, 1, 4, 8}, {0, 1, 4, 8}, {0, 1, 4, 8}); });
  add("huge d", "d = 65536, N = 2", [] { return make({1, 1, 2, 65536}, {1, 1, 2, 65536}, {1, 1, 2, 4}, 0.01); });
  add("NaN in q", "q[0,0,1,2] = NaN", [] {
    auto in = make({1, 1, 4, 8}, {1, 1, 4, 8}, {1, 1, 4, 8});
    in.q(0, 0, 1, 2) = NAN;
    return in;
  });
  add("+Inf in k", "k[0,0,3,0] = +inf", [] {
    auto in = make({1, 1, 4, 8}, {1, 1, 4, 8}, {1, 1, 4, 8});
    in.k(0, 0, 3, 0) = INFINITY;
    return in;
  });
  add("-Inf in v", "v[0,0,0,7] = -inf", [] {
    auto in = make({1, 1, 4, 8}, {1, 1, 4, 8}, {1, 1, 4, 8});
    in.v(0, 0, 0, 7) = -INFINITY;
    return in;
  });
  add("fully masked batch", "key_lengths = {0, 4}", [] {
    auto in = make({2, 2, 4, 8}, {2, 2, 4, 8}, {2, 2, 4, 8});
    in.lengths = {0, 4};
    in.options.key_lengths = in.lengths;
    return in;
  });
  add("fully masked rows", "boolean mask all false", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.bool_mask = Tensor<uint8_t>({1, 1, 4, 4}, 0);
    in.options.bool_mask = in.bool_mask.view();
    return in;
  });
  add("mask of the wrong shape", "bool mask [1,1,4,3] for Nk = 4", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.bool_mask = Tensor<uint8_t>({1, 1, 4, 3}, 1);
    in.options.bool_mask = in.bool_mask.view();
    return in;
  });
  add("padding length out of range", "key_lengths = {5} for Nk = 4", [] {
    auto in = make({1, 1, 4, 8}, {1, 1, 4, 8}, {1, 1, 4, 8});
    in.lengths = {5};
    in.options.key_lengths = in.lengths;
    return in;
  });
  add("logits of ±1e30", "q·k·scale = ±1e30 (q = ±1e15, k = 1e15, no scale)", [] {
    auto in = make({1, 1, 2, 1}, {1, 1, 3, 1}, {1, 1, 3, 2});
    in.q(0, 0, 0, 0) = 1e15;
    in.q(0, 0, 1, 0) = -1e15;
    for (int j = 0; j < 3; ++j) in.k(0, 0, j, 0) = 1e15 * (j - 1);
    in.options.scale = ScalePolicy::none();
    return in;
  });
  add("scale of 1e6", "scale = 1e6 on N(0,1)-sized inputs", [] {
    auto in = make({1, 2, 8, 16}, {1, 2, 8, 16}, {1, 2, 8, 16}, 1.0);
    in.options.scale = ScalePolicy::fixed(1e6);
    return in;
  });
  add("d = 1, N = 1", "q, k, v [1,1,1,1]", [] { return make({1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}); });
  add("score overflow", "q = k = 1e20, no scale: scores 2e40, beyond float range", [] {
    auto in = make({1, 1, 2, 2}, {1, 1, 2, 2}, {1, 1, 2, 2});
    for (double& x : in.q.storage()) x = 1e20;
    for (double& x : in.k.storage()) x = 1e20;
    in.options.scale = ScalePolicy::none();
    return in;
  });
  add("score overflow under softcap", "q = (3e19, 3e19) on 4 rows, k0 = (3e19, -3e19), softcap = 50: q·k0 = inf in float", [] {
    auto in = make({1, 1, 4, 2}, {1, 1, 3, 2}, {1, 1, 3, 3});
    for (double& x : in.q.storage()) x = static_cast<float>(3e19);
    for (double& x : in.k.storage()) x = 0;
    in.k(0, 0, 0, 0) = static_cast<float>(3e19);
    in.k(0, 0, 0, 1) = static_cast<float>(-3e19);
    in.options.scale = ScalePolicy::none();
    in.options.softcap = 50.0;
    return in;
  });
  add("scores all below float range", "q = 1e20, k = -1e20, no scale: every score -2e40, -inf in float", [] {
    auto in = make({1, 1, 4, 2}, {1, 1, 3, 2}, {1, 1, 3, 2});
    for (double& x : in.q.storage()) x = 1e20;
    for (double& x : in.k.storage()) x = -1e20;
    in.options.scale = ScalePolicy::none();
    return in;
  });
  // Issue 17: the variants' options.
  add("window side below -1", "window = (-2, 0)", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.options.window = {-2, 0};
    return in;
  });
  add("softcap not positive", "softcap = 0", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.options.softcap = 0.0;
    return in;
  });
  add("softcap NaN", "softcap = NaN", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.options.softcap = std::numeric_limits<double>::quiet_NaN();
    return in;
  });
  add("ALiBi slopes of the wrong shape", "3 slopes for Hq = 2, B = 1", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.slopes = {0.5, 0.25, 0.125};
    in.options.alibi_slopes = in.slopes;
    return in;
  });
  add("sinks of the wrong shape", "1 sink for Hq = 2", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.sinks = {0.5};
    in.options.sinks = in.sinks;
    return in;
  });
  add("cu_seqlens not increasing", "cu_seqlens_q = {0, 3, 2, 4}", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.cu_seqlens_q = {0, 3, 2, 4};
    in.cu_seqlens_k = {0, 1, 2, 4};
    in.options.cu_seqlens_q = in.cu_seqlens_q;
    in.options.cu_seqlens_k = in.cu_seqlens_k;
    return in;
  });
  add("cu_seqlens not ending at the total length", "cu_seqlens_k = {0, 2, 3} for Nk = 4", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.cu_seqlens_q = {0, 2, 4};
    in.cu_seqlens_k = {0, 2, 3};
    in.options.cu_seqlens_q = in.cu_seqlens_q;
    in.options.cu_seqlens_k = in.cu_seqlens_k;
    return in;
  });
  add("packed sequences with a sequence of no keys", "cu_seqlens_q = {0, 2, 4}, cu_seqlens_k = {0, 0, 4}", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.cu_seqlens_q = {0, 2, 4};
    in.cu_seqlens_k = {0, 0, 4};
    in.options.cu_seqlens_q = in.cu_seqlens_q;
    in.options.cu_seqlens_k = in.cu_seqlens_k;
    return in;
  });
  add("dropout_p outside [0, 1)", "dropout_p = 1", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.options.dropout.p = 1.0;
    return in;
  });
  add("dropout_p NaN", "dropout_p = NaN", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.options.dropout.p = std::numeric_limits<double>::quiet_NaN();
    return in;
  });
  add("sinks on rows that see no key", "sinks = {0.5, -1}, key_lengths = {0}: out = 0, L = the sink", [] {
    auto in = make({1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8});
    in.sinks = {0.5, -1.0};
    in.options.sinks = in.sinks;
    in.lengths = {0};
    in.options.key_lengths = in.lengths;
    return in;
  });
  c.push_back({"output strides that alias", "out [1,1,4,4] with seq stride 0", [] {
                 Tensor<double> q({1, 1, 4, 4}, 0.5), out({1, 1, 4, 4}), lse({1, 1, 4, 1});
                 const TensorView<double> aliased(out.data(), {1, 1, 4, 4}, {16, 16, 0, 1});
                 try {
                   reference::attention_forward<double>(q, q, q, {}, {aliased, lse});
                 } catch (const Error& e) {
                   return std::string("error: ") + e.what();
                 }
                 return std::string("result: accepted (wrong)");
               }});
  c.push_back({"output overlapping an input", "out written over q", [] {
                 Tensor<double> q({1, 1, 4, 4}, 0.5), lse({1, 1, 4, 1});
                 try {
                   reference::attention_forward<double>(q, q, q, {}, {q.view(), lse});
                 } catch (const Error& e) {
                   return std::string("error: ") + e.what();
                 }
                 return std::string("result: accepted (wrong)");
               }});
  c.push_back({"input strides that alias (broadcast)", "k with seq stride 0: one key repeated", [] {
                 Tensor<double> q({1, 1, 4, 4}, 0.5), kv({1, 1, 1, 4}, 0.25);
                 const ConstView<double> rep(kv.data(), {1, 1, 4, 4}, {0, 0, 0, 1});
                 const auto f = detail::allocating_forward(q, rep, rep);
                 return describe(f.out, f.lse) + " (a view may repeat input elements)";
               }});
  // Issue 15: the 16-bit element types (engine only: the reference is double).
  c.push_back({"NaN in a bfloat16 input", "engine, bfloat16 k[0,0,2,1] = NaN", [] {
                 Tensor<bfloat16> q({1, 1, 4, 8}, bfloat16::from_float(0.5f)), k(q.shape(), bfloat16::from_float(0.25f)),
                     out(q.shape());
                 Tensor<float> lse({1, 1, 4, 1});
                 k(0, 0, 2, 1) = bfloat16::from_float(std::numeric_limits<float>::quiet_NaN());
                 try {
                   attention_forward(q.view(), k.view(), k.view(), {}, {out.view(), lse.view()});
                 } catch (const Error& e) {
                   return std::string("error: ") + e.what();
                 }
                 return std::string("result: accepted (wrong)");
               }});
  c.push_back({"float16 gradient beyond 65504", "engine, float16: 600 rows of dO = 200 on one key (dv = 120000)", [] {
                 Tensor<float16> q({1, 1, 600, 8}), k({1, 1, 1, 8}), v(k.shape(), float16::from_float(1.0f)),
                     out(q.shape()), g(q.shape(), float16::from_float(200.0f)), dq(q.shape()), dk(k.shape()),
                     dv(k.shape());
                 Tensor<float> lse({1, 1, 600, 1});
                 try {
                   attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view()});
                   attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), g.view(), {},
                                      {dq.view(), dk.view(), dv.view()});
                 } catch (const Error& e) {
                   return std::string("error: ") + e.what();
                 }
                 return std::string("result: accepted (wrong)");
               }});
  // Issue 18: a thread count that crashed libgomp, and NaN into the softmax derivatives.
  c.push_back({"thread count beyond the bound", "engine, threads = 99999", [] {
                 Tensor<float> q({1, 1, 4, 4}, 0.5f);
                 try {
                   detail::allocating_forward(q, q, q, {}, ComputeConfig{99999});
                 } catch (const Error& e) {
                   return std::string("error: ") + e.what();
                 }
                 return std::string("result: accepted (wrong)");
               }});
  // Issue 47: OMP_NUM_THREADS beyond the bound (the caller gave no count) once crashed libgomp.
  c.push_back({"OpenMP's default beyond the bound", "engine, threads = 0 with omp_set_num_threads(100000)", [] {
                 Tensor<float> q({1, 1, 4, 4}, 0.5f);
                 const int saved = omp_get_max_threads();
                 omp_set_num_threads(100000);
                 std::string out;
                 try {
                   detail::allocating_forward(q, q, q);
                   out = fmt::format("result: runs with OpenMP's default clamped to {} threads", team_size(0));
                 } catch (const Error& e) {
                   out = std::string("error: ") + e.what();
                 }
                 omp_set_num_threads(saved);
                 return out;
               }});
  c.push_back({"NaN into the softmax derivatives", "softmax_jacobian, softmax_vjp of s = (0.5, NaN, 0.5)", [] {
                 const std::vector<double> s{0.5, std::numeric_limits<double>::quiet_NaN(), 0.5};
                 std::vector<double> j(9), g(3, 1.0), gx(3);
                 std::string out;
                 try {
                   softmax_jacobian<double>(s, j);
                   out = "result: accepted (wrong)";
                 } catch (const Error& e) {
                   out = std::string("error: ") + e.what();
                 }
                 try {
                   softmax_vjp<double>(s, g, gx);
                   out += " / result: accepted (wrong)";
                 } catch (const Error& e) {
                   out += std::string(" / error: ") + e.what();
                 }
                 return out;
               }});
  return c;
}

}  // namespace attnlab::robustness
