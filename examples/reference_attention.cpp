// Attention through the double-precision reference (the oracle),
// forward and backward, with GQA and a causal mask.
#include <attnlab/attnlab.hpp>

#include <cstdio>
#include <random>

int main() {
  // q: [batch 1, 4 query heads, 6 tokens, d 8]; k, v: 2 key/value heads (grouped-query).
  attnlab::Tensor<double> q({1, 4, 6, 8}), k({1, 2, 6, 8}), v({1, 2, 6, 8});
  std::mt19937 rng(0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto* t : {&q, &k, &v})
    for (double& x : t->storage()) x = normal(rng);

  attnlab::AttentionOptions<double> options;
  options.causal = attnlab::Causal::top_left;  // PyTorch's is_causal=True
  options.scale = attnlab::ScalePolicy();      // 1/sqrt(d), the default

  attnlab::Tensor<double> out({1, 4, 6, 8}), lse({1, 4, 6, 1});  // the caller owns the results
  attnlab::reference::attention_forward(q.view(), k.view(), v.view(), options, {out.view(), lse.view()});
  std::printf("out[0, 0, 5, :3] = %.6f %.6f %.6f   L = %.6f\n", out(0, 0, 5, 0), out(0, 0, 5, 1), out(0, 0, 5, 2),
              lse(0, 0, 5, 0));

  attnlab::Tensor<double> grad_out(out.shape(), 1.0);  // d(sum of out)/d(out)
  attnlab::Tensor<double> dq(q.shape()), dk(k.shape()), dv(v.shape());
  attnlab::reference::attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), grad_out.view(), options,
                                         {dq.view(), dk.view(), dv.view()});
  std::printf("dk[0, 0, 0, 0] = %.6f (heads 0 and 1 share this K head and sum their gradients)\n", dk(0, 0, 0, 0));

  try {  // Bad input is an attnlab::Error that names the problem.
    attnlab::Tensor<double> k_bad({1, 2, 6, 4});
    attnlab::reference::attention_forward(q.view(), k_bad.view(), v.view(), {}, {out.view(), lse.view()});
  } catch (const attnlab::Error& e) {
    std::printf("error: %s\n", e.what());
  }
}
