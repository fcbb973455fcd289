#include <attnlab/attnlab.hpp>

#include <cstdio>
#include <random>

int main() {
  constexpr int64_t kHeads = 32, kKvHeads = 8, kDim = 128, kMaxLen = 4096;  // Llama 3 8B's layer
  // The cache, allocated once for the longest sequence: [batch, K/V heads, max_len, d].
  attnlab::Tensor<float> k_cache({1, kKvHeads, kMaxLen, kDim}), v_cache({1, kKvHeads, kMaxLen, kDim});
  attnlab::Tensor<float> q({1, kHeads, 1, kDim}), out({1, kHeads, 1, kDim}), lse({1, kHeads, 1, 1});
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  attnlab::AttentionOptions<float> options;
  options.causal = attnlab::Causal::bottom_right;  // the new rows are the cache's last positions
  for (int64_t len = 1; len <= 100; ++len) {         // one token per step
    for (int64_t h = 0; h < kKvHeads; ++h)           // its K and V rows (your model's projections)
      for (int64_t c = 0; c < kDim; ++c) k_cache(0, h, len - 1, c) = normal(rng), v_cache(0, h, len - 1, c) = normal(rng);
    for (float& x : q.storage()) x = normal(rng);    // its queries
    // The first len positions: views with the cache's strides, read in place (no copy).
    const attnlab::ConstView<float> k(k_cache.data(), {1, kKvHeads, len, kDim}, k_cache.view().strides());
    const attnlab::ConstView<float> v(v_cache.data(), {1, kKvHeads, len, kDim}, v_cache.view().strides());
    attnlab::attention_forward(q.view(), k, v, options, {out.view(), lse.view()});  // writes into out and lse
  }
  std::printf("out %.6f  lse %.6f\n", out(0, 0, 0, 0), lse(0, 0, 0, 0));
}
