// The coordinate check of μP (Yang et al., Tensor Programs V): the attention logits of a
// model at initialisation and through its first optimiser steps, at a constant learning rate.
#include <cmath>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"
#include "train/run_setup.hpp"

namespace attnlab::train {

LogitTrace trace_logits(const RunConfig& config, int64_t steps) {
  check_run_config(config);
  if (steps < 1 || steps > 100'000) throw Error("train: coordinate check steps must be in [1, 1e5], got " + std::to_string(steps));
  const double lr = config.lr > 0 ? config.lr : default_lr(config.optimizer);
  Model<float> model(config.model, config.task);
  model.init(mix(config.seed));
  OptimizerSettings settings;
  settings.qk_lr_scale = config.qk_lr_scale;
  Optimizer opt(config.optimizer, model.params(), settings);
  const Batch probe = make_batch(config.task, config.eval_examples, kEvalSeed);
  LogitTrace trace;
  std::vector<double> initial;  // S_0 [probe rows · keys]
  auto record = [&] {
    model.forward(probe);
    const std::vector<double> s = model.layers().back().logits();
    if (initial.empty()) initial = s;
    double s2 = 0, d2 = 0;
    for (size_t i = 0; i < s.size(); ++i) s2 += s[i] * s[i], d2 += (s[i] - initial[i]) * (s[i] - initial[i]);
    const double count = static_cast<double>(s.size());
    trace.rms.push_back(std::sqrt(s2 / count));
    trace.change.push_back(std::sqrt(d2 / count));
    return std::isfinite(s2);
  };
  if (!record()) return trace.diverged = true, trace;
  for (int64_t step = 0; step < steps; ++step) {
    model.zero_grad();
    const double loss = model.forward(training_batch(config, step)).loss;
    if (!std::isfinite(loss)) return trace.diverged = true, trace;
    model.backward();
    opt.step(lr);
    if (!record()) return trace.diverged = true, trace;
  }
  return trace;
}

}  // namespace attnlab::train
