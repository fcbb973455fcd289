// Attention over a KVCache with the float32 engine: each sequence's blocks dequantized into
// contiguous scratch (core/kv_cache_calls.hpp), then one engine call per sequence (the
// engine's own decode or tiled path, deterministic for any thread count). The fused kernels
// that read quantized blocks in place will take over this loop.
#include "attnlab/engine.hpp"
#include "attnlab/kv_cache.hpp"
#include "core/kv_cache_calls.hpp"

namespace attnlab {

void kv_cache_attention(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs, ConstView<float> q,
                        const AttentionOptions<float>& options, const ForwardOutputs<float>& outputs,
                        std::span<const int64_t> query_lengths, const ComputeConfig& config) {
  detail::check_kv_cache_outputs(outputs);
  detail::for_each_cached_sequence<float>(cache, layer, seqs, q, options, outputs.out, outputs.lse, query_lengths,
                                          [&](const Tensor<float>& k, const Tensor<float>& v, ConstView<float> qs,
                                              TensorView<float> os, TensorView<float> ls) {
                                            engine::attention_forward<float>(qs, k, v, options, {os, ls}, config);
                                          });
}

}  // namespace attnlab
