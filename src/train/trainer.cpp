// One training run: float32 model, attention through the engine, evaluation on a
// held-out set every eval_every steps with the engine's row diagnostics.
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"
#include "lab/interrupt.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"
#include "train/run_setup.hpp"

namespace attnlab::train {

void check_run_config(const RunConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("train: " + what);
  };
  need(c.steps >= 1 && c.steps <= 10'000'000, "steps must be in [1, 1e7], got " + std::to_string(c.steps));
  need(c.warmup >= 0 && c.warmup <= c.steps, "warmup must be in [0, steps], got " + std::to_string(c.warmup));
  need(c.batch >= 1 && c.batch <= 65536, "batch must be in [1, 65536], got " + std::to_string(c.batch));
  need(c.eval_every >= 1, "eval_every must be ≥ 1, got " + std::to_string(c.eval_every));
  need(c.eval_examples >= 1 && c.eval_examples <= 1 << 20, "eval_examples must be in [1, 2^20]");
  need(std::isfinite(c.lr) && c.lr >= 0, "lr must be finite and ≥ 0 (0 = default)");
  need(std::isfinite(c.qk_lr_scale) && c.qk_lr_scale > 0, "qk_lr_scale must be finite and > 0");
  need(c.threshold > 0 && c.threshold <= 1, "threshold must be in (0, 1]");
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Evaluation {
  double loss = 0, accuracy = 0, entropy = 0, jacobian_fro = 0, max_prob = 0, max_logit = 0;
};

Evaluation evaluate(Model<float>& model, const Batch& eval) {
  const ForwardStats f = model.forward(eval, true);
  Evaluation e;
  e.loss = f.loss;
  e.accuracy = static_cast<double>(f.correct) / static_cast<double>(eval.batch);
  double n = 0;
  for (const auto& layer : f.layers)
    for (size_t i = 0; i < layer.entropy.size(); ++i) {
      e.entropy += layer.entropy[i];
      e.jacobian_fro += std::sqrt(std::max(0.0f, layer.jacobian_fro_sq[i]));
      e.max_prob += layer.max_prob[i];
      n += 1;
    }
  for (double x : model.layers().back().logits()) e.max_logit = std::max(e.max_logit, std::abs(x));
  e.entropy /= n;
  e.jacobian_fro /= n;
  e.max_prob /= n;
  return e;
}

}  // namespace

RunResult train_run(const RunConfig& config) {
  check_run_config(config);
  const auto start = std::chrono::steady_clock::now();
  RunResult r;
  r.config = config;
  const double peak = config.lr > 0 ? config.lr : default_lr(config.optimizer);
  Model<float> model(config.model, config.task);
  model.init(mix(config.seed));
  OptimizerSettings settings;
  settings.qk_lr_scale = config.qk_lr_scale;
  Optimizer opt(config.optimizer, model.params(), settings);
  const Batch eval = make_batch(config.task, config.eval_examples, kEvalSeed);

  double loss_sum = 0, grad_qk = kNaN;
  int64_t loss_count = 0;
  auto record = [&](int64_t step) {
    CurvePoint p;
    p.step = step;
    p.train_loss = loss_count > 0 ? loss_sum / static_cast<double>(loss_count) : kNaN;
    p.grad_qk = grad_qk;
    p.temperature = model.layers().front().scale(sequence_length(config.task));
    const Evaluation e = evaluate(model, eval);
    p.eval_loss = e.loss;
    p.eval_accuracy = e.accuracy;
    p.entropy = e.entropy;
    p.jacobian_fro = e.jacobian_fro;
    p.max_prob = e.max_prob;
    p.max_logit = e.max_logit;
    r.curve.push_back(p);
    if (r.steps_to_threshold < 0 && e.accuracy >= config.threshold) r.steps_to_threshold = step;
    loss_sum = 0;
    loss_count = 0;
  };

  record(0);
  for (int64_t step = 0; step < config.steps; ++step) {
    lab::util::throw_if_stop_requested();  // Ctrl-C (lab/interrupt.hpp)
    const Batch batch = training_batch(config, step);
    model.zero_grad();
    double loss = kNaN;
    try {
      loss = model.forward(batch).loss;
      if (std::isfinite(loss)) model.backward();
    } catch (const Error&) {
      // Non-finite activations reach the engine's input checks (or the temperature
      // overflows): the run has diverged. Anything else is a real error.
      loss = kNaN;
    }
    if (!std::isfinite(loss)) {
      r.diverged = true;
      break;
    }
    double g2 = 0;
    for (const auto& layer : model.layers_)
      for (const auto* p : {&layer.w_q, &layer.w_k})
        for (float g : p->grad) g2 += static_cast<double>(g) * g;
    grad_qk = std::sqrt(g2);
    loss_sum += loss;
    ++loss_count;
    opt.step(learning_rate(peak, step, config.steps, config.warmup));
    const int64_t done = step + 1;
    if (done % config.eval_every == 0 || done == config.steps) {
      try {
        record(done);
      } catch (const Error&) {
        r.diverged = true;
        break;
      }
      if (!std::isfinite(r.curve.back().eval_loss)) {
        r.diverged = true;
        break;
      }
    }
  }
  r.final_accuracy = r.diverged ? 0.0 : r.curve.back().eval_accuracy;
  r.final_loss = r.diverged ? kNaN : r.curve.back().eval_loss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace attnlab::train
