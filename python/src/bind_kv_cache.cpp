// attnlab.KVCache: the library's paged, quantized KV cache (attnlab/kv_cache.hpp) over NumPy.
// Rows go in as float32 arrays (other dtypes are converted); attention's results are new
// float32 arrays. The GIL is held throughout: it is what keeps two Python threads from
// changing one cache at once, or reading it while another appends.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "attnlab/kv_cache.hpp"
#include "bindings.hpp"
#include "ndarray.hpp"
#include "signatures.hpp"

namespace attnlab::python {

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Rows as C-contiguous float32; a value beyond float32's range is refused by name, not made inf.
FloatArray float32_rows(const py::object& x, const char* name) {
  const py::array a = as_array(x);
  const py::dtype f32 = py::dtype::of<float>();
  FloatArray rows = FloatArray::ensure(a.dtype().equal(f32) ? a : cast_to_float(a, f32, name));
  if (!rows) throw py::type_error(fmt::format("{}: dtype {} does not convert to float32", name, dtype_name(a)));
  return rows;
}

// [kv_heads, n, dim] or [1, kv_heads, n, dim] as the 4-D view the cache takes.
ConstView<float> rows_view(const FloatArray& a, const char* name) {
  if (a.ndim() == 3) return {a.data(), {1, a.shape(0), a.shape(1), a.shape(2)}};
  if (a.ndim() == 4) return {a.data(), {a.shape(0), a.shape(1), a.shape(2), a.shape(3)}};
  throw Error(std::string(name) + ": " + std::to_string(a.ndim()) + " dimensions, not 3 ([kv_heads, n, dim]) or 4");
}

// Every integer argument through int_arg, named with its range (pybind11's own conversion
// says only "incompatible function arguments", or wraps 2**70). The cache checks them again.
constexpr int64_t kSize = int64_t{1} << 16, kTokens = int64_t{1} << 40;
int64_t seq_arg(const py::handle& x) { return int_arg(x, "seq", 0, INT64_MAX); }
int64_t layer_arg(const py::handle& x) { return int_arg(x, "layer", 0, kSize - 1); }

KVCache make_cache(const py::object& layers, const py::object& kv_heads, const py::object& head_dim,
                   const py::object& max_tokens, const std::string& key_type, const std::string& value_type,
                   const py::object& value_dim, const py::object& block_tokens, std::vector<float> key_scales,
                   std::vector<float> value_scales, const std::string& key_rotation, const std::string& value_rotation,
                   const py::object& center_keys) {
  KVCacheConfig c;
  c.layers = int_arg(layers, "layers", 1, kSize), c.kv_heads = int_arg(kv_heads, "kv_heads", 1, kSize);
  c.head_dim = int_arg(head_dim, "head_dim", 1, kSize), c.max_tokens = int_arg(max_tokens, "max_tokens", 1, kTokens);
  c.value_dim = value_dim.is_none() ? 0 : int_arg(value_dim, "value_dim", 1, kSize);
  c.block_tokens = int_arg(block_tokens, "block_tokens", 1, kSize);
  c.key_type = parse_cache_type(key_type), c.value_type = parse_cache_type(value_type);
  c.key_scales = std::move(key_scales), c.value_scales = std::move(value_scales);
  c.key_rotation = parse_cache_rotation(key_rotation), c.value_rotation = parse_cache_rotation(value_rotation);
  if (!py::isinstance<py::bool_>(center_keys))
    throw py::type_error("center_keys: expected True or False, got " + std::string(py::str(center_keys.get_type())));
  c.center_keys = center_keys.cast<bool>();
  return KVCache(c);
}

std::vector<int64_t> int_list(const py::object& xs, const char* name, int64_t lo, int64_t hi);

// `seq` one sequence (k [kv_heads, n, head_dim] or [1, kv_heads, n, head_dim]), or a list of
// them (k [len(seqs), kv_heads, n, head_dim]): n positions for each, to all of them or none.
void append(KVCache& cache, const py::object& layer_obj, const py::object& seq_obj, const py::object& k_obj,
            const py::object& v_obj) {
  const int64_t layer = layer_arg(layer_obj);
  const bool batch = py::isinstance<py::sequence>(seq_obj) && !py::isinstance<py::str>(seq_obj);
  const std::vector<int64_t> seqs = batch ? int_list(seq_obj, "seqs", 0, INT64_MAX) : std::vector<int64_t>{};
  const int64_t seq = batch ? 0 : seq_arg(seq_obj);
  const FloatArray k = float32_rows(k_obj, "k"), v = float32_rows(v_obj, "v");
  const ConstView<float> kv = rows_view(k, "k"), vv = rows_view(v, "v");  // k's error first: the order the caller wrote
  if (batch)
    cache.append(layer, seqs, kv, vv);
  else
    cache.append(layer, seq, kv, vv);
}

py::tuple gather(const KVCache& cache, const py::object& layer_obj, const py::object& seq_obj) {
  const int64_t layer = layer_arg(layer_obj), seq = seq_arg(seq_obj);
  const KVCacheConfig& c = cache.config();
  const int64_t len = cache.length(seq, layer, "gather");
  py::array_t<float> k({c.kv_heads, len, c.head_dim}), v({c.kv_heads, len, c.value_dim});
  cache.gather(layer, seq, TensorView<float>(k.mutable_data(), {1, c.kv_heads, len, c.head_dim}),
               TensorView<float>(v.mutable_data(), {1, c.kv_heads, len, c.value_dim}));
  return py::make_tuple(k, v);
}

std::vector<int64_t> int_list(const py::object& xs, const char* name, int64_t lo, int64_t hi) {
  if (!py::isinstance<py::sequence>(xs) || py::isinstance<py::str>(xs))
    throw py::type_error(fmt::format("{}: expected a sequence of integers, got {}", name,
                                     py::str(py::type::of(xs)).cast<std::string>()));
  std::vector<int64_t> out;
  for (const py::handle x : xs) out.push_back(int_arg(x, name, lo, hi));
  return out;
}

py::object attention(const KVCache& cache, const py::object& layer_obj, const py::object& seqs_obj,
                     const py::object& q_obj, const py::object& query_lengths_obj, const py::object& causal,
                     const py::object& scale, const py::object& window_obj,
                     std::optional<double> softcap, std::optional<std::vector<float>> alibi_slopes,
                     std::optional<std::vector<float>> sinks, const py::object& threads_obj,
                     bool return_lse) {
  const int64_t layer = layer_arg(layer_obj);
  const std::vector<int64_t> seqs = int_list(seqs_obj, "seqs", 0, INT64_MAX);
  const bool packed = !query_lengths_obj.is_none();
  const std::vector<int64_t> lengths =
      packed ? int_list(query_lengths_obj, "query_lengths", 0, int64_t{1} << 40) : std::vector<int64_t>{};
  std::optional<std::pair<int64_t, int64_t>> window_size;
  if (!window_obj.is_none()) {
    const std::vector<int64_t> w = int_list(window_obj, "window_size", -1, int64_t{1} << 53);
    if (w.size() != 2) throw Error(fmt::format("window_size: {} values, expected 2 (left, right)", w.size()));
    window_size = std::pair{w[0], w[1]};
  }
  const int threads = static_cast<int>(int_arg(threads_obj, "threads", 0, kMaxThreads));
  const FloatArray q = float32_rows(q_obj, "q");
  const KVCacheConfig& c = cache.config();
  AttentionOptions<float> o;
  o.causal = causal_arg(causal);
  o.scale = scale_arg(scale);
  if (window_size) o.window = {window_size->first, window_size->second};
  o.softcap = softcap;
  if (alibi_slopes) o.alibi_slopes = *alibi_slopes;
  if (sinks) o.sinks = *sinks;
  ConstView<float> qv;
  if (packed) {  // [Hq, Σ query_lengths, d]
    if (q.ndim() != 3)
      throw Error("q: with query_lengths, [Hq, total rows, head_dim], not " + std::to_string(q.ndim()) + " dimensions");
    qv = {q.data(), {1, q.shape(0), q.shape(1), q.shape(2)}};
  } else {  // [n_seq, Hq, Nq, d]
    if (q.ndim() != 4) throw Error("q: [n_seq, Hq, Nq, head_dim], not " + std::to_string(q.ndim()) + " dimensions");
    qv = {q.data(), {q.shape(0), q.shape(1), q.shape(2), q.shape(3)}};
  }
  const Shape os{qv.batch(), qv.heads(), qv.seq(), c.value_dim}, ls{qv.batch(), qv.heads(), qv.seq(), 1};
  std::vector<py::ssize_t> oshape(os.begin() + (packed ? 1 : 0), os.end()),
      lshape(ls.begin() + (packed ? 1 : 0), ls.end() - 1);
  py::array_t<float> out(oshape), lse(lshape);
  const TensorView<float> ov(out.mutable_data(), os), lv(lse.mutable_data(), ls);
  ComputeConfig config;
  config.threads = threads;
  kv_cache_attention(cache, layer, seqs, qv, o, {ov, lv}, lengths, config);
  if (return_lse) return result_class("ForwardResult")(std::move(out), std::move(lse));
  return std::move(out);
}

py::dict memory(const KVCache& cache) {
  const KVCacheMemory m = cache.memory();
  return py::dict("pool_bytes"_a = m.pool_bytes, "block_bytes"_a = m.block_bytes, "total_blocks"_a = m.total_blocks,
                  "used_blocks"_a = m.used_blocks, "shared_blocks"_a = m.shared_blocks, "sequences"_a = m.sequences,
                  "bytes_per_token"_a = m.bytes_per_token);
}

}  // namespace

void bind_kv_cache(py::module_& m) {
  namespace sig = signatures::KVCache;
  py::class_<KVCache> cls(m, "KVCache", sig::doc);
  def_init(cls, sig::init(), py::init(&make_cache));
  def(cls, sig::add_sequence(), &KVCache::add_sequence);
  def(cls, sig::fork(), [](KVCache& c, const py::object& seq, const py::object& tokens) {
    return c.fork(seq_arg(seq), int_arg(tokens, "tokens", 0, kTokens));
  });
  def(cls, sig::free(), [](KVCache& c, const py::object& seq) { c.free(seq_arg(seq)); });
  def(cls, sig::length(), [](const KVCache& c, const py::object& seq, const py::object& layer) {
    return c.length(seq_arg(seq), layer_arg(layer));
  });
  def(cls, sig::append(), &append);
  def(cls, sig::gather(), &gather);
  def(cls, sig::attention(), &attention);
  def(cls, sig::memory(), &memory);
  cls.def_property_readonly("sequences", &KVCache::sequences)
      .def_property_readonly("layers", [](const KVCache& c) { return c.config().layers; })
      .def_property_readonly("kv_heads", [](const KVCache& c) { return c.config().kv_heads; })
      .def_property_readonly("head_dim", [](const KVCache& c) { return c.config().head_dim; })
      .def_property_readonly("value_dim", [](const KVCache& c) { return c.config().value_dim; })
      .def_property_readonly("block_tokens", [](const KVCache& c) { return c.config().block_tokens; })
      .def_property_readonly("key_type", [](const KVCache& c) { return std::string(to_string(c.config().key_type)); })
      .def_property_readonly("value_type",
                             [](const KVCache& c) { return std::string(to_string(c.config().value_type)); })
      .def_property_readonly("key_rotation",
                             [](const KVCache& c) { return std::string(to_string(c.config().key_rotation)); })
      .def_property_readonly("value_rotation",
                             [](const KVCache& c) { return std::string(to_string(c.config().value_rotation)); })
      .def_property_readonly("center_keys", [](const KVCache& c) { return c.config().center_keys; });
}

}  // namespace attnlab::python
