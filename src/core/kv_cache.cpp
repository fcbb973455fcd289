// The KV cache's pool, block tables and codecs' bookkeeping (attnlab/kv_cache.hpp).
#include "attnlab/kv_cache.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <new>
#include <optional>

#include <sys/mman.h>

#include "core/kv_cache_access.hpp"
#include "core/kv_quantize.hpp"
#include "core/kv_rotation.hpp"

namespace attnlab {

namespace {

constexpr const char* kTypeNames[] = {"float32", "bfloat16", "float16", "int8", "int4", "fp8_e4m3"};

std::vector<float> head_scales(const std::vector<float>& given, int64_t heads, CacheType type, const char* name) {
  if (type != CacheType::fp8_e4m3) {
    if (!given.empty()) throw Error(fmt::format("kv_cache: {} are for fp8_e4m3 only, not {}", name, to_string(type)));
    return std::vector<float>(static_cast<size_t>(heads), 1.0f);
  }
  if (given.empty()) return std::vector<float>(static_cast<size_t>(heads), 1.0f);
  if (given.size() != 1 && static_cast<int64_t>(given.size()) != heads)
    throw Error(fmt::format("kv_cache: {} has {} values, not 1 or kv_heads = {}", name, given.size(), heads));
  for (float s : given)
    if (!(s > 0.0f) || !std::isfinite(s))
      throw Error(fmt::format("kv_cache: {} holds {}, not a positive finite scale", name, s));
  return given.size() == 1 ? std::vector<float>(static_cast<size_t>(heads), given[0]) : given;
}

// Every size of the pool is a product of the configuration's values, each within its own
// range yet able to wrap int64 together (65536^4 wraps to 0, then divided by). One rule for
// all of them: the product in checked arithmetic, below what any machine can address, or an
// Error naming the factors, the product's size and the limit.
constexpr int64_t kMaxCacheBytes = int64_t{1} << 47;  // 128 TiB: x86-64's and AArch64's user address space

struct SizeFactor {
  const char* name;
  int64_t value;
};

int64_t checked_bytes(std::initializer_list<SizeFactor> factors, const char* what) {
  int64_t product = 1;
  double approx = 1;  // for the message, where the exact product wrapped
  bool wrapped = false;
  for (const SizeFactor& f : factors) {
    approx *= static_cast<double>(f.value);
    wrapped = wrapped || __builtin_mul_overflow(product, f.value, &product);
  }
  if (!wrapped && product <= kMaxCacheBytes) return product;
  std::string named;
  for (const SizeFactor& f : factors) named += fmt::format("{}{} {}", named.empty() ? "" : " × ", f.name, f.value);
  throw Error(fmt::format("kv_cache: {} = {} = {:.3g} bytes, beyond the limit of {} bytes (2^47, the memory a "
                          "process can address); lower these values",
                          what, named, approx, kMaxCacheBytes));
}

}  // namespace

const char* to_string(CacheType type) { return kTypeNames[static_cast<int>(type)]; }

const char* to_string(CacheRotation rotation) { return rotation == CacheRotation::hadamard ? "hadamard" : "none"; }

CacheRotation parse_cache_rotation(const std::string& text) {
  for (CacheRotation r : {CacheRotation::none, CacheRotation::hadamard})
    if (text == to_string(r)) return r;
  throw Error("kv_cache: unknown rotation '" + text + "' (none, hadamard)");
}

CacheType parse_cache_type(const std::string& text) {
  for (int t = 0; t < 6; ++t)
    if (text == kTypeNames[t]) return static_cast<CacheType>(t);
  throw Error("kv_cache: unknown element type '" + text + "' (float32, bfloat16, float16, int8, int4, fp8_e4m3)");
}

struct KVCache::State {
  KVCacheConfig config;
  std::vector<float> key_scales, value_scales;  // per K/V head
  std::optional<detail::Rotation> key_rotation, value_rotation;  // KVCacheConfig's, when not none
  int64_t key_row = 0, value_row = 0;           // bytes of one head's row
  int64_t layer_block_bytes = 0;                // K then V of one layer in one block
  int64_t total_blocks = 0;
  // Laid out as layer_view says; left uninitialised, so that the system commits a block's
  // pages when a sequence first writes it, not at creation.
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], Free> pool;
  std::vector<int32_t> refcount;   // per block
  std::vector<int32_t> free_list;  // handed out from the back: lowest ids first
  struct Sequence {
    std::vector<int32_t> blocks;
    std::vector<int64_t> length;  // per layer
    // center_keys: per layer, the mean μ [kv_heads × head_dim] (in the stored, rotated basis)
    // that the layer's keys are stored minus; empty until the layer's first rows.
    std::vector<std::vector<float>> key_center;
  };
  std::map<int64_t, Sequence> seqs;
  int64_t next_id = 0;

  int64_t block_bytes() const { return config.layers * layer_block_bytes; }
  // Where layer `layer`'s rows are (CacheLayerView: the layout's one encoding).
  detail::CacheLayerView layer_view(int64_t layer) const {
    detail::CacheLayerView v;
    v.pool = pool.get();
    v.block_stride = block_bytes();
    v.layer_offset = layer * layer_block_bytes;
    v.value_offset = config.kv_heads * config.block_tokens * key_row;
    v.key_row = key_row, v.value_row = value_row;
    v.block_tokens = config.block_tokens, v.kv_heads = config.kv_heads;
    v.head_dim = config.head_dim, v.value_dim = config.value_dim;
    v.key_type = config.key_type, v.value_type = config.value_type;
    v.key_scales = key_scales.data(), v.value_scales = value_scales.data();
    return v;
  }
  // A place in the pool that a view points to, to write.
  std::byte* writable(const std::byte* at) { return pool.get() + (at - pool.get()); }

  Sequence& find(int64_t seq, const char* what) {
    const auto it = seqs.find(seq);
    if (it == seqs.end())
      throw Error(fmt::format("kv_cache {}: unknown sequence {} ({} live)", what, seq, seqs.size()));
    return it->second;
  }
  void check_layer(int64_t layer, const char* what) const {
    if (layer < 0 || layer >= config.layers)
      throw Error(fmt::format("kv_cache {}: layer {} is not in [0, {})", what, layer, config.layers));
  }
  void release(int32_t block) {
    if (--refcount[static_cast<size_t>(block)] == 0) free_list.push_back(block);
  }
  int32_t take() {
    const int32_t b = free_list.back();
    free_list.pop_back();
    refcount[static_cast<size_t>(b)] = 1;
    return b;
  }
};

KVCache::KVCache(const KVCacheConfig& config) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = config;
  KVCacheConfig& c = s.config;
  if (c.value_dim == 0) c.value_dim = c.head_dim;
  auto positive = [](int64_t x, const char* name, int64_t max) {
    if (x < 1 || x > max) throw Error(fmt::format("kv_cache: {} = {} is not in [1, {}]", name, x, max));
  };
  positive(c.layers, "layers", 1 << 16);
  positive(c.kv_heads, "kv_heads", 1 << 16);
  positive(c.head_dim, "head_dim", 1 << 16);
  positive(c.value_dim, "value_dim", 1 << 16);
  positive(c.block_tokens, "block_tokens", 1 << 16);
  positive(c.max_tokens, "max_tokens", int64_t{1} << 40);
  s.key_scales = head_scales(c.key_scales, c.kv_heads, c.key_type, "key_scales");
  s.value_scales = head_scales(c.value_scales, c.kv_heads, c.value_type, "value_scales");
  for (CacheRotation r : {c.key_rotation, c.value_rotation})
    if (r != CacheRotation::none && r != CacheRotation::hadamard)
      throw Error(fmt::format("kv_cache: rotation {} is not none or hadamard", static_cast<int>(r)));
  if (c.key_rotation == CacheRotation::hadamard) s.key_rotation.emplace(c.head_dim);
  if (c.value_rotation == CacheRotation::hadamard) s.value_rotation.emplace(c.value_dim);
  s.key_row = detail::row_bytes(c.key_type, c.head_dim);
  s.value_row = detail::row_bytes(c.value_type, c.value_dim);
  const int64_t token_bytes = s.key_row + s.value_row;  // each below 2^19: no product yet
  s.layer_block_bytes = checked_bytes({{"kv_heads", c.kv_heads}, {"block_tokens", c.block_tokens},
                                       {"bytes of a K and a V row", token_bytes}},
                                      "one layer of a block");
  checked_bytes({{"layers", c.layers}, {"kv_heads", c.kv_heads}, {"block_tokens", c.block_tokens},
                 {"bytes of a K and a V row", token_bytes}},
                "one block (all layers)");
  s.total_blocks = (c.max_tokens + c.block_tokens - 1) / c.block_tokens;
  if (s.total_blocks > INT32_MAX)
    throw Error(fmt::format("kv_cache: max_tokens {} makes {} blocks of {} positions, beyond the limit of {} blocks",
                            c.max_tokens, s.total_blocks, c.block_tokens, INT32_MAX));
  checked_bytes({{"blocks", s.total_blocks}, {"layers", c.layers}, {"kv_heads", c.kv_heads},
                 {"block_tokens", c.block_tokens}, {"bytes of a K and a V row", token_bytes}},
                "the pool");
  // On 2 MiB boundaries, in transparent huge pages where the system allows them (madvise):
  // a decoding step reads each head's few KiB of every block, a page walk each on 4 KiB pages.
  constexpr int64_t kHugePage = int64_t{1} << 21;
  const int64_t bytes = s.total_blocks * s.block_bytes();
  const int64_t rounded = bytes >= kHugePage ? (bytes + kHugePage - 1) / kHugePage * kHugePage : 0;
  s.pool.reset(static_cast<std::byte*>(rounded != 0 ? std::aligned_alloc(static_cast<size_t>(kHugePage),
                                                                         static_cast<size_t>(rounded))
                                                     : std::malloc(static_cast<size_t>(bytes))));
#ifdef MADV_HUGEPAGE
  if (s.pool && rounded != 0) madvise(s.pool.get(), static_cast<size_t>(rounded), MADV_HUGEPAGE);  // a hint only
#endif
  if (!s.pool) {
    throw OutOfMemory(fmt::format("kv_cache: cannot allocate the pool of {} bytes ({} blocks of {} positions)",
                                  s.total_blocks * s.block_bytes(), s.total_blocks, c.block_tokens));
  }
  s.refcount.assign(static_cast<size_t>(s.total_blocks), 0);
  for (int64_t b = s.total_blocks - 1; b >= 0; --b) s.free_list.push_back(static_cast<int32_t>(b));
}

KVCache::~KVCache() = default;
KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;

const KVCacheConfig& KVCache::config() const { return state_->config; }

int64_t KVCache::add_sequence() {
  State& s = *state_;
  State::Sequence& sq = s.seqs[s.next_id];
  sq.length.assign(static_cast<size_t>(s.config.layers), 0);
  sq.key_center.assign(static_cast<size_t>(s.config.layers), {});
  return s.next_id++;
}

int64_t KVCache::fork(int64_t seq, int64_t tokens) {
  State& s = *state_;
  const State::Sequence& src = s.find(seq, "fork");
  if (tokens < 0) throw Error(fmt::format("kv_cache fork: tokens = {} is negative", tokens));
  // Every layer must hold the shared positions: a fork's block table serves all layers.
  const auto shortest = std::min_element(src.length.begin(), src.length.end());
  if (tokens > *shortest)
    throw Error(fmt::format("kv_cache fork: {} positions of sequence {}, but its layer {} holds only {} (layers hold "
                            "{}); append the positions to every layer before forking",
                            tokens, seq, shortest - src.length.begin(), *shortest, fmt::join(src.length, ", ")));
  const int64_t blocks = (tokens + s.config.block_tokens - 1) / s.config.block_tokens;
  State::Sequence copy;
  copy.blocks.assign(src.blocks.begin(), src.blocks.begin() + blocks);
  copy.length.assign(static_cast<size_t>(s.config.layers), tokens);
  // The shared rows were stored minus the source's means; an empty fork takes its own.
  copy.key_center = tokens > 0 ? src.key_center : std::vector<std::vector<float>>(static_cast<size_t>(s.config.layers));
  for (int32_t b : copy.blocks) ++s.refcount[static_cast<size_t>(b)];
  s.seqs[s.next_id] = std::move(copy);
  return s.next_id++;
}

void KVCache::free(int64_t seq) {
  State& s = *state_;
  for (int32_t b : s.find(seq, "free").blocks) s.release(b);
  s.seqs.erase(seq);
}

std::vector<int64_t> KVCache::sequences() const {
  std::vector<int64_t> ids;
  for (const auto& [id, seq] : state_->seqs) ids.push_back(id);
  return ids;
}

int64_t KVCache::length(int64_t seq, int64_t layer, const char* operation) const {
  state_->check_layer(layer, operation);
  return state_->find(seq, operation).length[static_cast<size_t>(layer)];
}

void KVCache::append(int64_t layer, int64_t seq, ConstView<float> k, ConstView<float> v) {
  append(layer, std::span<const int64_t>(&seq, 1), k, v);
}

void KVCache::append(int64_t layer, std::span<const int64_t> seqs, ConstView<float> k, ConstView<float> v) {
  State& s = *state_;
  const KVCacheConfig& c = s.config;
  s.check_layer(layer, "append");
  const auto count = static_cast<int64_t>(seqs.size());
  std::vector<State::Sequence*> rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (std::find(seqs.begin(), seqs.begin() + static_cast<std::ptrdiff_t>(i), seqs[i]) !=
        seqs.begin() + static_cast<std::ptrdiff_t>(i))
      throw Error(fmt::format("kv_cache append: sequence {} is listed twice; a batch appends to each sequence once",
                              seqs[i]));
    rows.push_back(&s.find(seqs[i], "append"));
  }
  const int64_t n = k.seq();
  const Shape kwant{count, c.kv_heads, n, c.head_dim}, vwant{count, c.kv_heads, n, c.value_dim};
  if (k.shape() != kwant || v.shape() != vwant || !k.present() || !v.present())
    throw Error(
        fmt::format("kv_cache append: k {} and v {} should be {} and {} ([sequences, kv_heads, n, head_dim], "
                    "[sequences, kv_heads, n, value_dim])",
                    to_string(k.shape()), to_string(v.shape()), to_string(kwant), to_string(vwant)));
  if (n == 0) return;  // nothing to write: no block taken, none copied (a fork's shared one stays shared)
  // Encode every sequence's rows first: a bad value leaves the cache as it was.
  const int64_t seq_bytes = checked_bytes(
      {{"kv_heads", c.kv_heads}, {"n", n}, {"bytes of a K and a V row", s.key_row + s.value_row}},
      "append's encoded rows");
  std::vector<std::byte> encoded(static_cast<size_t>(
      checked_bytes({{"sequences", count}, {"bytes of a sequence's rows", seq_bytes}}, "append's encoded rows")));
  // The rows as stored: rotated (key_rotation, value_rotation), keys minus their mean
  // (center_keys; a layer's first rows of a sequence fix it, committed with the rows).
  std::vector<std::vector<float>> centers(static_cast<size_t>(count));
  std::vector<float> buf(static_cast<size_t>(std::max(c.head_dim, c.value_dim)));
  auto stored_row = [&](int kind, const float* row, int64_t stride, const float* center) {
    const int64_t dim = kind == 0 ? c.head_dim : c.value_dim;
    for (int64_t j = 0; j < dim; ++j) buf[static_cast<size_t>(j)] = row[j * stride];
    if (const auto& r = kind == 0 ? s.key_rotation : s.value_rotation) r->rotate(buf.data());
    if (center != nullptr)
      for (int64_t j = 0; j < dim; ++j) buf[static_cast<size_t>(j)] -= center[j];
    return buf.data();
  };
  for (int64_t i = 0; i < count && c.center_keys; ++i) {
    const auto& have = rows[static_cast<size_t>(i)]->key_center[static_cast<size_t>(layer)];
    auto& mu = centers[static_cast<size_t>(i)];
    if (!have.empty()) {
      mu = have;
      continue;
    }
    mu.assign(static_cast<size_t>(c.kv_heads * c.head_dim), 0.0f);
    std::vector<double> sum(static_cast<size_t>(c.head_dim));
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t t = 0; t < n; ++t) {
        const float* x = stored_row(0, k.row(i, h, t), k.strides()[3], nullptr);
        for (int64_t j = 0; j < c.head_dim; ++j) sum[static_cast<size_t>(j)] += x[j];
      }
      for (int64_t j = 0; j < c.head_dim; ++j)
        mu[static_cast<size_t>(h * c.head_dim + j)] =
            static_cast<float>(sum[static_cast<size_t>(j)] / static_cast<double>(n));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = rows[static_cast<size_t>(i)]->length[static_cast<size_t>(layer)];
    for (int kind = 0; kind < 2; ++kind) {
      const ConstView<float>& x = kind == 0 ? k : v;
      const CacheType type = kind == 0 ? c.key_type : c.value_type;
      const int64_t rb = kind == 0 ? s.key_row : s.value_row, dim = kind == 0 ? c.head_dim : c.value_dim;
      const bool transformed = (kind == 0 ? s.key_rotation : s.value_rotation) || (kind == 0 && c.center_keys);
      std::byte* base = encoded.data() + i * seq_bytes + (kind == 0 ? 0 : c.kv_heads * n * s.key_row);
      for (int64_t h = 0; h < c.kv_heads; ++h)
        for (int64_t t = 0; t < n; ++t) {
          const float* row = x.row(i, h, t);
          for (int64_t j = 0; j < dim; ++j)
            if (!std::isfinite(row[j * x.strides()[3]]))
              throw Error(
                  fmt::format("kv_cache append: {}[head {}, token {}, channel {}] is {} (layer {}, sequence {}, "
                              "position {})",
                              kind == 0 ? "k" : "v", h, t, j, row[j * x.strides()[3]], layer, seqs[i], start + t));
          const float* center = kind == 0 && c.center_keys ? centers[static_cast<size_t>(i)].data() + h * dim : nullptr;
          const float* y = transformed ? stored_row(kind, row, x.strides()[3], center) : row;
          const int64_t y_stride = transformed ? 1 : x.strides()[3];
          for (int64_t j = 0; j < dim && transformed; ++j)
            if (!std::isfinite(y[j]))
              throw Error(fmt::format("kv_cache append: {}[head {}, token {}] overflows float once rotated or "
                                      "centred (channel {}; layer {}, sequence {}, position {})",
                                      kind == 0 ? "k" : "v", h, t, j, layer, seqs[i], start + t));
          const float scale = (kind == 0 ? s.key_scales : s.value_scales)[static_cast<size_t>(h)];
          const int64_t bad = detail::encode_row(type, y, y_stride, dim, scale, base + (h * n + t) * rb);
          if (bad >= 0)
            throw Error(fmt::format(
                "kv_cache append: {}[head {}, token {}, {}channel {}] = {} does not fit {} (|x| ≤ {}{}; "
                "layer {}, sequence {}, position {})",
                kind == 0 ? "k" : "v", h, t, transformed ? "rotated or centred " : "", bad, y[bad * y_stride],
                to_string(type), detail::type_max(type),
                type == CacheType::fp8_e4m3 ? fmt::format("·scale {}: raise the head's scale", scale) : "", layer,
                seqs[i], start + t));
        }
    }
  }
  // Blocks, for all the sequences together: the new ones, and a copy of each shared block
  // written into. A block shared by r tables and written by w ≤ r of these sequences is
  // copied w times, or w − 1 when all r write (the last writer then holds it alone).
  const int64_t T = c.block_tokens;
  int64_t needed = 0;
  std::map<int32_t, int64_t> writers;  // shared block -> sequences of this call writing into it
  for (const State::Sequence* sq : rows) {
    const int64_t start = sq->length[static_cast<size_t>(layer)], first = start / T, last = (start + n + T - 1) / T;
    needed += std::max<int64_t>(0, last - static_cast<int64_t>(sq->blocks.size()));
    for (int64_t b = first; b < std::min<int64_t>(last, static_cast<int64_t>(sq->blocks.size())); ++b)
      if (const int32_t id = sq->blocks[static_cast<size_t>(b)]; s.refcount[static_cast<size_t>(id)] > 1) ++writers[id];
  }
  for (const auto& [id, w] : writers) needed += w - (w == s.refcount[static_cast<size_t>(id)] ? 1 : 0);
  if (needed > static_cast<int64_t>(s.free_list.size()))
    throw Error(fmt::format(
        "kv_cache append: pool exhausted: {} positions for {} {} need {} more blocks of {} positions, {} of {} are "
        "free ({} bytes each); nothing was appended",
        n, count == 1 ? "sequence" : "each of sequences", fmt::join(seqs, ", "), needed, T, s.free_list.size(),
        s.total_blocks, s.block_bytes()));
  for (int64_t i = 0; i < count; ++i) {
    State::Sequence& sq = *rows[static_cast<size_t>(i)];
    const int64_t start = sq.length[static_cast<size_t>(layer)], end = start + n;
    for (int64_t b = start / T; b < (end + T - 1) / T; ++b) {
      if (b >= static_cast<int64_t>(sq.blocks.size())) {
        sq.blocks.push_back(s.take());
      } else if (int32_t& old = sq.blocks[static_cast<size_t>(b)]; s.refcount[static_cast<size_t>(old)] > 1) {
        const int32_t fresh = s.take();  // copy-on-write, every layer at once: the table is shared by all
        const detail::CacheLayerView all = s.layer_view(0);  // a block's first bytes
        std::memcpy(s.writable(all.keys(fresh, 0)), all.keys(old, 0), static_cast<size_t>(s.block_bytes()));
        s.release(old);
        old = fresh;
      }
    }
    const detail::CacheLayerView lv = s.layer_view(layer);
    for (int kind = 0; kind < 2; ++kind) {
      const int64_t rb = kind == 0 ? s.key_row : s.value_row;
      const std::byte* base = encoded.data() + i * seq_bytes + (kind == 0 ? 0 : c.kv_heads * n * s.key_row);
      for (int64_t h = 0; h < c.kv_heads; ++h)
        for (int64_t t = 0; t < n; ++t) {
          const int64_t pos = start + t;
          const int32_t block = sq.blocks[static_cast<size_t>(pos / T)];
          std::byte* dst = s.writable(kind == 0 ? lv.key(block, h, pos % T) : lv.value(block, h, pos % T));
          std::memcpy(dst, base + (h * n + t) * rb, static_cast<size_t>(rb));
        }
    }
    sq.length[static_cast<size_t>(layer)] = end;
    if (c.center_keys) sq.key_center[static_cast<size_t>(layer)] = std::move(centers[static_cast<size_t>(i)]);
  }
}

void KVCache::gather(int64_t layer, int64_t seq, TensorView<float> k, TensorView<float> v) const {
  State& s = *state_;
  const KVCacheConfig& c = s.config;
  s.check_layer(layer, "gather");
  const State::Sequence& sq = s.find(seq, "gather");
  const int64_t len = sq.length[static_cast<size_t>(layer)];
  const Shape kwant{1, c.kv_heads, len, c.head_dim}, vwant{1, c.kv_heads, len, c.value_dim};
  if (k.shape() != kwant || v.shape() != vwant)
    throw Error(fmt::format("kv_cache gather: k {} and v {} should be {} and {}", to_string(k.shape()),
                            to_string(v.shape()), to_string(kwant), to_string(vwant)));
  std::vector<float> row(static_cast<size_t>(std::max(c.head_dim, c.value_dim)));
  const detail::CacheLayerView lv = s.layer_view(layer);
  const float* center = sq.key_center[static_cast<size_t>(layer)].data();
  for (int64_t h = 0; h < c.kv_heads; ++h)
    for (int64_t pos = 0; pos < len; ++pos) {
      const int32_t block = sq.blocks[static_cast<size_t>(pos / c.block_tokens)];
      const int64_t t = pos % c.block_tokens;
      detail::decode_row(c.key_type, lv.key(block, h, t), c.head_dim,
                         s.key_scales[static_cast<size_t>(h)], row.data());
      if (c.center_keys)  // the stored rows are the caller's rotated keys minus μ
        for (int64_t j = 0; j < c.head_dim; ++j) row[static_cast<size_t>(j)] += center[h * c.head_dim + j];
      if (s.key_rotation) s.key_rotation->unrotate(row.data());
      for (int64_t j = 0; j < c.head_dim; ++j) k(0, h, pos, j) = row[static_cast<size_t>(j)];
      detail::decode_row(c.value_type, lv.value(block, h, t), c.value_dim,
                         s.value_scales[static_cast<size_t>(h)], row.data());
      if (s.value_rotation) s.value_rotation->unrotate(row.data());
      for (int64_t j = 0; j < c.value_dim; ++j) v(0, h, pos, j) = row[static_cast<size_t>(j)];
    }
}

KVCacheMemory KVCache::memory() const {
  const State& s = *state_;
  KVCacheMemory m;
  m.block_bytes = s.block_bytes();
  m.total_blocks = s.total_blocks;
  m.pool_bytes = m.block_bytes * m.total_blocks;
  m.used_blocks = m.total_blocks - static_cast<int64_t>(s.free_list.size());
  m.shared_blocks = std::count_if(s.refcount.begin(), s.refcount.end(), [](int32_t r) { return r > 1; });
  m.sequences = static_cast<int64_t>(s.seqs.size());
  m.bytes_per_token = m.block_bytes / s.config.block_tokens;
  return m;
}

detail::CacheLayerView detail::KVCacheAccess::layer(const KVCache& cache, int64_t layer) {
  const KVCache::State& s = *cache.state_;
  s.check_layer(layer, "attention");
  return s.layer_view(layer);
}

std::span<const int32_t> detail::KVCacheAccess::blocks(const KVCache& cache, int64_t seq) {
  return cache.state_->find(seq, "attention").blocks;
}

detail::CacheTransforms detail::KVCacheAccess::transforms(const KVCache& cache, int64_t seq, int64_t layer) {
  const KVCache::State& s = *cache.state_;
  CacheTransforms t;
  t.key_rotation = s.key_rotation ? &*s.key_rotation : nullptr;
  t.value_rotation = s.value_rotation ? &*s.value_rotation : nullptr;
  const auto& mu = cache.state_->find(seq, "attention").key_center[static_cast<size_t>(layer)];
  t.key_center = mu.empty() ? nullptr : mu.data();
  return t;
}

}  // namespace attnlab
