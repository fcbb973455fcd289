#include <attnlab/attnlab.hpp>

#include <cstdio>
#include <random>

int main() {
  // [batch, heads, seq, head dim]; 8 query heads share 2 key/value heads (grouped-query).
  attnlab::Tensor<float> q({1, 8, 128, 64}), k({1, 2, 128, 64}), v({1, 2, 128, 64});
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto* t : {&q, &k, &v})
    for (float& x : t->storage()) x = normal(rng);

  attnlab::AttentionOptions<float> options;
  options.causal = attnlab::Causal::top_left;  // PyTorch's is_causal=True; the scale is 1/sqrt(d)

  auto forward = attnlab::attention_forward(q, k, v, options);  // float runs on the engine: out, lse
  attnlab::Tensor<float> grad_out(forward.out.shape(), 1.0f);   // dL/dout for L = sum(out)
  auto grads = attnlab::attention_backward(q, k, v, forward, grad_out, options);  // dq, dk, dv
  std::printf("out %.6f  lse %.6f  dk %.6f\n", forward.out(0, 0, 127, 0), forward.lse(0, 0, 127, 0),
              grads.dk(0, 0, 0, 0));
}
