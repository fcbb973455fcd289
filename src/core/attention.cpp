// The front door (attnlab/attention.hpp): one overload set for every element type,
// routed here and nowhere else. float, bfloat16, float16 → the fused engine, double → the reference.
#include "attnlab/attention.hpp"

#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"

namespace attnlab {

void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                       const AttentionOptions<float>& options, TensorView<float> out, TensorView<float> lse,
                       const RowDiagnostics<float>* diagnostics, const ComputeConfig& config) {
  engine::attention_forward(q, k, v, options, out, lse, diagnostics, config);
}

void attention_forward(ConstView<bfloat16> q, ConstView<bfloat16> k, ConstView<bfloat16> v,
                       const AttentionOptions<float>& options, TensorView<bfloat16> out, TensorView<float> lse,
                       const RowDiagnostics<float>* diagnostics, const ComputeConfig& config) {
  engine::attention_forward(q, k, v, options, out, lse, diagnostics, config);
}

void attention_forward(ConstView<float16> q, ConstView<float16> k, ConstView<float16> v,
                       const AttentionOptions<float>& options, TensorView<float16> out, TensorView<float> lse,
                       const RowDiagnostics<float>* diagnostics, const ComputeConfig& config) {
  engine::attention_forward(q, k, v, options, out, lse, diagnostics, config);
}

void attention_backward(ConstView<bfloat16> q, ConstView<bfloat16> k, ConstView<bfloat16> v, ConstView<bfloat16> out,
                        ConstView<float> lse, ConstView<bfloat16> grad_out, const AttentionOptions<float>& options,
                        TensorView<bfloat16> dq, TensorView<bfloat16> dk, TensorView<bfloat16> dv,
                        const ComputeConfig& config, std::span<float> dsinks) {
  engine::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config, dsinks);
}

void attention_backward(ConstView<float16> q, ConstView<float16> k, ConstView<float16> v, ConstView<float16> out,
                        ConstView<float> lse, ConstView<float16> grad_out, const AttentionOptions<float>& options,
                        TensorView<float16> dq, TensorView<float16> dk, TensorView<float16> dv,
                        const ComputeConfig& config, std::span<float> dsinks) {
  engine::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config, dsinks);
}

void attention_forward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                       const AttentionOptions<double>& options, TensorView<double> out, TensorView<double> lse,
                       const RowDiagnostics<double>* diagnostics, const ComputeConfig& config) {
  reference::attention_forward(q, k, v, options, out, lse, diagnostics, config);
}

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv,
                        const ComputeConfig& config) {
  engine::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config);
}

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, const ComputeConfig& config,
                        std::span<float> dsinks) {
  engine::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config, dsinks);
}

void attention_backward(ConstView<double> q, ConstView<double> k, ConstView<double> v, ConstView<double> out,
                        ConstView<double> lse, ConstView<double> grad_out, const AttentionOptions<double>& options,
                        TensorView<double> dq, TensorView<double> dk, TensorView<double> dv,
                        const ComputeConfig& config) {
  reference::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config);
}

void attention_backward(ConstView<double> q, ConstView<double> k, ConstView<double> v, ConstView<double> out,
                        ConstView<double> lse, ConstView<double> grad_out, const AttentionOptions<double>& options,
                        TensorView<double> dq, TensorView<double> dk, TensorView<double> dv, const ComputeConfig& config,
                        std::span<double> dsinks) {
  reference::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config, dsinks);
}

namespace {

// The allocating forms, written once for every element type.
template <class T>
AttentionForward<T> allocate_and_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                         const AttentionOptions<T>& options, const ComputeConfig& config) {
  AttentionForward<T> r{Tensor<T>({q.batch(), q.heads(), q.seq(), v.dim()}),
                        Tensor<T>({q.batch(), q.heads(), q.seq(), 1})};
  attention_forward(q, k, v, options, r.out.view(), r.lse.view(), nullptr, config);
  return r;
}

template <class T>
AttentionGrads<T> allocate_and_backward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                        const AttentionForward<T>& forward, ConstView<T> grad_out,
                                        const AttentionOptions<T>& options, const ComputeConfig& config) {
  AttentionGrads<T> g{Tensor<T>(q.shape()), Tensor<T>(k.shape()), Tensor<T>(v.shape()),
                      std::vector<T>(options.sinks.size())};
  attention_backward(q, k, v, forward.out.view(), forward.lse.view(), grad_out, options, g.dq.view(), g.dk.view(),
                     g.dv.view(), config, std::span<T>(g.dsinks));
  return g;
}

}  // namespace

AttentionForward<float> attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                          const AttentionOptions<float>& options, const ComputeConfig& config) {
  return allocate_and_forward(q, k, v, options, config);
}
AttentionForward<double> attention_forward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                           const AttentionOptions<double>& options, const ComputeConfig& config) {
  return allocate_and_forward(q, k, v, options, config);
}
AttentionGrads<float> attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                                         const AttentionForward<float>& forward, ConstView<float> grad_out,
                                         const AttentionOptions<float>& options, const ComputeConfig& config) {
  return allocate_and_backward(q, k, v, forward, grad_out, options, config);
}
AttentionGrads<double> attention_backward(ConstView<double> q, ConstView<double> k, ConstView<double> v,
                                          const AttentionForward<double>& forward, ConstView<double> grad_out,
                                          const AttentionOptions<double>& options, const ComputeConfig& config) {
  return allocate_and_backward(q, k, v, forward, grad_out, options, config);
}

}  // namespace attnlab
