// The GPT of the language-model study (train/gpt.hpp) against central finite differences in
// double (attention on the exact reference), layer by layer and whole, with the tolerance of
// gradcheck.hpp (|analytic − numeric| ≤ 1e−7 + 1e−5·|numeric|: h = 1e−6 leaves O(h²) ≈ 1e−12
// truncation and O(ε/h) ≈ 1e−10 rounding); and the float model (attention on the engine)
// against the double one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "gradcheck.hpp"
#include "lm_random_batch.hpp"
#include "train/causal_attention.hpp"
#include "train/gpt.hpp"
#include "train/gpt_mlp.hpp"

namespace attnlab::train {
// gtest prints a Scaling parameter by its name (not its bytes).
inline void PrintTo(const Scaling& s, std::ostream* os) { *os << s.name(); }
}  // namespace attnlab::train

namespace attnlab::train::lm {
namespace {

using test::check_gradient;
using test::normal_vector;
using test::gradient_distance;
using test::weighted_sum;

// Weights of O(1/√fan-in) instead of GPT-2's 0.02, so that every path of the model carries a
// gradient well above the check's absolute tolerance.
template <class T>
void randomise(const std::vector<Param<T>*>& params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto* p : params) {
    const bool vector = p->rows == 1;  // LayerNorm's γ, β and qk-norm's s
    p->fill_normal(rng, vector ? 0.3 : 1.0 / std::sqrt(static_cast<double>(p->rows)));
    if (p->name.ends_with("gamma")) for (T& g : p->value) g += T(1);
    if (p->name.ends_with("log_temp")) p->value[0] = static_cast<T>(0.7);
  }
}

TEST(LmGradcheck, Mlp) {
  const int64_t M = 5, D = 4;
  Mlp<double> mlp("mlp", D, 4 * D);
  randomise(mlp.params(), 1);
  std::vector<double> m = normal_vector(M * D, 2), y(M * D), dm(M * D);
  const std::vector<double> w = normal_vector(M * D, 3);
  auto loss = [&] {
    mlp.forward(m.data(), y.data(), M);
    return weighted_sum(y, w);
  };
  loss();
  for (auto* p : mlp.params()) p->zero_grad();
  mlp.backward(w.data(), dm.data());
  check_gradient("dm", m, dm, loss, 40);
  for (auto* p : mlp.params()) {
    const auto analytic = p->grad;
    check_gradient(p->name, p->value, analytic, loss, 40);
  }
}

// The float MLP's GELU (erf from Abramowitz & Stegun 7.1.26, |error| ≤ 1.5e−7) against the exact
// u Φ(u) in double, over the range activations take.
TEST(LmMlp, FloatGeluWithinFloatRoundingOfErf) {
  Mlp<float> mlp("mlp", 1, 4);
  mlp.w_fc.value = {1, 0, 0, 0};
  mlp.w_proj.value = {1, 0, 0, 0};
  std::vector<float> m, y;
  for (double u = -9; u <= 9; u += 0.001) m.push_back(static_cast<float>(u));
  y.resize(m.size());
  mlp.forward(m.data(), y.data(), static_cast<int64_t>(m.size()));
  for (size_t i = 0; i < m.size(); ++i) {
    const double u = m[i], exact = 0.5 * u * (1 + std::erf(u / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], exact, 2e-7 * (1 + std::abs(u))) << u;
  }
}

GptConfig tiny_config(const Scaling& scale) {
  GptConfig c;
  c.vocab = 7;
  c.context = 5;
  c.d_model = 6;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_k = 4;  // not D/H = 3: q and k have their own width
  c.scale = scale;
  return c;
}

std::vector<Scaling> scalings() {
  return {ScalePolicy::none(), ScalePolicy::inv_sqrt_d(), ScalePolicy::fixed(2.0 / std::sqrt(4.0)),
          ScalePolicy::inv_d(), Scaling::qk_norm_temperature()};
}

class CausalAttentionGradcheck : public ::testing::TestWithParam<Scaling> {};

TEST_P(CausalAttentionGradcheck, InputAndEveryParameter) {
  const GptConfig c = tiny_config(GetParam());
  const int64_t B = 2, N = 5, D = c.d_model;
  CausalSelfAttention<double> attn("attn", c);
  randomise(attn.params(), 4);
  std::vector<double> a = normal_vector(B * N * D, 5), y(a.size()), da(a.size());
  const std::vector<double> w = normal_vector(a.size(), 6);
  auto loss = [&] {
    attn.forward(a.data(), y.data(), B, N);
    return weighted_sum(y, w);
  };
  loss();
  for (auto* p : attn.params()) p->zero_grad();
  attn.backward(w.data(), da.data());
  check_gradient("da", a, da, loss, 60);
  for (auto* p : attn.params()) {
    const auto analytic = p->grad;
    check_gradient(p->name, p->value, analytic, loss, 40);
  }
}

// Causality: a query's output depends on no later position (nor does its gradient reach one).
TEST(CausalAttention, OutputsDependOnEarlierPositionsOnly) {
  const GptConfig c = tiny_config(ScalePolicy::inv_sqrt_d());
  const int64_t B = 1, N = 5, D = c.d_model;
  CausalSelfAttention<double> attn("attn", c);
  randomise(attn.params(), 4);
  std::vector<double> a = normal_vector(B * N * D, 5), y1(a.size()), y2(a.size());
  attn.forward(a.data(), y1.data(), B, N);
  for (int64_t j = 0; j < D; ++j) a[static_cast<size_t>(3 * D + j)] += 1.0;  // position 3 changes
  attn.forward(a.data(), y2.data(), B, N);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < D; ++j) {
      const auto k = static_cast<size_t>(i * D + j);
      if (i < 3)
        EXPECT_EQ(y1[k], y2[k]) << "position " << i;
      else
        EXPECT_NE(y1[k], y2[k]) << "position " << i;
    }
}

// The whole GPT: embeddings (E also the tied output layer), both blocks' LayerNorms,
// attention and MLP, the final LayerNorm; every parameter.
class GptGradcheck : public ::testing::TestWithParam<Scaling> {};

TEST_P(GptGradcheck, EveryParameter) {
  const GptConfig c = tiny_config(GetParam());
  Gpt<double> model(c);
  model.init(1);
  randomise(model.params(), 8);
  const LmBatch batch = test::random_batch(c, 2, 9);
  auto loss = [&] { return model.forward(batch); };
  loss();
  model.zero_grad();
  model.backward();
  for (auto* p : model.params()) {
    const auto analytic = p->grad;
    check_gradient(p->name, p->value, analytic, loss, 24);
  }
}

std::string scaling_name(const ::testing::TestParamInfo<Scaling>& info) {
  std::string s = info.param.name();
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Scalings, CausalAttentionGradcheck, ::testing::ValuesIn(scalings()), scaling_name);
INSTANTIATE_TEST_SUITE_P(Scalings, GptGradcheck, ::testing::ValuesIn(scalings()), scaling_name);

// A diverged model gives a NaN loss, which the run reports as divergence, not an error: an
// overflowing qk-norm temperature (no scale policy holds exp(τ) = ∞) and infinite weights.
TEST(GptDiverged, NaNLossNotAnError) {
  const GptConfig c = tiny_config(Scaling::qk_norm_temperature());
  Gpt<float> model(c);
  model.init(1);
  const LmBatch batch = test::random_batch(c, 2, 3);
  EXPECT_TRUE(std::isfinite(model.forward(batch)));
  model.blocks[1].attn.log_temp.value[0] = 1000.0f;
  EXPECT_TRUE(std::isnan(model.forward(batch)));
  model.init(1);
  for (float& w : model.tok_emb.value) w = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(model.forward(batch)));
}

// GPT-2's and the unit initialisation: standard deviations as documented, the same draws for
// every weight but W_q, W_k, and the same weights in float and double.
TEST(GptInit, Gpt2AndUnit) {
  GptConfig c = tiny_config(ScalePolicy::inv_sqrt_d());
  c.d_model = 64;
  c.n_heads = 4;
  c.d_k = 64;
  c.n_layers = 8;
  c.vocab = 60;
  Gpt<double> gpt2(c);
  c.init = LmInit::unit;
  Gpt<double> unit(c);
  Gpt<float> unit_f(c);
  gpt2.init(7);
  unit.init(7);
  unit_f.init(7);
  auto sd = [](const Param<double>& p) {
    double s = 0;
    for (double x : p.value) s += x * x;
    return std::sqrt(s / static_cast<double>(p.value.size()));
  };
  EXPECT_NEAR(sd(gpt2.tok_emb), 0.02, 0.001);
  EXPECT_NEAR(sd(gpt2.blocks[0].attn.w_q), 0.02, 0.001);
  EXPECT_NEAR(sd(gpt2.blocks[0].mlp.w_proj), 0.02 / 4, 0.0003);  // 0.02/√(2L), L = 8
  EXPECT_NEAR(sd(gpt2.blocks[0].attn.w_o), 0.02 / 4, 0.0005);
  EXPECT_NEAR(sd(unit.blocks[0].attn.w_k), 1.0 / 8, 0.005);  // 1/√D
  EXPECT_EQ(unit.blocks[3].mlp.w_fc.value, gpt2.blocks[3].mlp.w_fc.value);
  for (size_t i = 0; i < unit.blocks[0].attn.w_q.value.size(); ++i)
    EXPECT_NEAR(unit.blocks[0].attn.w_q.value[i], gpt2.blocks[0].attn.w_q.value[i] * (1.0 / 8) / 0.02, 1e-12);
  const auto pd = unit.params();
  const auto pf = unit_f.params();
  for (size_t k = 0; k < pd.size(); ++k)
    for (size_t i = 0; i < pd[k]->value.size(); ++i)
      ASSERT_EQ(pf[k]->value[i], static_cast<float>(pd[k]->value[i])) << pd[k]->name;
}

// AdamW decays the matrices (W_q, W_k, W_v, W_o, W_fc, W_proj and the tied E), not the
// positions, the LayerNorms or qk-norm's temperature.
TEST(GptInit, DecayedParameters) {
  Gpt<float> model(tiny_config(Scaling::qk_norm_temperature()));
  const auto params = model.params();
  const auto decayed = model.decayed();
  ASSERT_EQ(params.size(), decayed.size());
  std::string names;
  for (size_t i = 0; i < params.size(); ++i)
    if (decayed[i]) names += params[i]->name + " ";
  EXPECT_EQ(names,
            "tok_emb block1.attn.w_q block1.attn.w_k block1.attn.w_v block1.attn.w_o block1.mlp.w_fc "
            "block1.mlp.w_proj block2.attn.w_q block2.attn.w_k block2.attn.w_v block2.attn.w_o block2.mlp.w_fc "
            "block2.mlp.w_proj ");
  EXPECT_EQ(params.size(), 2u + 2 * (2 + 5 + 2 + 2) + 2);  // E, P; per block LN₁, attention with τ, LN₂, MLP; LN_f
}

// The float model (attention on the engine, the code the study trains) against the double
// one (the reference) on the same weights and batch, at the study's initialisations: the loss
// within 1e−5 relative, each parameter's gradient within 1e−3 of its norm (float32 rounding
// through a few thousand operations per entry; the toy model's rule, test_model_gradcheck.cpp).
TEST(GptFloat, MatchesDouble) {
  for (const Scaling& scale : scalings())
    for (LmInit init : {LmInit::gpt2, LmInit::unit}) {
      GptConfig c = tiny_config(scale);
      c.d_model = 16;
      c.n_heads = 4;
      c.d_k = 32;
      c.context = 12;
      c.vocab = 20;
      c.init = init;
      Gpt<double> md(c);
      Gpt<float> mf(c);
      md.init(5);
      mf.init(5);
      const LmBatch batch = test::random_batch(c, 3, 17);
      const double ld = md.forward(batch), lf = mf.forward(batch);
      EXPECT_NEAR(lf, ld, 1e-5 * ld) << scale.name();
      md.zero_grad();
      mf.zero_grad();
      md.backward();
      mf.backward();
      const auto pd = md.params();
      const auto pf = mf.params();
      ASSERT_EQ(pd.size(), pf.size());
      for (size_t k = 0; k < pd.size(); ++k) {
        const auto d = gradient_distance(pf[k]->grad, pd[k]->grad);
        EXPECT_LE(d.diff, 1e-3 * d.norm) << pd[k]->name << " " << scale.name() << " " << to_string(init);
      }
    }
}

}  // namespace
}  // namespace attnlab::train::lm
