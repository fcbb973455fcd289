// torch.classes.attnlab.KVCache and the operators over it: the library's paged, quantized KV
// cache (attnlab/kv_cache.hpp) as a TorchScript custom class, so that a scripted or traced
// decoding loop holds it and its appends are recorded (the tracer keeps the object as a
// constant of the graph, the conservative alias analysis keeps every call, in order), and
// torch.jit.save / torch.jit.load of a module holding it keep its contents (def_pickle).
//
//   kv_cache_append(cache, layer, seqs, k, v)        appends n positions to each of seqs
//                                                    (k [len(seqs), kv_heads, n, head_dim]),
//                                                    all of them or none
//   kv_cache_lengths(cache, layer, seqs) -> int64[len(seqs)]
//   kv_cache_attention(cache, layer, seqs, q, ...) -> (out, lse), float32
//
// Rows go in as float32 (other float dtypes are converted), and a tensor that requires grad
// under grad mode is refused: the cache is for inference and computes no gradient. A mutex
// per cache keeps two threads from changing it at once (torch.ops calls run without the GIL).
#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attnlab/kv_cache.hpp"
#include "views.hpp"

namespace attnlab::torch_ops {
namespace {

const char* const kNoGrad =
    "the KV cache is for inference and computes no gradients; run it under torch.no_grad() (or "
    "torch.inference_mode()), or train the block without a cache (block(x))";

struct TorchKVCache : torch::CustomClassHolder {
  explicit TorchKVCache(const KVCacheConfig& config) : cache(config) {}
  KVCache cache;
  std::mutex mutex;
  int64_t next_id = 0;  // the id the next add_sequence or fork returns (ids are never reused)
};
using Handle = c10::intrusive_ptr<TorchKVCache>;

// A float CPU tensor as float32 rows the cache reads (a copy only when the dtype or layout
// needs one), as the 4-D view [a, b, c, d] of a 3-D [b, c, d] or 4-D tensor.
at::Tensor float_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK_VALUE(x.device().is_cpu() && x.layout() == at::kStrided, name, ": a dense CPU tensor is needed");
  TORCH_CHECK_TYPE(x.is_floating_point(), name, ": dtype ", x.scalar_type(),
                   " is not supported (use float32, float64, float16 or bfloat16)");
  TORCH_CHECK(!(x.requires_grad() && at::GradMode::is_enabled()), name, ": requires grad, but ", kNoGrad);
  TORCH_CHECK_VALUE(x.dim() == 3 || x.dim() == 4, name, ": ", x.dim(), " dimensions, not 3 or 4");
  return x.detach().to(at::kFloat).contiguous();
}

void append(const Handle& self, int64_t layer, std::vector<int64_t> seqs, const at::Tensor& k, const at::Tensor& v) {
  const at::Tensor kr = float_rows(k, "k"), vr = float_rows(v, "v");
  std::lock_guard<std::mutex> lock(self->mutex);
  translate_errors([&] { self->cache.append(layer, seqs, view4<float>(kr, "k"), view4<float>(vr, "v")); });
}

at::Tensor lengths(const Handle& self, int64_t layer, std::vector<int64_t> seqs) {
  std::lock_guard<std::mutex> lock(self->mutex);
  at::Tensor out = at::empty({static_cast<int64_t>(seqs.size())}, at::kLong);
  translate_errors([&] {
    for (size_t i = 0; i < seqs.size(); ++i) out.data_ptr<int64_t>()[i] = self->cache.length(seqs[i], layer);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> attention(const Handle& self, int64_t layer, std::vector<int64_t> seqs,
                                             const at::Tensor& q, c10::optional<std::vector<int64_t>> query_lengths,
                                             c10::string_view causal, c10::string_view scale,
                                             c10::optional<std::vector<int64_t>> window_size,
                                             c10::optional<double> softcap,
                                             const c10::optional<at::Tensor>& alibi_slopes,
                                             const c10::optional<at::Tensor>& sinks, int64_t threads) {
  const at::Tensor qr = float_rows(q, "q");
  const bool packed = query_lengths.has_value();
  TORCH_CHECK_VALUE(qr.dim() == (packed ? 3 : 4), "q: ",
                    packed ? "with query_lengths, [Hq, total rows, head_dim]" : "[n_seq, Hq, Nq, head_dim]", ", not ",
                    qr.dim(), " dimensions");
  TORCH_CHECK_VALUE(threads >= 0 && threads <= kMaxThreads, "threads: ", threads, " is not in [0, ", kMaxThreads, "]");
  std::lock_guard<std::mutex> lock(self->mutex);
  return translate_errors([&] {
    AttentionOptions<float> o;
    o.causal = parse_causal(std::string(causal).c_str());
    o.scale = ScalePolicy::parse(std::string(scale));
    if (window_size) {
      TORCH_CHECK_VALUE(window_size->size() == 2, "window_size: expected (left, right), two ints");
      o.window = {(*window_size)[0], (*window_size)[1]};
    }
    if (softcap) o.softcap = *softcap;
    const std::vector<float> slopes = float_values<float>(alibi_slopes), sink_logits = float_values<float>(sinks);
    o.alibi_slopes = slopes;
    o.sinks = sink_logits;
    const ConstView<float> qv = view4<float>(qr, "q");
    const int64_t value_dim = self->cache.config().value_dim;
    at::Tensor out = at::empty({qv.batch(), qv.heads(), qv.seq(), value_dim}, at::kFloat);
    at::Tensor lse = at::empty({qv.batch(), qv.heads(), qv.seq()}, at::kFloat);
    const TensorView<float> ov(out.data_ptr<float>(), {qv.batch(), qv.heads(), qv.seq(), value_dim});
    const TensorView<float> lv(lse.data_ptr<float>(), {qv.batch(), qv.heads(), qv.seq(), 1});
    ComputeConfig config;
    config.threads = static_cast<int>(threads);
    kv_cache_attention(self->cache, layer, seqs, qv, o, {ov, lv}, query_lengths.value_or(std::vector<int64_t>{}),
                       config);
    if (packed) return std::make_tuple(out.squeeze(0), lse.squeeze(0));
    return std::make_tuple(out, lse);
  });
}

Handle make_cache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_tokens, const std::string& key_type,
                  const std::string& value_type, c10::optional<int64_t> value_dim, int64_t block_tokens,
                  const std::vector<double>& key_scales, const std::vector<double>& value_scales,
                  const std::string& key_rotation, const std::string& value_rotation, bool center_keys) {
  return translate_errors([&] {
    KVCacheConfig c;
    c.layers = layers, c.kv_heads = kv_heads, c.head_dim = head_dim, c.max_tokens = max_tokens;
    c.value_dim = value_dim.value_or(0), c.block_tokens = block_tokens;
    c.key_type = parse_cache_type(key_type), c.value_type = parse_cache_type(value_type);
    c.key_scales.assign(key_scales.begin(), key_scales.end());
    c.value_scales.assign(value_scales.begin(), value_scales.end());
    c.key_rotation = parse_cache_rotation(key_rotation), c.value_rotation = parse_cache_rotation(value_rotation);
    c.center_keys = center_keys;
    return c10::make_intrusive<TorchKVCache>(c);
  });
}

// f(cache) with the cache's lock held and its errors as ValueError.
template <class F>
auto locked(const Handle& self, F&& f) {
  std::lock_guard<std::mutex> lock(self->mutex);
  return translate_errors([&] { return f(self->cache); });
}

// A new sequence's id (add_sequence, fork), remembered so that a saved cache hands out the same
// ids after loading.
int64_t new_id(TorchKVCache& self, int64_t id) {
  self.next_id = id + 1;
  return id;
}

// What torch.jit.save, copy.deepcopy and pickle write of a cache: its configuration, the next
// sequence id, the live sequences and each one's positions per layer, dequantized to float32.
// Loading appends them to a new cache, which quantizes them again (exact for float32,
// bfloat16, float16 and fp8_e4m3; int8 and int4 recompute their scales from the dequantized
// rows: the same codes, scales equal up to rounding); a fork's shared blocks load as copies.
// Three items (a longer tuple makes GCC warn inside LibTorch's IValue):
//   sizes    layers, kv_heads, head_dim, max_tokens, value_dim, block_tokens, next_id, then
//            the live sequences' ids in increasing order
//   types    key_type, value_type, key_rotation, value_rotation, and "center_keys" or "" (a
//            save without the last three is a cache without them; a centred cache's loaded
//            sequences take their means from all their saved rows)
//   tensors  key_scales, value_scales (float64), then for each live sequence and each layer
//            k [kv_heads, length, head_dim] and v [kv_heads, length, value_dim], float32
using SavedCache = std::tuple<std::vector<int64_t>, std::vector<std::string>, std::vector<at::Tensor>>;
constexpr size_t kSavedSizes = 7;

at::Tensor doubles(const std::vector<float>& x) {
  return at::tensor(std::vector<double>(x.begin(), x.end()), at::kDouble);
}

SavedCache save_cache(const Handle& self) {
  std::lock_guard<std::mutex> lock(self->mutex);
  return translate_errors([&] {
    const KVCache& c = self->cache;
    const KVCacheConfig& cf = c.config();
    std::vector<int64_t> sizes{cf.layers,    cf.kv_heads,     cf.head_dim,   cf.max_tokens,
                               cf.value_dim, cf.block_tokens, self->next_id};
    std::vector<at::Tensor> tensors{doubles(cf.key_scales), doubles(cf.value_scales)};
    for (const int64_t seq : c.sequences()) {
      sizes.push_back(seq);
      for (int64_t layer = 0; layer < cf.layers; ++layer) {
        const int64_t len = c.length(seq, layer);
        at::Tensor k = at::empty({cf.kv_heads, len, cf.head_dim}, at::kFloat);
        at::Tensor v = at::empty({cf.kv_heads, len, cf.value_dim}, at::kFloat);
        if (len > 0)
          c.gather(layer, seq, TensorView<float>(k.data_ptr<float>(), {1, cf.kv_heads, len, cf.head_dim}),
                   TensorView<float>(v.data_ptr<float>(), {1, cf.kv_heads, len, cf.value_dim}));
        tensors.push_back(k);
        tensors.push_back(v);
      }
    }
    return SavedCache{sizes,
                      {to_string(cf.key_type), to_string(cf.value_type), to_string(cf.key_rotation),
                       to_string(cf.value_rotation), cf.center_keys ? "center_keys" : ""},
                      tensors};
  });
}

Handle load_cache(const SavedCache& saved) {
  const auto& [sizes, types, tensors] = saved;
  const char* const not_a_cache = "KVCache: the saved state is not a cache's: ";
  TORCH_CHECK_VALUE(sizes.size() >= kSavedSizes && (types.size() == 2 || types.size() == 5) && tensors.size() >= 2,
                    not_a_cache,
                    sizes.size(), " sizes, ", types.size(), " types, ", tensors.size(), " tensors");
  const int64_t layers = sizes[0], next_id = sizes[6];
  const std::vector<int64_t> seqs(sizes.begin() + kSavedSizes, sizes.end());
  TORCH_CHECK_VALUE(layers > 0 && tensors.size() == 2 + seqs.size() * 2 * static_cast<size_t>(layers), not_a_cache,
                    tensors.size(), " tensors for ", seqs.size(), " sequences of ", layers, " layers");
  for (size_t i = 0; i < seqs.size(); ++i)
    TORCH_CHECK_VALUE(seqs[i] >= 0 && seqs[i] < next_id && (i == 0 || seqs[i - 1] < seqs[i]), not_a_cache,
                      "the sequence ids are not increasing ids below ", next_id);
  const bool transforms = types.size() == 5;
  TORCH_CHECK_VALUE(!transforms || types[4].empty() || types[4] == "center_keys", not_a_cache, "'", types[4],
                    "' where center_keys or nothing belongs");
  Handle self = make_cache(layers, sizes[1], sizes[2], sizes[3], types[0], types[1], sizes[4], sizes[5],
                           float_values<double>(tensors[0]), float_values<double>(tensors[1]),
                           transforms ? types[2] : "none", transforms ? types[3] : "none",
                           transforms && types[4] == "center_keys");
  translate_errors([&] {
    KVCache& c = self->cache;
    // The same ids: every id below next_id is created, and those no longer live are freed.
    for (int64_t id = 0; id < next_id; ++id) c.add_sequence();
    self->next_id = next_id;
    size_t live = 0, at = 2;
    for (int64_t id = 0; id < next_id; ++id) {
      if (live == seqs.size() || seqs[live] != id) {
        c.free(id);
        continue;
      }
      for (int64_t layer = 0; layer < layers; ++layer, at += 2)
        if (tensors[at].dim() != 3 || tensors[at].size(1) > 0)
          c.append(layer, id, view4<float>(float_rows(tensors[at], "k"), "k"),
                   view4<float>(float_rows(tensors[at + 1], "v"), "v"));
      ++live;
    }
  });
  return self;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnlab, m) {
  m.class_<TorchKVCache>("KVCache")
      .def(torch::init([](int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_tokens,
                          const std::string& key_type, const std::string& value_type,
                          c10::optional<int64_t> value_dim, int64_t block_tokens, std::vector<double> key_scales,
                          std::vector<double> value_scales, const std::string& key_rotation,
                          const std::string& value_rotation, bool center_keys) {
             return make_cache(layers, kv_heads, head_dim, max_tokens, key_type, value_type, value_dim, block_tokens,
                               key_scales, value_scales, key_rotation, value_rotation, center_keys);
           }),
           "KVCache(layers, kv_heads, head_dim, max_tokens, key_type, value_type, value_dim, block_tokens, "
           "key_scales, value_scales, key_rotation, value_rotation, center_keys): attnlab.KVCache's configuration",
           {torch::arg("layers"), torch::arg("kv_heads"), torch::arg("head_dim"), torch::arg("max_tokens"),
            torch::arg("key_type") = "float32", torch::arg("value_type") = "float32",
            torch::arg("value_dim") = c10::IValue(), torch::arg("block_tokens") = int64_t{128},
            torch::arg("key_scales") = std::vector<double>{}, torch::arg("value_scales") = std::vector<double>{},
            torch::arg("key_rotation") = "none", torch::arg("value_rotation") = "none",
            torch::arg("center_keys") = false})
      .def("add_sequence",
           [](const Handle& self) { return locked(self, [&](KVCache& c) { return new_id(*self, c.add_sequence()); }); })
      .def("fork", [](const Handle& self, int64_t seq, int64_t tokens) {
             return locked(self, [&](KVCache& c) { return new_id(*self, c.fork(seq, tokens)); });
           })
      .def("free", [](const Handle& self, int64_t seq) { locked(self, [&](KVCache& c) { c.free(seq); }); })
      .def("length", [](const Handle& self, int64_t seq, int64_t layer) {
             return locked(self, [&](KVCache& c) { return c.length(seq, layer); });
           }, "",
           {torch::arg("seq"), torch::arg("layer") = int64_t{0}})
      .def("sequences", [](const Handle& self) { return locked(self, [](KVCache& c) { return c.sequences(); }); })
      .def("memory", [](const Handle& self) {
        return locked(self, [](KVCache& c) {
             const KVCacheMemory mem = c.memory();
             c10::Dict<std::string, int64_t> d;
             d.insert("pool_bytes", mem.pool_bytes);
             d.insert("block_bytes", mem.block_bytes);
             d.insert("total_blocks", mem.total_blocks);
             d.insert("used_blocks", mem.used_blocks);
             d.insert("shared_blocks", mem.shared_blocks);
             d.insert("sequences", mem.sequences);
             d.insert("bytes_per_token", mem.bytes_per_token);
             return d;
           });
      })
      .def("gather", [](const Handle& self, int64_t layer, int64_t seq) {
        return locked(self, [&](KVCache& c) {
             const KVCacheConfig& cf = c.config();
             const int64_t len = c.length(seq, layer);
             at::Tensor k = at::empty({cf.kv_heads, len, cf.head_dim}, at::kFloat);
             at::Tensor v = at::empty({cf.kv_heads, len, cf.value_dim}, at::kFloat);
             c.gather(layer, seq, TensorView<float>(k.data_ptr<float>(), {1, cf.kv_heads, len, cf.head_dim}),
                      TensorView<float>(v.data_ptr<float>(), {1, cf.kv_heads, len, cf.value_dim}));
             return std::make_tuple(k, v);
           });
      })
      .def_pickle([](const Handle& self) { return save_cache(self); },
                  [](SavedCache saved) { return load_cache(saved); });
  const auto conservative = c10::AliasAnalysisKind::CONSERVATIVE;
  m.def(torch::schema("kv_cache_append(__torch__.torch.classes.attnlab.KVCache cache, int layer, int[] seqs, "
                      "Tensor k, Tensor v) -> ()",
                      conservative),
        &append);
  m.def(torch::schema("kv_cache_lengths(__torch__.torch.classes.attnlab.KVCache cache, int layer, int[] seqs) "
                      "-> Tensor",
                      conservative),
        &lengths);
  m.def(torch::schema("kv_cache_attention(__torch__.torch.classes.attnlab.KVCache cache, int layer, int[] seqs, "
                      "Tensor q, int[]? query_lengths, str causal, str scale, int[]? window_size, float? softcap, "
                      "Tensor? alibi_slopes, Tensor? sinks, int threads) -> (Tensor, Tensor)",
                      conservative),
        &attention);
}

}  // namespace attnlab::torch_ops
