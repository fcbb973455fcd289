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

  // The caller owns every result: out [B, Hq, Nq, dv] and lse [B, Hq, Nq, 1], then dq, dk, dv.
  attnlab::Tensor<float> out({1, 8, 128, 64}), lse({1, 8, 128, 1});
  attnlab::attention_forward(q.view(), k.view(), v.view(), options, {out.view(), lse.view()});  // float: the engine
  attnlab::Tensor<float> grad_out(out.shape(), 1.0f);  // dL/dout for L = sum(out)
  attnlab::Tensor<float> dq(q.shape()), dk(k.shape()), dv(v.shape());
  attnlab::attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), grad_out.view(), options,
                              {dq.view(), dk.view(), dv.view()});
  std::printf("out %.6f  lse %.6f  dk %.6f\n", out(0, 0, 127, 0), lse(0, 0, 127, 0), dk(0, 0, 0, 0));
}
