// Programmable masks and scores (attnlab/score_mod.hpp), forward and backward:
// documents packed in one sequence, each attending causally to itself (a mask_mod),
// with a tanh softcap written as a score_mod, through the float engine, checked
// against the double reference. `make test` builds and runs it.
#include <attnlab/attnlab.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  // One batch entry, 4 query heads sharing 2 key/value heads, 700 tokens in 3 documents.
  const int64_t N = 700, d = 32;
  const std::vector<int64_t> doc_start = {0, 250, 520, N};  // document k is tokens [doc_start[k], doc_start[k+1])
  std::vector<int32_t> document(N);
  for (size_t k = 0; k + 1 < doc_start.size(); ++k)
    std::fill(document.begin() + doc_start[k], document.begin() + doc_start[k + 1], static_cast<int32_t>(k));

  // mask_mod(b, h, q, k) -> bool: may query q see key k? The lambda is inlined into the
  // kernel's per-row loop (one virtual call per row of a tile, not per element).
  const auto doc_causal = attnlab::make_mask_mod([&](int64_t, int64_t, int64_t q, int64_t k) {
    return document[static_cast<size_t>(q)] == document[static_cast<size_t>(k)] && k <= q;
  });
  // score_mod(s, b, h, q, k) -> s' and its derivative ds'/ds (for the backward). `auto s`
  // serves the float engine and the double reference alike.
  const auto softcap = attnlab::make_score_mod(
      [](auto s, int64_t, int64_t, int64_t, int64_t) { return 20 * std::tanh(s / 20); },
      [](auto s, int64_t, int64_t, int64_t, int64_t) {
        const auto t = std::tanh(s / 20);
        return 1 - t * t;
      });
  // Classify the mask's tiles once (it depends on neither batch nor head: 1, 1), and reuse
  // it across calls: empty tiles are skipped, full ones never evaluate the mask.
  const attnlab::BlockMask blocks = attnlab::BlockMask::build(doc_causal, 1, 1, N, N);
  std::printf("block mask: %lld empty, %lld full, %lld partial tiles of %lld x %lld\n",
              static_cast<long long>(blocks.count(attnlab::BlockMask::Block::empty)),
              static_cast<long long>(blocks.count(attnlab::BlockMask::Block::full)),
              static_cast<long long>(blocks.count(attnlab::BlockMask::Block::partial)),
              static_cast<long long>(attnlab::BlockMask::block_rows()),
              static_cast<long long>(attnlab::BlockMask::block_cols()));

  attnlab::Tensor<double> q({1, 4, N, d}), k({1, 2, N, d}), v({1, 2, N, d}), grad_out({1, 4, N, d});
  std::mt19937 rng(0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto* t : {&q, &k, &v, &grad_out})
    for (double& x : t->storage()) x = normal(rng);
  auto to_float = [](const attnlab::Tensor<double>& x) {
    attnlab::Tensor<float> y(x.shape());
    std::transform(x.storage().begin(), x.storage().end(), y.storage().begin(), [](double a) { return float(a); });
    return y;
  };
  const auto qf = to_float(q), kf = to_float(k), vf = to_float(v), gf = to_float(grad_out);
  // Forward and backward into tensors of the caller's: out, then dq and dk (dv is not compared).
  auto run = []<class T>(const attnlab::Tensor<T>& q_, const attnlab::Tensor<T>& k_, const attnlab::Tensor<T>& v_,
                         const attnlab::Tensor<T>& g_, const attnlab::AttentionOptions<T>& options) {
    attnlab::Tensor<T> out(q_.shape()), lse({q_.shape()[0], q_.shape()[1], q_.shape()[2], 1});
    attnlab::Tensor<T> dq(q_.shape()), dk(k_.shape()), dv(v_.shape());
    attnlab::attention_forward(q_.view(), k_.view(), v_.view(), options, {out.view(), lse.view()});
    attnlab::attention_backward(q_.view(), k_.view(), v_.view(), out.view(), lse.view(), g_.view(), options,
                                {dq.view(), dk.view(), dv.view()});
    std::array<attnlab::Tensor<T>, 3> r{std::move(out), std::move(dq), std::move(dk)};
    return r;
  };

  attnlab::AttentionOptions<float> engine_options;
  engine_options.mask_mod = &doc_causal;
  engine_options.score_mod = &softcap;
  engine_options.block_mask = &blocks;
  const auto [out, dq, dk] = run(qf, kf, vf, gf, engine_options);  // float: the engine

  attnlab::AttentionOptions<double> reference_options;  // double: the reference (no BlockMask needed)
  reference_options.mask_mod = &doc_causal;
  reference_options.score_mod = &softcap;
  const auto [r_out, r_dq, r_dk] = run(q, k, v, grad_out, reference_options);

  auto max_diff = [](const attnlab::Tensor<float>& a, const attnlab::Tensor<double>& b) {
    double m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.data()[i] - b.data()[i]));
    return m;
  };
  const double e_out = max_diff(out, r_out), e_dq = max_diff(dq, r_dq), e_dk = max_diff(dk, r_dk);
  std::printf("engine vs reference: out %.1e, dq %.1e, dk %.1e\n", e_out, e_dq, e_dk);
  // Token 250 starts document 1: it sees only itself, so its output is its own value row.
  std::printf("out[0, 0, 250, 0] = %.6f = v[0, 0, 250, 0] = %.6f\n", out(0, 0, 250, 0), vf(0, 0, 250, 0));
  const bool ok = e_out < 1e-5 && e_dq < 1e-4 && e_dk < 1e-4 && out(0, 0, 250, 0) == vf(0, 0, 250, 0);
  std::printf("%s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
