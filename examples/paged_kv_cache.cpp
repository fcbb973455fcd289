// attnlab::KVCache: two sequences sharing a prompt (a fork), decoding together in one call,
// keys and values stored as int8 (docs/python.md, "Decoding").
#include <attnlab/attnlab.hpp>

#include <cstdio>
#include <random>

int main() {
  constexpr int64_t kHeads = 32, kKvHeads = 8, kDim = 128;
  attnlab::KVCacheConfig config;
  config.layers = 1, config.kv_heads = kKvHeads, config.head_dim = kDim, config.max_tokens = 4096;
  config.key_type = attnlab::CacheType::int8, config.value_type = attnlab::CacheType::int8;
  attnlab::KVCache cache(config);  // the pool, allocated once
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto rows = [&](int64_t n) {  // n positions' K or V rows (your model's projections)
    attnlab::Tensor<float> t({1, kKvHeads, n, kDim});
    for (float& x : t.storage()) x = normal(rng);
    return t;
  };

  const int64_t a = cache.add_sequence();
  cache.append(0, a, rows(300), rows(300));  // the prompt: 2 full blocks of 128 positions and a part
  const int64_t b = cache.fork(a, 300);      // a second continuation of it: no copy
  attnlab::AttentionOptions<float> options;
  options.causal = attnlab::Causal::bottom_right;
  const int64_t seqs[] = {a, b};
  attnlab::Tensor<float> q({2, kHeads, 1, kDim}), out({2, kHeads, 1, kDim}), lse({2, kHeads, 1, 1});
  for (int step = 0; step < 20; ++step) {  // one token per sequence per step
    for (int64_t s : seqs) cache.append(0, s, rows(1), rows(1));
    for (float& x : q.storage()) x = normal(rng);
    attnlab::kv_cache_attention(cache, 0, seqs, q, options, {out, lse});
  }
  const attnlab::KVCacheMemory m = cache.memory();
  std::printf("out %.6f  lse %.6f  blocks %lld used, %lld shared\n", out(1, 0, 0, 0), lse(1, 0, 0, 0),
              static_cast<long long>(m.used_blocks), static_cast<long long>(m.shared_blocks));
}
