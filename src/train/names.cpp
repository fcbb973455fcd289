// Names of the training enums, the learning-rate schedule and default learning rates.
#include <cmath>
#include <numbers>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {

const char* to_string(TaskKind task) { return task == TaskKind::associative_recall ? "recall" : "copy"; }
TaskKind parse_task(const std::string& text) {
  if (text == "recall") return TaskKind::associative_recall;
  if (text == "copy") return TaskKind::copy_after_marker;
  throw Error("task: unknown task '" + text + "' (expected recall or copy)");
}

const char* to_string(InitMode mode) {
  switch (mode) {
    case InitMode::unit: return "unit";
    case InitMode::small: return "small";
    case InitMode::quarter: return "quarter";
  }
  return "unit";
}
InitMode parse_init_mode(const std::string& text) {
  for (InitMode m : {InitMode::unit, InitMode::small, InitMode::quarter})
    if (text == to_string(m)) return m;
  throw Error("init: unknown init '" + text + "' (expected unit, small or quarter)");
}

const char* to_string(OptimizerKind kind) { return kind == OptimizerKind::adam ? "adam" : "sgd"; }
OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "adam") return OptimizerKind::adam;
  if (text == "sgd") return OptimizerKind::sgd;
  throw Error("optimizer: unknown optimiser '" + text + "' (expected adam or sgd)");
}

double default_lr(OptimizerKind kind) { return kind == OptimizerKind::adam ? 3e-3 : 0.03; }

double learning_rate(double peak, int64_t step, int64_t total_steps, int64_t warmup) {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay = std::max<int64_t>(total_steps - warmup, 1);
  const double t = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay));
  return peak * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
}

}  // namespace attnlab::train
