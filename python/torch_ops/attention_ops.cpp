// torch.ops.attnlab.attention_forward, attention_backward and attention: attnlab's forward and
// backward as registered operators, so that TorchScript (torch.jit.script, torch.jit.trace)
// records them like torch's own.
//
//   attention_forward   the forward alone (CPU and Meta kernels): (out, lse, max_prob,
//                       entropy, jacobian_fro_sq), the last three empty without diagnostics
//   attention_backward  the backward alone: (dq, dk, dv, dsinks), dsinks empty without sinks
//   attention           the forward with autograd: an Autograd kernel whose backward runs
//                       attention_backward on the saved q, k, v, out and lse (never the N×N
//                       probabilities); its forward redispatches below autograd (CPU or Meta)
//
// The operators take 4-D tensors [B, H, N, E] (attnlab.torch's functions reshape and broadcast
// first, with torch operations, so that autograd sums the gradients of anything expanded) and
// every option attnlab.torch.attention takes, each as a schema type: causal and scale as
// strings ("none" | "top_left" | "bottom_right"; a policy name or a number's repr), the seed
// of dropout drawn by the caller. A float mask's gradient is not computed here (it needs the
// N×N matrices attnlab's backward never forms): attnlab.torch computes it in Python, eagerly.
//
// torch 2.x: the same TORCH_LIBRARY block registers these there. What would change: the Meta
// kernels would be registered from Python as `torch.library.register_fake` (2.4+; 2.1–2.3
// `impl_abstract`) or kept in C++; `torch.compile` and `torch.export` need only them and the
// schema. The Autograd kernel could move to Python with `torch.library.register_autograd`
// (2.4+), and the options' schema could then be generated from Python type hints by
// `torch.library.custom_op` (2.4+), which also takes `mutates_args` for the cache operators
// (kv_cache_ops.cpp) instead of the conservative alias analysis they use here.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attnlab/attention.hpp"
#include "views.hpp"

namespace attnlab::torch_ops {
namespace {

// The options of every attention operator, in schema order: the schema's text and the C++
// parameters and arguments that go with it, written once.
#define ATTNLAB_OPTIONS_SCHEMA                                                                                  \
  "Tensor? attn_mask, Tensor? sinks, str causal, str scale, Tensor? key_lengths, bool check_finite, int threads, " \
  "float dropout_p, int seed, int[]? window_size, float? softcap, Tensor? alibi_slopes, Tensor? cu_seqlens_q, "     \
  "Tensor? cu_seqlens_k"
#define ATTNLAB_OPTION_PARAMS                                                                                   \
  const c10::optional<at::Tensor>&attn_mask, const c10::optional<at::Tensor>&sinks, c10::string_view causal,   \
      c10::string_view scale, const c10::optional<at::Tensor>&key_lengths, bool check_finite, int64_t threads,  \
      double dropout_p, int64_t seed, at::OptionalIntArrayRef window_size, c10::optional<double> softcap,       \
      const c10::optional<at::Tensor>&alibi_slopes, const c10::optional<at::Tensor>&cu_seqlens_q,                \
      const c10::optional<at::Tensor>&cu_seqlens_k
#define ATTNLAB_OPTION_ARGS                                                                                    \
  attn_mask, sinks, causal, scale, key_lengths, check_finite, threads, dropout_p, seed, window_size, softcap, \
      alibi_slopes, cu_seqlens_q, cu_seqlens_k

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

const char* const kDoubleBackward =
    "attnlab.torch: attnlab's backward is not itself differentiable, so double backward (create_graph=True, or "
    "torch.autograd.grad of a gradient) is not supported; take the second derivative with the plain torch formula "
    "instead";

bool present(const c10::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

c10::ScalarType accum_type(const at::Tensor& q) { return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const char* names[] = {"query", "key", "value"};
  const at::Tensor* xs[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK_VALUE(xs[i]->device().is_cpu() || xs[i]->device().is_meta(), names[i],
                      ": attnlab computes on the CPU and this tensor is on '", xs[i]->device(), "'");
    TORCH_CHECK_VALUE(xs[i]->layout() == at::kStrided, names[i], ": attnlab takes dense (strided) tensors");
    TORCH_CHECK_VALUE(xs[i]->dim() == 4, names[i], ": ", xs[i]->dim(), " dimensions; the operators take [B, H, N, E]");
    TORCH_CHECK_TYPE(xs[i]->scalar_type() == q.scalar_type(), names[i], ": dtype ", xs[i]->scalar_type(),
                     " does not match query's ", q.scalar_type());
  }
}

// An empty output, or no keys at all: every row sees none (O = 0, as for a fully masked row).
bool nothing_to_compute(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.size(0) == 0 || q.size(1) == 0 || q.size(2) == 0 || v.size(3) == 0 || k.size(2) == 0;
}

// The memory behind AttentionOptions' spans and views, kept for the call.
template <class T>
struct Held {
  at::Tensor mask;
  std::vector<int64_t> key_lengths, cu_seqlens_q, cu_seqlens_k;
  std::vector<T> alibi_slopes, sinks;
};

template <class T>
AttentionOptions<T> make_options(const at::Tensor& q, const at::Tensor& k, ATTNLAB_OPTION_PARAMS, Held<T>& held) {
  AttentionOptions<T> o;
  o.scale = ScalePolicy::parse(std::string(scale));
  o.causal = parse_causal(std::string(causal).c_str());
  o.check_finite = check_finite;
  held.key_lengths = int_values(key_lengths, "key_lengths");
  o.key_lengths = held.key_lengths;
  const int64_t B = q.size(0), Hq = q.size(1), Nq = q.size(2), Nk = k.size(2);
  if (present(attn_mask)) {
    const at::Tensor& m = *attn_mask;
    const std::vector<int64_t> scores{B, Hq, Nq, Nk};
    TORCH_CHECK_VALUE(m.dim() <= 4 && at::is_expandable_to(m.sizes(), scores), "attn_mask: shape ", m.sizes(),
                      " does not broadcast to the scores [B, Hq, Nq, Nk] = ", c10::IntArrayRef(scores));
    held.mask = m.expand(scores);  // stride 0 where it broadcasts: no copy
    if (m.scalar_type() == at::kBool) {
      const ConstView<uint8_t> raw(reinterpret_cast<const uint8_t*>(held.mask.data_ptr()), {B, Hq, Nq, Nk},
                                   {held.mask.stride(0), held.mask.stride(1), held.mask.stride(2), held.mask.stride(3)});
      o.bool_mask = raw;
    } else {
      TORCH_CHECK_TYPE(m.scalar_type() == scalar_type<T>(), "attn_mask: dtype ", m.scalar_type(), " should be ",
                       c10::toString(scalar_type<T>()), " for query of dtype ", q.scalar_type());
      o.additive_mask = view4<T>(held.mask, "attn_mask");
    }
  }
  if (window_size.has_value()) {
    TORCH_CHECK_VALUE(window_size->size() == 2, "window_size: expected (left, right), two ints");
    o.window = {(*window_size)[0], (*window_size)[1]};
  }
  if (softcap) o.softcap = *softcap;
  held.cu_seqlens_q = int_values(cu_seqlens_q, "cu_seqlens_q");
  held.cu_seqlens_k = int_values(cu_seqlens_k, "cu_seqlens_k");
  o.cu_seqlens_q = held.cu_seqlens_q;
  o.cu_seqlens_k = held.cu_seqlens_k;
  if (present(alibi_slopes)) {
    const int64_t n_seq = held.cu_seqlens_q.empty() ? B : static_cast<int64_t>(held.cu_seqlens_q.size()) - 1;
    const at::Tensor& a = *alibi_slopes;
    TORCH_CHECK_VALUE(a.dim() == 1 || (a.dim() == 2 && a.size(0) == n_seq && a.size(1) == Hq), "alibi_slopes: shape ",
                      a.sizes(), " should be (Hq,) = (", Hq, ",) or (n_seq, Hq) = (", n_seq, ", ", Hq, ")");
    held.alibi_slopes = float_values<T>(alibi_slopes);
  }
  if (present(sinks)) {
    TORCH_CHECK_VALUE(sinks->dim() == 1, "sinks: ", sinks->dim(), " dimensions; expected (Hq,) = (", Hq,
                      ",), one logit per query head");
    held.sinks = float_values<T>(sinks);
  }
  o.alibi_slopes = held.alibi_slopes;
  o.sinks = held.sinks;
  o.dropout.p = dropout_p;
  o.dropout.seed = static_cast<uint64_t>(seed);
  return o;
}

// f(E{}, options) for q's element type E, the options built from the schema's and their
// memory held for the call; attnlab's errors become ValueError.
template <class F>
void with_options(const at::Tensor& q, const at::Tensor& k, ATTNLAB_OPTION_PARAMS, F&& f) {
  translate_errors([&] {
    dispatch_dtype(q, [&](auto element) {
      using T = Accum<decltype(element)>;
      Held<T> held;
      f(element, make_options<T>(q, k, ATTNLAB_OPTION_ARGS, held));
    });
  });
}

ComputeConfig config_of(int64_t threads) {
  TORCH_CHECK_VALUE(threads >= 0 && threads <= kMaxThreads, "threads: ", threads, " is not in [0, ", kMaxThreads, "]");
  ComputeConfig config;
  config.threads = static_cast<int>(threads);
  return config;
}

// [B, H, N] rows as the kernels' [B, H, N, 1].
template <class T>
TensorView<T> rows_view(const at::Tensor& t) {
  return {reinterpret_cast<T*>(t.data_ptr()), {t.size(0), t.size(1), t.size(2), 1}, {t.stride(0), t.stride(1), t.stride(2), 1}};
}

ForwardResult forward_outputs(const at::Tensor& q, const at::Tensor& v, bool diagnostics) {
  const int64_t B = q.size(0), Hq = q.size(1), Nq = q.size(2);
  const auto rows = q.options().dtype(accum_type(q));
  auto diag = [&] { return diagnostics ? at::empty({B, Hq, Nq}, rows) : at::empty({0}, rows); };
  return {at::empty({B, Hq, Nq, v.size(3)}, q.options()), at::empty({B, Hq, Nq}, rows), diag(), diag(), diag()};
}

ForwardResult forward_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ATTNLAB_OPTION_PARAMS,
                           bool diagnostics) {
  check_inputs(q, k, v);
  return forward_outputs(q, v, diagnostics);
}

ForwardResult forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ATTNLAB_OPTION_PARAMS,
                          bool diagnostics) {
  check_inputs(q, k, v);
  ForwardResult r = forward_outputs(q, v, diagnostics);
  auto& [out, lse, max_prob, entropy, jac] = r;
  if (nothing_to_compute(q, k, v)) {
    // O = 0, L = −inf (or the sink, which then takes all the mass), the diagnostics of a
    // fully masked row, 0 (attnlab's RowDiagnostics).
    out.zero_();
    if (present(sinks))
      lse.copy_(sinks->detach().to(lse.scalar_type()).reshape({1, -1, 1}).expand_as(lse));
    else
      lse.fill_(-std::numeric_limits<double>::infinity());
    for (at::Tensor* d : {&max_prob, &entropy, &jac}) d->zero_();
    return r;
  }
  with_options(q, k, ATTNLAB_OPTION_ARGS, [&](auto element, const auto& o) {
    using E = decltype(element);
    using T = Accum<E>;
    ForwardOutputs<E> outputs{out_view4<E>(out), rows_view<T>(lse)};
    if (diagnostics) outputs.diagnostics = RowDiagnostics<T>{rows_view<T>(max_prob), rows_view<T>(entropy), rows_view<T>(jac)};
    attention_forward<E>(view4<E>(q, "query"), view4<E>(k, "key"), view4<E>(v, "value"), o, outputs, config_of(threads));
  });
  return r;
}

BackwardResult backward_outputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const c10::optional<at::Tensor>& sinks) {
  const auto contiguous = at::MemoryFormat::Contiguous;
  return {at::empty_like(q, contiguous), at::empty_like(k, contiguous), at::empty_like(v, contiguous),
          at::empty({present(sinks) ? sinks->numel() : 0}, q.options().dtype(accum_type(q)))};
}

BackwardResult backward_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&, ATTNLAB_OPTION_PARAMS) {
  check_inputs(q, k, v);
  return backward_outputs(q, k, v, sinks);
}

BackwardResult backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                            const at::Tensor& lse, const at::Tensor& grad_out, ATTNLAB_OPTION_PARAMS) {
  check_inputs(q, k, v);
  TORCH_CHECK_VALUE(out.dim() == 4 && grad_out.dim() == 4 && lse.dim() == 3,
                    "out, grad_out, lse: [B, Hq, Nq, Ev], [B, Hq, Nq, Ev] and [B, Hq, Nq] expected");
  TORCH_CHECK_TYPE(lse.scalar_type() == accum_type(q), "lse: dtype ", lse.scalar_type(), " should be ",
                   c10::toString(accum_type(q)), " for query of dtype ", q.scalar_type());
  BackwardResult r = backward_outputs(q, k, v, sinks);
  auto& [dq, dk, dv, dsinks] = r;
  if (nothing_to_compute(q, k, v)) {  // a row of nothing (but its sink): no gradient anywhere
    for (at::Tensor* g : {&dq, &dk, &dv, &dsinks}) g->zero_();
    return r;
  }
  with_options(q, k, ATTNLAB_OPTION_ARGS, [&](auto element, const auto& o) {
    using E = decltype(element);
    using T = Accum<E>;
    const BackwardOutputs<E> grads{out_view4<E>(dq), out_view4<E>(dk), out_view4<E>(dv),
                                   std::span<T>(dsinks.data_ptr<T>(), static_cast<size_t>(dsinks.numel()))};
    attention_backward<E>(view4<E>(q, "query"), view4<E>(k, "key"), view4<E>(v, "value"), view4<E>(out, "out"),
                          rows_view<T>(lse), view4<E>(grad_out, "grad_out"), o, grads, config_of(threads));
  });
  return r;
}

// ---- autograd -------------------------------------------------------------------------

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The options that are not tensors, kept in the context for the backward.
struct Scalars {
  std::string causal, scale;
  bool check_finite;
  int64_t threads;
  double dropout_p;
  int64_t seed;
  c10::optional<std::vector<int64_t>> window_size;
  c10::optional<double> softcap;
};

const char* const kTensorOptions[] = {"attn_mask", "sinks", "key_lengths", "alibi_slopes", "cu_seqlens_q",
                                      "cu_seqlens_k"};

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const c10::optional<at::Tensor>& attn_mask, const c10::optional<at::Tensor>& sinks,
                               const c10::optional<at::Tensor>& key_lengths,
                               const c10::optional<at::Tensor>& alibi_slopes,
                               const c10::optional<at::Tensor>& cu_seqlens_q,
                               const c10::optional<at::Tensor>& cu_seqlens_k, const Scalars& s, bool diagnostics) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnlab::attention_forward", "")
                         .typed<ForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              ATTNLAB_OPTION_PARAMS, bool)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const at::OptionalIntArrayRef window = s.window_size ? at::OptionalIntArrayRef(*s.window_size) : c10::nullopt;
    auto [out, lse, max_prob, entropy, jac] =
        op.call(q, k, v, attn_mask, sinks, s.causal, s.scale, key_lengths, s.check_finite, s.threads, s.dropout_p,
                s.seed, window, s.softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k, diagnostics);
    auto keep = [](const c10::optional<at::Tensor>& t) { return present(t) ? *t : at::Tensor(); };
    ctx->save_for_backward({q, k, v, out, lse, keep(attn_mask), keep(sinks), keep(key_lengths), keep(alibi_slopes),
                            keep(cu_seqlens_q), keep(cu_seqlens_k)});
    ctx->saved_data["causal"] = s.causal;
    ctx->saved_data["scale"] = s.scale;
    ctx->saved_data["check_finite"] = s.check_finite;
    ctx->saved_data["threads"] = s.threads;
    ctx->saved_data["dropout_p"] = s.dropout_p;
    ctx->saved_data["seed"] = s.seed;
    ctx->saved_data["window_size"] = s.window_size;
    ctx->saved_data["softcap"] = s.softcap;
    ctx->mark_non_differentiable({lse, max_prob, entropy, jac});
    return {out, lse, max_prob, entropy, jac};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK_NOT_IMPLEMENTED(!at::GradMode::is_enabled(), kDoubleBackward);
    const variable_list saved = ctx->get_saved_variables();
    TORCH_CHECK_NOT_IMPLEMENTED(!(saved[5].defined() && saved[5].requires_grad()),
                "attn_mask: its gradient is computed by attnlab.torch's eager functions, not by the registered "
                "operator torch.ops.attnlab.attention; call attnlab.torch.attention eagerly, or detach the mask");
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto opt = [](const at::Tensor& t) { return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt; };
    const auto window = ctx->saved_data["window_size"].toOptional<std::vector<int64_t>>();
    const at::Tensor grad_out = grads[0].defined() ? grads[0] : at::zeros_like(out);
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnlab::attention_backward", "")
                         .typed<BackwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               ATTNLAB_OPTION_PARAMS)>();
    const std::string causal = ctx->saved_data["causal"].toStringRef(), scale = ctx->saved_data["scale"].toStringRef();
    auto [dq, dk, dv, dsinks] = op.call(
        q, k, v, out, lse, grad_out, opt(saved[5]), opt(saved[6]), causal, scale, opt(saved[7]),
        ctx->saved_data["check_finite"].toBool(), ctx->saved_data["threads"].toInt(),
        ctx->saved_data["dropout_p"].toDouble(), ctx->saved_data["seed"].toInt(),
        window ? at::OptionalIntArrayRef(*window) : c10::nullopt, ctx->saved_data["softcap"].toOptional<double>(),
        opt(saved[8]), opt(saved[9]), opt(saved[10]));
    const at::Tensor& sinks = saved[6];
    variable_list result(11);  // one per forward argument after ctx
    result[0] = dq, result[1] = dk, result[2] = dv;
    if (sinks.defined()) result[4] = dsinks.to(sinks.scalar_type());
    return result;
  }
};

ForwardResult attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ATTNLAB_OPTION_PARAMS,
                                 bool diagnostics) {
  for (const auto* t : {&key_lengths, &alibi_slopes, &cu_seqlens_q, &cu_seqlens_k})
    TORCH_CHECK_VALUE(!present(*t) || !(*t)->requires_grad(),
                      "attnlab computes no gradient for key_lengths, alibi_slopes or cu_seqlens; detach them");
  Scalars s{std::string(causal), std::string(scale), check_finite, threads, dropout_p, seed,
            window_size ? c10::optional<std::vector<int64_t>>(window_size->vec()) : c10::nullopt, softcap};
  variable_list r = AttentionFunction::apply(q, k, v, attn_mask, sinks, key_lengths, alibi_slopes, cu_seqlens_q,
                                             cu_seqlens_k, s, diagnostics);
  return {r[0], r[1], r[2], r[3], r[4]};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnlab, m) {
  m.def("attention_forward(Tensor query, Tensor key, Tensor value, " ATTNLAB_OPTIONS_SCHEMA
        ", bool diagnostics) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("attention_backward(Tensor query, Tensor key, Tensor value, Tensor out, Tensor lse, Tensor grad_out, "
        ATTNLAB_OPTIONS_SCHEMA ") -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("attention(Tensor query, Tensor key, Tensor value, " ATTNLAB_OPTIONS_SCHEMA
        ", bool diagnostics) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(attnlab, CPU, m) {
  m.impl("attention_forward", &forward_cpu);
  m.impl("attention_backward", &backward_cpu);
}

// Shapes and dtypes without computing: what tracing with meta tensors, and torch 2.x's
// fake tensors, ask.
TORCH_LIBRARY_IMPL(attnlab, Meta, m) {
  m.impl("attention_forward", &forward_meta);
  m.impl("attention_backward", &backward_meta);
}

// The primitives carry no gradient (attention does); torch 1.13 has no autograd fallthrough
// for meta tensors as it has for CPU ones.
TORCH_LIBRARY_IMPL(attnlab, AutogradMeta, m) {
  m.impl("attention_forward", torch::CppFunction::makeFallthrough());
  m.impl("attention_backward", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(attnlab, Autograd, m) { m.impl("attention", &attention_autograd); }

// Below autograd (inside AttentionFunction, under no_grad, or for tensors that need no
// gradient) attention is attention_forward.
TORCH_LIBRARY_IMPL(attnlab, CompositeExplicitAutograd, m) {
  m.impl("attention", [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ATTNLAB_OPTION_PARAMS,
                         bool diagnostics) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnlab::attention_forward", "")
                         .typed<ForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              ATTNLAB_OPTION_PARAMS, bool)>();
    return op.call(q, k, v, ATTNLAB_OPTION_ARGS, diagnostics);
  });
}

}  // namespace attnlab::torch_ops
