// The oracle of attention over a KVCache: the dequantized values (float32, exact in double)
// through the double-precision reference, one call per sequence.
#include <algorithm>

#include "attnlab/kv_cache.hpp"
#include "attnlab/reference.hpp"
#include "core/kv_cache_calls.hpp"

namespace attnlab::reference {

void kv_cache_attention(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs, ConstView<double> q,
                        const AttentionOptions<double>& options, const ForwardOutputs<double>& outputs,
                        std::span<const int64_t> query_lengths) {
  detail::check_kv_cache_outputs(outputs);
  detail::for_each_cached_sequence<double>(cache, layer, seqs, q, options, outputs.out, outputs.lse, query_lengths,
                                           [](auto&&...) { return false; },
                                           [&](const Tensor<float>& kf, const Tensor<float>& vf, ConstView<double> qs,
                                               TensorView<double> os, TensorView<double> ls) {
                                             Tensor<double> k(kf.shape()), v(vf.shape());
                                             std::copy(kf.storage().begin(), kf.storage().end(), k.storage().begin());
                                             std::copy(vf.storage().begin(), vf.storage().end(), v.storage().begin());
                                             attention_forward<double>(qs, k, v, options, {os, ls});
                                           });
}

}  // namespace attnlab::reference
