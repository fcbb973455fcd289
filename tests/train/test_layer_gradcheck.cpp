// Finite-difference checks of each layer of the training model on its own, in
// double (attention through the exact reference, which is itself checked in tests/core).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"
#include "train/attention_layer.hpp"
#include "train/layernorm.hpp"

namespace attnlab::train {
namespace {

using test::check_gradient;
using test::normal_vector;
using test::weighted_sum;

TEST(LayerNormGradcheck, InputGammaBeta) {
  const int64_t M = 5, D = 7;
  LayerNorm<double> ln("ln", D);
  ln.gamma.value = normal_vector(D, 1, 0.5);
  for (double& g : ln.gamma.value) g += 1.0;
  ln.beta.value = normal_vector(D, 2, 0.5);
  std::vector<double> x = normal_vector(M * D, 3, 2.0), y(M * D), dx(M * D);
  const std::vector<double> w = normal_vector(M * D, 4);
  auto loss = [&] {
    ln.forward(x.data(), y.data(), M);
    return weighted_sum(y, w);
  };
  loss();
  ln.gamma.zero_grad();
  ln.beta.zero_grad();
  ln.backward(w.data(), dx.data());
  const auto dgamma = ln.gamma.grad, dbeta = ln.beta.grad;
  check_gradient("dx", x, dx, loss, 40);
  check_gradient("dgamma", ln.gamma.value, dgamma, loss);
  check_gradient("dbeta", ln.beta.value, dbeta, loss);
}

struct LayerCase {
  Scaling scale;
  bool layernorm;
  InitMode init;
  bool last_only = false;
};

class AttentionLayerGradcheck : public ::testing::TestWithParam<LayerCase> {};

TEST_P(AttentionLayerGradcheck, InputAndEveryParameter) {
  const auto& c = GetParam();
  ModelConfig config;
  config.d_model = 6;
  config.d_k = 5;
  config.scale = c.scale;
  config.layernorm = c.layernorm;
  config.init = c.init;
  const int64_t B = 2, N = 4, D = config.d_model;
  AttentionLayer<double> layer("layer", config);
  std::mt19937_64 rng(11);
  layer.init(rng);
  if (c.scale == Scaling::qk_norm_temperature()) layer.log_temp.value[0] = 0.7;  // off its init value
  std::vector<double> h = normal_vector(B * N * D, 12), out(h.size()), dh(h.size());
  const std::vector<double> w = normal_vector(h.size(), 13);
  auto loss = [&] {
    layer.forward(h.data(), out.data(), B, N, nullptr, c.last_only);
    return weighted_sum(out, w);
  };
  loss();
  for (auto* p : layer.params()) p->zero_grad();
  layer.backward(w.data(), dh.data());
  check_gradient("dh", h, dh, loss, 48);
  for (auto* p : layer.params()) {
    const auto analytic = p->grad;
    check_gradient(p->name, p->value, analytic, loss, 30);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, AttentionLayerGradcheck,
    ::testing::Values(LayerCase{ScalePolicy::none(), true, InitMode::unit}, LayerCase{ScalePolicy::none(), false, InitMode::unit},
                      LayerCase{ScalePolicy::inv_sqrt_d(), true, InitMode::unit},
                      LayerCase{ScalePolicy::inv_d(), false, InitMode::small},
                      // A policy whose scale depends on the row's key count, applied per row by the reference.
                      LayerCase{ScalePolicy::entropy_invariant(), true, InitMode::unit},
                      LayerCase{Scaling::qk_norm_temperature(), true, InitMode::unit},
                      LayerCase{Scaling::qk_norm_temperature(), false, InitMode::small},
                      LayerCase{ScalePolicy::none(), true, InitMode::unit, true},
                      LayerCase{Scaling::qk_norm_temperature(), true, InitMode::unit, true},
                      // Bahdanau's score aᵀ tanh(q_i + k_j): every row, and the last row only.
                      LayerCase{Scaling::additive_score(), true, InitMode::unit},
                      LayerCase{Scaling::additive_score(), false, InitMode::unit, true},
                      LayerCase{ScalePolicy::none(), true, InitMode::quarter}),
    [](const auto& info) {
      return info.param.scale.name() + (info.param.layernorm ? "_ln_" : "_noln_") +
             to_string(info.param.init) + (info.param.last_only ? "_last_only" : "");
    });

// Su Jianlin's equivalence at initialisation: unscaled logits with W_q, W_k drawn d_k^(−1/4)
// smaller are unit init's logits times 1/√d_k, exactly (the same normal draws). The gradient on
// W_q is not: it is d_k^(1/4) times the scaled model's, so an optimiser moves the two apart.
TEST(AttentionLayer, QuarterInitEqualsInvSqrtDAtInitNotInTraining) {
  const int64_t B = 2, N = 5, dk = 16;
  ModelConfig scaled, quarter;
  scaled.d_model = quarter.d_model = 6;
  scaled.d_k = quarter.d_k = dk;
  scaled.scale = ScalePolicy::inv_sqrt_d();
  quarter.scale = ScalePolicy::none();
  quarter.init = InitMode::quarter;
  AttentionLayer<double> a("a", scaled), b("b", quarter);
  std::mt19937_64 ra(3), rb(3);
  a.init(ra);
  b.init(rb);
  const std::vector<double> h = normal_vector(B * N * 6, 5), w = normal_vector(B * N * 6, 6);
  std::vector<double> oa(h.size()), ob(h.size()), dha(h.size()), dhb(h.size());
  a.forward(h.data(), oa.data(), B, N);
  b.forward(h.data(), ob.data(), B, N);
  const auto la = a.logits(), lb = b.logits();
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-12 * (1 + std::abs(la[i])));
  for (size_t i = 0; i < oa.size(); ++i) EXPECT_NEAR(oa[i], ob[i], 1e-12);
  for (auto* p : a.params()) p->zero_grad();
  for (auto* p : b.params()) p->zero_grad();
  a.backward(w.data(), dha.data());
  b.backward(w.data(), dhb.data());
  const double factor = std::pow(static_cast<double>(dk), 0.25);
  for (size_t i = 0; i < a.w_q.grad.size(); ++i) EXPECT_NEAR(b.w_q.grad[i], factor * a.w_q.grad[i], 1e-10);
  for (size_t i = 0; i < dha.size(); ++i) EXPECT_NEAR(dha[i], dhb[i], 1e-12);
}

TEST(AttentionLayer, TemperatureInitMatchesInvSqrtD) {
  ModelConfig config;
  config.d_k = 256;
  config.scale = Scaling::qk_norm_temperature();
  AttentionLayer<double> layer("layer", config);
  std::mt19937_64 rng(1);
  layer.init(rng);
  EXPECT_NEAR(layer.scale(9), 16.0, 1e-12);
}

}  // namespace
}  // namespace attnlab::train
