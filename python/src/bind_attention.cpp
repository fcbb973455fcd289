// attnlab.scaled_dot_product_attention, attention_forward, attention_backward.
// float32, float16 and bfloat16 (uint16 bit patterns, dtype="bfloat16") calls go to the fused
// engine (attnlab/engine.hpp; the 16-bit types with their options, lse and dsinks in
// float32), float64 calls to the double-precision reference (attnlab/reference.hpp). Arrays are read in place
// (see ndarray.hpp); the GIL is released while the kernels run.
#include <memory>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "attnlab/attention.hpp"
#include "arguments.hpp"
#include "attnlab/error.hpp"
#include "bindings.hpp"
#include "ndarray.hpp"
#include "signatures.hpp"

namespace attnlab::python {
namespace {

// ---- arguments shared by the three functions ---------------------------------

// A 1-D array of integers (key_lengths, cu_seqlens): `what` says what its entries are,
// `index_name` what an index counts ("batch", "entry").
std::vector<int64_t> parse_int_list(const py::object& obj, const char* name, const char* what,
                                    const char* index_name) {
  if (obj.is_none()) return {};
  const py::array a = as_array(obj);
  // An empty list becomes a float64 array: say what is wrong with it, not its dtype.
  if (a.size() == 0) throw Error(fmt::format("{}: empty; give {} (or None)", name, what));
  if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw py::type_error(fmt::format("{}: dtype {} is not an integer type", name, dtype_name(a)));
  if (a.ndim() != 1) throw Error(fmt::format("{}: {} dimensions; expected 1 ({})", name, a.ndim(), what));
  // Unsigned values past int64's range would wrap to negative numbers in the cast below.
  if (a.dtype().kind() == 'u') {
    const auto big = py::module_::import("numpy").attr("asarray")(a, "uint64").cast<py::array_t<uint64_t>>();
    for (py::ssize_t b = 0; b < big.size(); ++b)
      if (big.data()[b] > static_cast<uint64_t>(INT64_MAX))
        throw Error(fmt::format("{}: value {} for {} {} is too large", name, big.data()[b], index_name, b));
  }
  const auto ints = py::module_::import("numpy").attr("asarray")(a, "int64").cast<py::array_t<int64_t>>();
  return std::vector<int64_t>(ints.data(), ints.data() + ints.size());
}

std::vector<int64_t> parse_key_lengths(const py::object& lengths) {
  if (!lengths.is_none() && as_array(lengths).size() == 0)
    throw Error("key_lengths: empty; give one length per batch entry (or None for no padding)");
  return parse_int_list(lengths, "key_lengths", "one length per batch", "batch");
}

Window parse_window(const py::object& w) {
  if (w.is_none()) return {};
  if (!py::isinstance<py::sequence>(w) || py::isinstance<py::str>(w) || py::len(w) != 2)
    throw py::type_error("window_size: expected (left, right), two ints (-1 = unbounded on that side), or None");
  const py::sequence seq = w.cast<py::sequence>();
  int64_t side[2];
  for (int s = 0; s < 2; ++s) {
    const py::object x = seq[static_cast<size_t>(s)];
    // Integers only (NumPy's too); below -1 is the library's error, naming both sides.
    side[s] = int_arg(x, "window_size", INT64_MIN, INT64_MAX);
  }
  return {side[0], side[1]};
}

std::optional<double> parse_softcap(const py::object& c) {
  if (c.is_none()) return std::nullopt;
  return double_arg(c, "softcap", "a positive number or None");
}

// A float array of at most 2 dimensions, read in C order (alibi_slopes, sinks).
template <class T>
std::vector<T> parse_floats(const py::object& obj, const char* name) {
  if (obj.is_none()) return {};
  const py::array a = as_array(obj);
  if (a.dtype().kind() != 'f' && a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw py::type_error(fmt::format("{}: dtype {} is not a number type", name, dtype_name(a)));
  const auto values = py::module_::import("numpy").attr("ascontiguousarray")(a, "float64").cast<py::array_t<double>>();
  return std::vector<T>(values.data(), values.data() + values.size());
}

// Keeps the arrays behind AttentionOptions' views alive for the call.
template <class T>
struct OptionStorage {
  Operand<uint8_t> bool_mask;
  Operand<T> additive_mask;
  std::vector<int64_t> key_lengths, cu_seqlens_q, cu_seqlens_k;
  std::vector<T> alibi_slopes, sinks;
};

// The variants' keyword arguments (attention_forward / attention_backward).
struct Variants {
  py::object window_size, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k;
  double dropout_p = 0.0;
  uint64_t seed = 0;
};

template <class T>
void attach_variants(const Variants& v, int64_t B, int64_t Hq, AttentionOptions<T>& o, OptionStorage<T>& keep) {
  o.window = parse_window(v.window_size);
  o.softcap = parse_softcap(v.softcap);
  keep.cu_seqlens_q =
      parse_int_list(v.cu_seqlens_q, "cu_seqlens_q", "offsets 0, ..., total_q of the packed sequences", "entry");
  keep.cu_seqlens_k =
      parse_int_list(v.cu_seqlens_k, "cu_seqlens_k", "offsets 0, ..., total_k of the packed sequences", "entry");
  o.cu_seqlens_q = keep.cu_seqlens_q;
  o.cu_seqlens_k = keep.cu_seqlens_k;
  if (!v.alibi_slopes.is_none()) {
    // [Hq] or [n_seq, Hq]: a 2-D array must say which axis is the heads.
    const py::array a = as_array(v.alibi_slopes);
    const int64_t n_seq = keep.cu_seqlens_q.empty() ? B : static_cast<int64_t>(keep.cu_seqlens_q.size()) - 1;
    const bool ok = (a.ndim() == 1) || (a.ndim() == 2 && a.shape(1) == Hq && a.shape(0) == n_seq);
    if (!ok)
      throw Error(fmt::format("alibi_slopes: shape {} should be (Hq,) = ({},) or (n_seq, Hq) = ({}, {})",
                              py::str(py::tuple(a.attr("shape"))).cast<std::string>(), Hq, n_seq, Hq));
    keep.alibi_slopes = parse_floats<T>(a, "alibi_slopes");
  }
  if (!v.sinks.is_none()) {
    const py::array a = as_array(v.sinks);
    if (a.ndim() != 1)
      throw Error(fmt::format("sinks: {} dimensions; expected (Hq,) = ({},), one logit per query head", a.ndim(), Hq));
    keep.sinks = parse_floats<T>(a, "sinks");
  }
  o.alibi_slopes = keep.alibi_slopes;
  o.sinks = keep.sinks;
  o.dropout.p = v.dropout_p;
  o.dropout.seed = v.seed;
}

// attn_mask: bool (True = attend) or float (added to the scaled scores), any
// shape that broadcasts to scores [B, Hq, Nq, Nk] as in NumPy/PyTorch.
template <class T>
void attach_mask(const py::object& mask, const Shape& scores, AttentionOptions<T>& o, OptionStorage<T>& keep) {
  if (mask.is_none()) return;
  py::array m = as_array(mask);
  auto broadcast = [&](auto& view) {
    static const char* names[] = {"batch", "heads", "query length", "key length"};
    for (int a = 0; a < 4; ++a) broadcast_axis(view, a, scores[a], "attn_mask", names[a]);
  };
  if (m.dtype().kind() == 'b') {
    keep.bool_mask = operand<uint8_t>(m.attr("view")("uint8"), "attn_mask");  // same bytes, no copy
    broadcast(keep.bool_mask.view);
    o.bool_mask = keep.bool_mask.view;
  } else if (m.dtype().kind() == 'f') {
    keep.additive_mask = operand<T>(m, "attn_mask");
    broadcast(keep.additive_mask.view);
    o.additive_mask = keep.additive_mask.view;
  } else {
    throw py::type_error(fmt::format("attn_mask: dtype {} is not supported (bool: True = attend; or float: added "
                                     "to the scores)", dtype_name(m)));
  }
}

void require_same_dtype(const py::array& a, const char* name, DType want, const char* first, bool bf16 = false) {
  if (float_dtype(a, name, bf16) != want)
    throw py::type_error(fmt::format("{}: dtype {} does not match {}'s {}", name, dtype_name(a), first,
                                     to_string(want)));
}

// The type of the options, lse, diagnostics and dsinks for element type E: float for
// float and the 16-bit types (computed in float32), double for double.
template <class E>
using ScalarOf = std::conditional_t<std::is_same_v<E, double>, double, float>;

// ---- the kernels, by precision -------------------------------------------------

template <class T>
struct DiagnosticOutputs {
  Output<T> max_prob, entropy, jacobian_fro_sq;
};

// Runs a computation with the GIL released, and Ctrl-C working: the library asks the
// poll below between tiles (at most every 10 ms), which runs Python's signal handlers.
// Whatever a handler raised (KeyboardInterrupt by default) stops the call and is raised
// here, after the GIL is back; the outputs are fresh arrays the caller never sees.
template <class F>
void run_interruptible(int threads, F&& compute) {
  std::shared_ptr<py::error_already_set> raised;
  ComputeConfig config;
  config.threads = threads;
  config.interrupt = [&raised] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    raised = std::make_shared<py::error_already_set>();  // takes the pending exception
    return true;
  };
  try {
    py::gil_scoped_release release;
    compute(config);
  } catch (const Interrupted&) {
    if (raised) throw py::error_already_set(*raised);
    throw;
  }
}

// One call for every element type: attnlab::attention_forward routes float and the
// 16-bit types to the engine and double to the reference.
template <class E>
void run_forward(ConstView<E> q, ConstView<E> k, ConstView<E> v, const AttentionOptions<ScalarOf<E>>& o,
                 TensorView<E> out, TensorView<ScalarOf<E>> lse, DiagnosticOutputs<ScalarOf<E>>* diag,
                 TensorView<uint8_t> dropout_mask, int threads) {
  ForwardOutputs<E> outputs{out, lse, std::nullopt, dropout_mask};
  if (diag != nullptr)
    outputs.diagnostics =
        RowDiagnostics<ScalarOf<E>>{diag->max_prob.view, diag->entropy.view, diag->jacobian_fro_sq.view};
  run_interruptible(threads, [&](const ComputeConfig& config) { attention_forward<E>(q, k, v, o, outputs, config); });
}

template <class E>
void run_backward(ConstView<E> q, ConstView<E> k, ConstView<E> v, ConstView<E> out, ConstView<ScalarOf<E>> lse,
                  ConstView<E> dout, const AttentionOptions<ScalarOf<E>>& o, TensorView<E> dq, TensorView<E> dk,
                  TensorView<E> dv, std::span<ScalarOf<E>> dsinks, int threads) {
  run_interruptible(threads, [&](const ComputeConfig& config) {
    attention_backward<E>(q, k, v, out, lse, dout, o, {dq, dk, dv, dsinks}, config);
  });
}

// The dtype argument: None (the arrays' own), or the element type the arrays hold, as a
// NumPy dtype or its name; "bfloat16" for uint16 (or int16) arrays of bfloat16 bit patterns,
// which NumPy has no dtype for. Returns the type to read the arrays as.
std::optional<DType> dtype_arg(const py::object& dtype) {
  if (dtype.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(dtype) && dtype.cast<std::string>() == "bfloat16") return DType::bfloat16;
  std::string name;
  try {
    name = py::str(py::module_::import("numpy").attr("dtype")(dtype)).cast<std::string>();
  } catch (const py::error_already_set&) {
    throw py::type_error(fmt::format("dtype: {} is not a dtype (float16, float32, float64, or \"bfloat16\")",
                                     py::repr(dtype).cast<std::string>()));
  }
  for (DType t : {DType::float32, DType::float64, DType::float16})
    if (name == to_string(t)) return t;
  throw py::type_error(fmt::format("dtype: {} is not one attention computes in (float16, float32, float64, "
                                   "or \"bfloat16\")", name));
}

// The arrays' element type: the query's, read as `dtype` says.
DType element_type(const py::array& q, const py::object& dtype) {
  const std::optional<DType> want = dtype_arg(dtype);
  const DType t = float_dtype(q, "query", want == DType::bfloat16);
  if (want && *want != t)
    throw py::type_error(fmt::format("query: dtype {} does not match dtype={}", dtype_name(q), to_string(*want)));
  return t;
}

// The library's bound, checked before any array is converted.
int threads_arg(const py::object& threads) { return static_cast<int>(int_arg(threads, "threads", 0, kMaxThreads)); }

// ---- scaled_dot_product_attention ------------------------------------------------

template <class E>
py::array sdpa(py::array qa, py::array ka, py::array va, const py::object& attn_mask, double dropout_p, uint64_t seed,
               bool is_causal, const py::object& scale, bool enable_gqa) {
  using T = ScalarOf<E>;
  auto q = operand<E>(qa, "query"), k = operand<E>(ka, "key"), v = operand<E>(va, "value");
  for (const auto* x : {&q, &k, &v})
    if (x->rank < 2)
      throw Error(fmt::format("{}: {} dimension(s); expected [..., L, E]", x == &q ? "query" : x == &k ? "key" : "value",
                              x->rank));
  // Batch: NumPy broadcasting. Heads: broadcasting, or grouped-query when enable_gqa.
  const int64_t B = std::max({q.view.batch(), k.view.batch(), v.view.batch()});
  broadcast_axis(q.view, 0, B, "query", "batch");
  broadcast_axis(k.view, 0, B, "key", "batch");
  broadcast_axis(v.view, 0, B, "value", "batch");
  const int64_t Hkv = std::max(k.view.heads(), v.view.heads());
  broadcast_axis(k.view, 1, Hkv, "key", "heads");
  broadcast_axis(v.view, 1, Hkv, "value", "heads");
  if (!enable_gqa && q.view.heads() != Hkv && Hkv != 1) {
    if (q.view.heads() != 1)
      throw Error(fmt::format("key: {} heads do not broadcast with query's {} (enable_gqa=True shares each "
                              "key/value head among a group of query heads)", Hkv, q.view.heads()));
    broadcast_axis(q.view, 1, Hkv, "query", "heads");
  }
  const int64_t H = q.view.heads(), Nq = q.view.seq(), Nk = k.view.seq(), dv = v.view.dim();

  AttentionOptions<T> o;
  OptionStorage<T> keep;
  o.scale = scale_arg(scale);
  o.causal = is_causal ? Causal::top_left : Causal::none;
  o.dropout.p = dropout_p;
  o.dropout.seed = seed;
  attach_mask(attn_mask, {B, H, Nq, Nk}, o, keep);

  const int rank = std::max({q.rank, k.rank, v.rank});
  const Shape out_shape{B, H, Nq, dv};
  auto out = make_output<E>(out_shape, trailing_shape(out_shape, rank));
  Tensor<T> lse({B, H, Nq, 1});  // [B, H, Nq, 1] needed by the kernel, not returned
  run_forward<E>(q.view, k.view, v.view, o, out.view, lse.view(), nullptr, {}, 0);
  return std::move(out.array);
}

// A seed for dropout when the caller gives none: from NumPy's global generator, so that
// np.random.seed(n) makes the call reproducible (as torch.manual_seed does for PyTorch).
uint64_t seed_or_draw(const py::object& seed) {
  if (!seed.is_none()) return uint64_arg(seed, "seed");
  using namespace pybind11::literals;
  return py::module_::import("numpy").attr("random").attr("randint")(0, INT64_MAX, "dtype"_a = "int64").cast<uint64_t>();
}

py::array scaled_dot_product_attention(const py::object& query, const py::object& key, const py::object& value,
                                       const py::object& attn_mask, const py::object& dropout_arg, bool is_causal,
                                       const py::object& scale, bool enable_gqa, const py::object& seed_arg) {
  const double dropout_p = double_arg(dropout_arg, "dropout_p", "a probability in [0, 1)");
  const uint64_t seed = dropout_p != 0.0 ? seed_or_draw(seed_arg) : 0;
  if (is_causal && !attn_mask.is_none())
    throw Error("attn_mask: must be None when is_causal=True (as in PyTorch); combine the causal mask into "
                "attn_mask, or use attention_forward(causal=...) which takes both");
  const py::array q = as_array(query), k = as_array(key), v = as_array(value);
  const DType t = float_dtype(q, "query");
  require_same_dtype(k, "key", t, "query");
  require_same_dtype(v, "value", t, "query");
  if (t == DType::float32) return sdpa<float>(q, k, v, attn_mask, dropout_p, seed, is_causal, scale, enable_gqa);
  if (t == DType::float16) return sdpa<float16>(q, k, v, attn_mask, dropout_p, seed, is_causal, scale, enable_gqa);
  return sdpa<double>(q, k, v, attn_mask, dropout_p, seed, is_causal, scale, enable_gqa);
}

// ---- attention_forward / attention_backward --------------------------------------

template <class T>
struct Inputs {
  Operand<T> q, k, v;
  int rank = 0;
};

template <class T>
Inputs<T> read_inputs(py::array qa, py::array ka, py::array va) {
  Inputs<T> in{operand<T>(qa, "query"), operand<T>(ka, "key"), operand<T>(va, "value"), 0};
  in.rank = in.q.rank;
  if (in.rank < 2)
    throw Error(fmt::format("query: {} dimension(s); expected [L, E], [H, L, E] or [B, H, L, E]", in.rank));
  if (in.k.rank != in.rank || in.v.rank != in.rank)
    throw Error(fmt::format("key, value: ranks {} and {} must equal query's {} (attention_forward does not "
                            "broadcast; scaled_dot_product_attention does)", in.k.rank, in.v.rank, in.rank));
  return in;
}

template <class E, class T = ScalarOf<E>>
AttentionOptions<T> read_options(const Inputs<E>& in, const py::object& attn_mask, const py::object& causal,
                                 const py::object& scale, const py::object& key_lengths, bool check_finite,
                                 const Variants& variants, OptionStorage<T>& keep) {
  AttentionOptions<T> o;
  o.scale = scale_arg(scale);
  o.causal = causal_arg(causal);
  o.check_finite = check_finite;
  keep.key_lengths = parse_key_lengths(key_lengths);
  o.key_lengths = keep.key_lengths;
  attach_mask(attn_mask, {in.q.view.batch(), in.q.view.heads(), in.q.view.seq(), in.k.view.seq()}, o, keep);
  attach_variants(variants, in.q.view.batch(), in.q.view.heads(), o, keep);
  return o;
}

template <class E>
py::object forward(py::array qa, py::array ka, py::array va, const py::object& attn_mask, const py::object& causal,
                   const py::object& scale, const py::object& key_lengths, bool diagnostics, bool check_finite,
                   int threads, const Variants& variants, bool return_dropout_mask) {
  using T = ScalarOf<E>;
  auto in = read_inputs<E>(qa, ka, va);
  OptionStorage<T> keep;
  auto o = read_options(in, attn_mask, causal, scale, key_lengths, check_finite, variants, keep);
  const auto& q = in.q.view;
  const Shape out_shape{q.batch(), q.heads(), q.seq(), in.v.view.dim()}, row_shape{q.batch(), q.heads(), q.seq(), 1};
  const auto row_py_shape = trailing_shape(row_shape, in.rank);  // [..., Nq, 1] → drop the unit axis below
  const std::vector<py::ssize_t> lse_py_shape(row_py_shape.begin(), row_py_shape.end() - 1);
  auto out = make_output<E>(out_shape, trailing_shape(out_shape, in.rank));
  auto lse = make_output<T>(row_shape, lse_py_shape);
  std::optional<DiagnosticOutputs<T>> diag;
  if (diagnostics)
    diag = DiagnosticOutputs<T>{make_output<T>(row_shape, lse_py_shape), make_output<T>(row_shape, lse_py_shape),
                                make_output<T>(row_shape, lse_py_shape)};
  std::optional<Output<uint8_t>> mask;
  if (return_dropout_mask) {
    const Shape mask_shape{q.batch(), q.heads(), q.seq(), in.k.view.seq()};
    mask = make_output<uint8_t>(mask_shape, trailing_shape(mask_shape, in.rank));
  }
  run_forward<E>(in.q.view, in.k.view, in.v.view, o, out.view, lse.view, diag ? &*diag : nullptr,
                 mask ? mask->view : TensorView<uint8_t>(), threads);
  py::object d = py::none(), m = py::none();
  if (diagnostics) {
    py::dict dd;
    dd["max_prob"] = std::move(diag->max_prob.array);
    dd["entropy"] = std::move(diag->entropy.array);
    dd["jacobian_fro_sq"] = std::move(diag->jacobian_fro_sq.array);
    d = dd;
  }
  if (return_dropout_mask) m = mask->array.attr("view")("bool");  // same bytes, 0 or 1
  return result_class("ForwardResult")(std::move(out.array), std::move(lse.array), d, m);
}

template <class E>
py::object backward(py::array qa, py::array ka, py::array va, py::array oa, py::array la, py::array ga,
                    const py::object& attn_mask, const py::object& causal, const py::object& scale,
                    const py::object& key_lengths, bool check_finite, int threads, const Variants& variants) {
  using T = ScalarOf<E>;
  auto in = read_inputs<E>(qa, ka, va);
  auto out = operand<E>(oa, "out"), grad_out = operand<E>(ga, "grad_out");
  auto lse = row_operand<T>(la, in.rank, "lse");
  if (out.rank != in.rank || grad_out.rank != in.rank)
    throw Error(fmt::format("out, grad_out: ranks {} and {} must equal query's {}", out.rank, grad_out.rank, in.rank));
  OptionStorage<T> keep;
  const auto o = read_options(in, attn_mask, causal, scale, key_lengths, check_finite, variants, keep);
  auto dq = make_output<E>(in.q.view.shape(), trailing_shape(in.q.view.shape(), in.rank));
  auto dk = make_output<E>(in.k.view.shape(), trailing_shape(in.k.view.shape(), in.rank));
  auto dv = make_output<E>(in.v.view.shape(), trailing_shape(in.v.view.shape(), in.rank));
  py::array_t<T> dsinks(static_cast<py::ssize_t>(keep.sinks.size()));
  run_backward<E>(in.q.view, in.k.view, in.v.view, out.view, lse.view, grad_out.view, o, dq.view, dk.view, dv.view,
                  std::span<T>(dsinks.mutable_data(), keep.sinks.size()), threads);
  return result_class("BackwardResult")(std::move(dq.array), std::move(dk.array), std::move(dv.array),
                                        keep.sinks.empty() ? py::object(py::none()) : py::object(std::move(dsinks)));
}

Variants read_variants(const py::object& window_size, const py::object& softcap, const py::object& alibi_slopes,
                       const py::object& sinks, const py::object& cu_seqlens_q, const py::object& cu_seqlens_k,
                       const py::object& dropout_p, const py::object& seed) {
  return Variants{window_size,
                  softcap,
                  alibi_slopes,
                  sinks,
                  cu_seqlens_q,
                  cu_seqlens_k,
                  double_arg(dropout_p, "dropout_p", "a probability in [0, 1)"),
                  uint64_arg(seed, "seed")};
}

py::object attention_forward_py(const py::object& query, const py::object& key, const py::object& value,
                                const py::object& attn_mask, const py::object& causal, const py::object& scale,
                                const py::object& key_lengths, bool diagnostics, bool check_finite,
                                const py::object& threads_given, const py::object& window_size,
                                const py::object& softcap, const py::object& alibi_slopes, const py::object& sinks,
                                const py::object& cu_seqlens_q, const py::object& cu_seqlens_k,
                                const py::object& dropout_p, const py::object& seed, bool return_dropout_mask,
                                const py::object& dtype) {
  const int threads = threads_arg(threads_given);
  const py::array q = as_array(query), k = as_array(key), v = as_array(value);
  const DType t = element_type(q, dtype);
  const bool bf16 = t == DType::bfloat16;
  require_same_dtype(k, "key", t, "query", bf16);
  require_same_dtype(v, "value", t, "query", bf16);
  const Variants var =
      read_variants(window_size, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, dropout_p, seed);
  auto run = [&](auto element) {
    using E = decltype(element);
    return forward<E>(q, k, v, attn_mask, causal, scale, key_lengths, diagnostics, check_finite, threads, var,
                      return_dropout_mask);
  };
  switch (t) {
    case DType::float32: return run(float{});
    case DType::float64: return run(double{});
    case DType::float16: return run(float16{});
    case DType::bfloat16: return run(bfloat16{});
  }
  return py::none();
}

py::object attention_backward_py(const py::object& query, const py::object& key, const py::object& value,
                                 const py::object& out, const py::object& lse, const py::object& grad_out,
                                 const py::object& attn_mask, const py::object& causal, const py::object& scale,
                                 const py::object& key_lengths, bool check_finite, const py::object& threads_given,
                                 const py::object& window_size, const py::object& softcap,
                                 const py::object& alibi_slopes, const py::object& sinks,
                                 const py::object& cu_seqlens_q, const py::object& cu_seqlens_k,
                                 const py::object& dropout_p, const py::object& seed, const py::object& dtype) {
  const int threads = threads_arg(threads_given);
  const py::array q = as_array(query), k = as_array(key), v = as_array(value), o = as_array(out), l = as_array(lse),
                  g = as_array(grad_out);
  const DType t = element_type(q, dtype);
  const bool bf16 = t == DType::bfloat16;
  require_same_dtype(k, "key", t, "query", bf16);
  require_same_dtype(v, "value", t, "query", bf16);
  require_same_dtype(o, "out", t, "query", bf16);
  require_same_dtype(g, "grad_out", t, "query", bf16);
  // lse is float32 for float32 and the 16-bit types (attention_forward returns it so).
  const DType lse_type = t == DType::float64 ? DType::float64 : DType::float32;
  if (float_dtype(l, "lse") != lse_type)
    throw py::type_error(fmt::format("lse: dtype {} should be {} for query of dtype {}", dtype_name(l),
                                     to_string(lse_type), to_string(t)));
  const Variants var =
      read_variants(window_size, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, dropout_p, seed);
  auto run = [&](auto element) {
    using E = decltype(element);
    return backward<E>(q, k, v, o, l, g, attn_mask, causal, scale, key_lengths, check_finite, threads, var);
  };
  switch (t) {
    case DType::float32: return run(float{});
    case DType::float64: return run(double{});
    case DType::float16: return run(float16{});
    case DType::bfloat16: return run(bfloat16{});
  }
  return py::none();
}

}  // namespace

void bind_attention(py::module_& m) {
  using namespace pybind11::literals;
  def(m, signatures::scaled_dot_product_attention(), &scaled_dot_product_attention);
  def(m, signatures::attention_forward(), &attention_forward_py);
  // For tests: attnlab.torch passes threads=0, and torch.set_num_threads must then govern the team.
  m.def("_team_size", [](const py::object& threads) { return team_size(threads_arg(threads)); }, "threads"_a = 0,
        "The number of threads a call given `threads` runs with (attnlab::team_size).");
  def(m, signatures::attention_backward(), &attention_backward_py);
}

}  // namespace attnlab::python
