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
  for (const detail::CachedSequence<double>& s :
       detail::cached_sequences<double>(cache, layer, seqs, q, options, outputs.out, outputs.lse, query_lengths)) {
    const auto [kf, vf] = detail::gathered_sequence(cache, layer, s.seq, s.len);
    Tensor<double> k(kf.shape()), v(vf.shape());
    std::copy(kf.storage().begin(), kf.storage().end(), k.storage().begin());
    std::copy(vf.storage().begin(), vf.storage().end(), v.storage().begin());
    attention_forward<double>(s.q, k, v, options, {s.out, s.lse});
  }
}

}  // namespace attnlab::reference
