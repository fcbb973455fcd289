// Learning rates per cell: the tuning sweep, the choice of each cell's best rate, and the
// rates the full sweep chose (reused by the quick study of the report).
#include <algorithm>
#include <cmath>

#include "attnlab/train.hpp"

namespace attnlab::train {

std::vector<double> tuning_grid(OptimizerKind kind) {
  // Around the defaults (Adam 3e-3, SGD 0.03), a factor ~3 apart; SGD reaches higher
  // because 1/d_k's gradient is small and SGD does not normalise it (docs/training.md).
  if (kind == OptimizerKind::adam) return {3e-4, 1e-3, 3e-3, 1e-2};
  return {0.01, 0.03, 0.1, 0.3, 1.0};
}

StudyConfig tuning_study(const StudyConfig& config, int64_t seeds, uint64_t first_seed) {
  StudyConfig t = config;
  t.seeds = seeds;
  t.first_seed = first_seed;
  t.tuned.clear();
  t.adam_lrs = tuning_grid(OptimizerKind::adam);
  t.sgd_lrs = tuning_grid(OptimizerKind::sgd);
  return t;
}

std::vector<TunedRate> best_rates(const std::vector<CellSummary>& cells, double threshold) {
  std::vector<TunedRate> best;
  std::vector<const CellSummary*> chosen;
  // Better: learns and keeps it, then more runs reaching the threshold, then fewer median
  // steps (censored medians are budget + one evaluation, so they sort last), then higher
  // mean final accuracy, then the smaller rate.
  auto better = [threshold](const CellSummary& a, const CellSummary& b) {
    const bool a_keeps = a.mean_final_accuracy >= threshold, b_keeps = b.mean_final_accuracy >= threshold;
    if (a_keeps != b_keeps) return a_keeps;
    if (a.reached != b.reached) return a.reached > b.reached;
    if (a.median_steps != b.median_steps) return a.median_steps < b.median_steps;
    if (a.mean_final_accuracy != b.mean_final_accuracy) return a.mean_final_accuracy > b.mean_final_accuracy;
    return a.lr < b.lr;
  };
  for (const auto& c : cells) {
    size_t i = 0;
    for (; i < best.size(); ++i)
      if (best[i].task == c.task && best[i].init == c.init && best[i].optimizer == c.optimizer &&
          best[i].d_k == c.d_k && best[i].scale == c.scale.name())
        break;
    if (i == best.size()) {
      best.push_back({c.task, c.init, c.optimizer, c.d_k, c.scale.name(), c.lr});
      chosen.push_back(&c);
    } else if (better(c, *chosen[i])) {
      best[i].lr = c.lr;
      chosen[i] = &c;
    }
  }
  return best;
}

// Chosen by `attnlab run train --full` (recall task, unit and small init, d_k 16…1024, 3
// tuning seeds from 501; docs/training.md, "Learning rates"). Regenerate with the same
// command: its train_tuning.csv and train_cells.csv (column lr) hold them.
const std::vector<TunedRate>& cached_rates() {
  static const std::vector<TunedRate> rates{
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 16, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 64, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 128, "none", 0.003},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 128, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 128, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 128, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "none", 0.003},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 256, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "none", 0.003},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::adam, 1024, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 16, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 16, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 16, "inv_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 16, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 64, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 64, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 64, "inv_d", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 64, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 128, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 128, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 128, "inv_d", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 128, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 256, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 256, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 256, "inv_d", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 256, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 1024, "none", 0.01},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 1024, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 1024, "inv_d", 0.3},
      {TaskKind::associative_recall, InitMode::unit, OptimizerKind::sgd, 1024, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 16, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 16, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 16, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 16, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 64, "none", 0.003},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 64, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 64, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 64, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 128, "none", 0.003},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 128, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 128, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 128, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 256, "none", 0.003},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 256, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 256, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 256, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 1024, "none", 0.001},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 1024, "inv_sqrt_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 1024, "inv_d", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::adam, 1024, "qknorm", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 16, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 16, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 16, "inv_d", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 16, "qknorm", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 64, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 64, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 64, "inv_d", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 64, "qknorm", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 128, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 128, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 128, "inv_d", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 128, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 256, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 256, "inv_sqrt_d", 0.03},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 256, "inv_d", 0.3},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 256, "qknorm", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 1024, "none", 0.01},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 1024, "inv_sqrt_d", 0.1},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 1024, "inv_d", 0.3},
      {TaskKind::associative_recall, InitMode::small, OptimizerKind::sgd, 1024, "qknorm", 0.1},
  };
  return rates;
}

}  // namespace attnlab::train
