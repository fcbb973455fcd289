#pragma once
// The reference's forward and backward of a test problem in one call (tests of the reference).
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "problem.hpp"

namespace attnlab::test {

struct Outcome {
  detail::AttentionForward<double> f;
  detail::AttentionGrads<double> g;
};

inline Outcome run(const Problem& p) {
  Outcome r{detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options()), {}};
  r.g = detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), r.f, p.grad_out.view(), p.options());
  return r;
}

}  // namespace attnlab::test
