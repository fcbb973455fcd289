#pragma once
// The forward's and the backward's results in tensors of their own, for the callers that
// want them allocated (the lab's experiments, the tests' oracle calls). Not installed: the
// public API writes into the caller's views (attnlab/attention.hpp).
#include <span>
#include <type_traits>
#include <vector>

#include "attnlab/attention.hpp"

namespace attnlab::detail {

template <class T>
struct AttentionForward {
  Tensor<T> out;         // [B, Hq, Nq, dv]
  Tensor<Accum<T>> lse;  // [B, Hq, Nq, 1]
};

template <class T>
struct AttentionGrads {
  Tensor<T> dq;                    // [B, Hq,  Nq, d ]
  Tensor<T> dk;                    // [B, Hkv, Nk, d ]
  Tensor<T> dv;                    // [B, Hkv, Nk, dv]
  std::vector<Accum<T>> dsinks{};  // [Hq] with options.sinks, else empty
};

// The element type of a Tensor<T> or a view of T.
template <class X>
struct ElementOf;
template <class T>
struct ElementOf<Tensor<T>> {
  using type = T;
};
template <class T>
struct ElementOf<TensorView<T>> {
  using type = std::remove_const_t<T>;
};

// q, k, v, grad_out: tensors or views of T; dropout_mask as ForwardOutputs::dropout_mask.
template <class Q, class K, class V, class T = typename ElementOf<Q>::type>
AttentionForward<T> allocating_forward(const Q& q_, const K& k_, const V& v_,
                                       const AttentionOptions<Accum<T>>& options = {}, const ComputeConfig& config = {},
                                       TensorView<uint8_t> dropout_mask = {}) {
  const ConstView<T> q = q_, k = k_, v = v_;
  AttentionForward<T> r{Tensor<T>({q.batch(), q.heads(), q.seq(), v.dim()}),
                        Tensor<Accum<T>>({q.batch(), q.heads(), q.seq(), 1})};
  attention_forward<T>(q, k, v, options, {r.out.view(), r.lse.view(), std::nullopt, dropout_mask}, config);
  return r;
}

template <class Q, class K, class V, class G, class T = typename ElementOf<Q>::type>
AttentionGrads<T> allocating_backward(const Q& q_, const K& k_, const V& v_, const AttentionForward<T>& forward,
                                      const G& grad_out_, const AttentionOptions<Accum<T>>& options = {},
                                      const ComputeConfig& config = {}) {
  const ConstView<T> q = q_, k = k_, v = v_, grad_out = grad_out_;
  AttentionGrads<T> g{Tensor<T>(q.shape()), Tensor<T>(k.shape()), Tensor<T>(v.shape()),
                      std::vector<Accum<T>>(options.sinks.size())};
  attention_backward<T>(q, k, v, forward.out.view(), forward.lse.view(), grad_out, options,
                        {g.dq.view(), g.dk.view(), g.dv.view(), std::span<Accum<T>>(g.dsinks)}, config);
  return g;
}

}  // namespace attnlab::detail
