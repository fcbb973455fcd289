// The full model's chain (embedding → attention blocks → LN → classifier →
// cross-entropy) against finite differences in double, and the float32 model
// (attention through the engine) against the double one.
#include <gtest/gtest.h>

#include <cmath>

#include "attnlab/error.hpp"
#include "gradcheck.hpp"
#include "train/model.hpp"

namespace attnlab::train {
namespace {

using test::check_gradient;

struct ModelCase {
  TaskKind task;
  int64_t layers;
  bool layernorm;
  Scaling scale;
};

TaskConfig small_task(TaskKind kind) {
  TaskConfig t;
  t.kind = kind;
  t.n_pairs = 3;
  t.n_keys = 5;
  t.n_values = 4;
  t.seq_len = 6;
  t.n_content = 4;
  return t;
}

ModelConfig small_model(const ModelCase& c) {
  ModelConfig m;
  m.d_model = 6;
  m.d_k = 5;
  m.n_layers = c.layers;
  m.layernorm = c.layernorm;
  m.scale = c.scale;
  return m;
}

class ModelGradcheck : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGradcheck, EveryParameter) {
  const auto& c = GetParam();
  const TaskConfig task = small_task(c.task);
  Model<double> model(small_model(c), task);
  model.init(3);
  const Batch batch = make_batch(task, 3, 99);
  auto loss = [&] { return model.forward(batch).loss; };
  loss();
  model.zero_grad();
  model.backward();
  for (auto* p : model.params()) {
    const auto analytic = p->grad;
    check_gradient(p->name, p->value, analytic, loss, 20);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ModelGradcheck,
    ::testing::Values(ModelCase{TaskKind::associative_recall, 1, true, ScalePolicy::inv_sqrt_d()},
                      ModelCase{TaskKind::associative_recall, 2, true, ScalePolicy::none()},
                      ModelCase{TaskKind::associative_recall, 2, false, Scaling::qk_norm_temperature()},
                      ModelCase{TaskKind::copy_after_marker, 1, false, ScalePolicy::inv_d()},
                      ModelCase{TaskKind::copy_after_marker, 2, true, Scaling::qk_norm_temperature()},
                      ModelCase{TaskKind::associative_recall, 2, true, Scaling::additive_score()}),
    [](const auto& info) {
      return std::string(to_string(info.param.task)) + "_L" + std::to_string(info.param.layers) +
             (info.param.layernorm ? "_ln_" : "_noln_") + info.param.scale.name();
    });

// The float model runs attention through the engine (the code under study). Its
// loss and gradients must match the double model's: relative error of each
// parameter's gradient ≤ 1e−3 of that gradient's norm (float32 rounding through a
// few hundred operations, far below any effect the study reports).
TEST(FloatModel, MatchesDoubleModel) {
  for (const Scaling& scale :
       std::initializer_list<Scaling>{ScalePolicy::none(), ScalePolicy::inv_sqrt_d(), Scaling::qk_norm_temperature()}) {
    ModelCase c{TaskKind::associative_recall, 2, true, scale};
    const TaskConfig task = small_task(c.task);
    ModelConfig mc = small_model(c);
    mc.d_k = 16;
    Model<double> md(mc, task);
    Model<float> mf(mc, task);
    md.init(5);
    mf.init(5);
    const Batch batch = make_batch(task, 4, 17);
    const double ld = md.forward(batch).loss, lf = mf.forward(batch).loss;
    EXPECT_NEAR(lf, ld, 1e-5 * (1 + ld)) << scale.name();
    md.zero_grad();
    mf.zero_grad();
    md.backward();
    mf.backward();
    const auto pd = md.params();
    const auto pf = mf.params();
    ASSERT_EQ(pd.size(), pf.size());
    for (size_t k = 0; k < pd.size(); ++k) {
      const auto d = test::gradient_distance(pf[k]->grad, pd[k]->grad);
      EXPECT_LE(d.diff, 1e-3 * d.norm + 1e-7) << pd[k]->name << " " << scale.name();
    }
  }
}

TEST(Model, StatsComeFromTheEngine) {
  const TaskConfig task = small_task(TaskKind::copy_after_marker);
  ModelConfig mc = small_model({TaskKind::copy_after_marker, 2, true, ScalePolicy::inv_sqrt_d()});
  Model<float> m(mc, task);
  m.init(1);
  const Batch batch = make_batch(task, 3, 1);
  const ForwardStats s = m.forward(batch, true);
  ASSERT_EQ(s.layers.size(), 2u);
  for (const auto& layer : s.layers) {
    // The last block queries from the last position only.
    const size_t rows = &layer == &s.layers.back() ? 3u : static_cast<size_t>(3 * task.seq_len);
    ASSERT_EQ(layer.entropy.size(), rows);
    for (size_t i = 0; i < layer.entropy.size(); ++i) {
      EXPECT_GE(layer.entropy[i], 0.0f);
      EXPECT_LE(layer.entropy[i], std::log(static_cast<float>(task.seq_len)) + 1e-5f);
      EXPECT_GT(layer.max_prob[i], 0.0f);
      EXPECT_LE(layer.max_prob[i], 1.0f + 1e-6f);
      EXPECT_GE(layer.jacobian_fro_sq[i], 0.0f);
    }
  }
}

// The logits the coordinate check reads (AttentionLayer::logits) are the ones the engine
// took the softmax of: their row softmax has the engine's largest probability and entropy,
// under a policy and under qk-norm's temperature.
TEST(Model, LogitsAreTheOnesTheEngineUsed) {
  const TaskConfig task = small_task(TaskKind::copy_after_marker);
  for (const Scaling& scale : {Scaling(ScalePolicy::inv_d()), Scaling::qk_norm_temperature()}) {
    ModelConfig mc = small_model({TaskKind::copy_after_marker, 1, true, scale});
    Model<float> m(mc, task);
    m.init(3);
    const Batch batch = make_batch(task, 4, 2);
    const ForwardStats s = m.forward(batch, true);
    const std::vector<double> logits = m.layers().back().logits();  // [B·1, N]
    const auto n = static_cast<size_t>(task.seq_len);
    ASSERT_EQ(logits.size(), 4 * n);
    for (size_t r = 0; r < 4; ++r) {
      double top = -INFINITY, sum = 0, entropy = 0;
      for (size_t j = 0; j < n; ++j) top = std::max(top, logits[r * n + j]);
      for (size_t j = 0; j < n; ++j) sum += std::exp(logits[r * n + j] - top);
      for (size_t j = 0; j < n; ++j) {
        const double p = std::exp(logits[r * n + j] - top) / sum;
        entropy -= p > 0 ? p * std::log(p) : 0;
      }
      EXPECT_NEAR(1 / sum, s.layers.back().max_prob[r], 1e-5) << scale.name() << " row " << r;
      EXPECT_NEAR(entropy, s.layers.back().entropy[r], 1e-4) << scale.name() << " row " << r;
    }
  }
}

TEST(Model, RejectsBadConfigs) {
  const TaskConfig task = small_task(TaskKind::associative_recall);
  ModelConfig mc;
  mc.n_layers = 3;
  EXPECT_THROW(Model<float>(mc, task), Error);
  mc.n_layers = 1;
  mc.d_k = 0;
  EXPECT_THROW(Model<float>(mc, task), Error);
  TaskConfig bad = task;
  bad.n_keys = 2;  // fewer keys than pairs
  EXPECT_THROW(Model<float>(ModelConfig{}, bad), Error);
}

}  // namespace
}  // namespace attnlab::train
