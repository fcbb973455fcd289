// The front door (attnlab/attention.hpp): one template per verb for every element type,
// routed here and nowhere else. float, bfloat16, float16 → the fused engine, double → the reference.
#include "attnlab/attention.hpp"

#include <type_traits>

#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"

namespace attnlab {

template <class T>
void attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v, const AttentionOptions<Accum<T>>& options,
                       const ForwardOutputs<T>& outputs, const ComputeConfig& config) {
  if constexpr (std::is_same_v<T, double>)
    reference::attention_forward<T>(q, k, v, options, outputs, config);
  else
    engine::attention_forward<T>(q, k, v, options, outputs, config);
}

template <class T>
void attention_backward(ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out, ConstView<Accum<T>> lse,
                        ConstView<T> grad_out, const AttentionOptions<Accum<T>>& options,
                        const BackwardOutputs<T>& grads, const ComputeConfig& config) {
  if constexpr (std::is_same_v<T, double>)
    reference::attention_backward<T>(q, k, v, out, lse, grad_out, options, grads, config);
  else
    engine::attention_backward<T>(q, k, v, out, lse, grad_out, options, grads, config);
}

#define ATTNLAB_INSTANTIATE(T)                                                                                \
  template ATTNLAB_API void attention_forward<T>(ConstView<T>, ConstView<T>, ConstView<T>,                    \
                                                 const AttentionOptions<Accum<T>>&, const ForwardOutputs<T>&, \
                                                 const ComputeConfig&);                                       \
  template ATTNLAB_API void attention_backward<T>(                                                            \
      ConstView<T>, ConstView<T>, ConstView<T>, ConstView<T>, ConstView<Accum<T>>, ConstView<T>,              \
      const AttentionOptions<Accum<T>>&, const BackwardOutputs<T>&, const ComputeConfig&);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(double)
ATTNLAB_INSTANTIATE(bfloat16)
ATTNLAB_INSTANTIATE(float16)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab
