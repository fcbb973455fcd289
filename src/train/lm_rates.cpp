// Learning rates of the language-model study: the defaults, the tuning sweep's grid and study,
// and the rates the tuning chose (docs/lm.md, "Learning rates"), which the reduced study reuses.
#include "attnlab/lm_study.hpp"

namespace attnlab::train::lm {

double default_lm_lr(LmOptimizer optimizer) { return optimizer == LmOptimizer::adamw ? 3e-3 : 0.1; }

std::vector<double> lm_tuning_grid(LmOptimizer optimizer) {
  // A factor of about 3 apart from nanoGPT's character-level rate (1e-3 at 6 layers, 384 wide)
  // upwards: smaller models and 300 steps take larger rates (at d_k = 64, 3e-4 was the worst
  // of 3e-4…1e-2 for every cell, 1e-2 the best for 1/√d_k). SGD's gradients are not
  // normalised: its grid sits higher.
  if (optimizer == LmOptimizer::adamw) return {1e-3, 3e-3, 1e-2, 3e-2};
  return {0.03, 0.1, 0.3};
}

LmStudyConfig lm_tuning_study(const LmStudyConfig& config, int64_t seeds, uint64_t first_seed) {
  LmStudyConfig t = config;
  t.seeds = seeds;
  t.first_seed = first_seed;
  t.tuned.clear();
  t.adamw_lrs = lm_tuning_grid(LmOptimizer::adamw);
  t.sgd_lrs = lm_tuning_grid(LmOptimizer::sgd);
  return t;
}

// Chosen by the full study, `mpirun -np 2 attnlab run lm --full` (seed 0): every cell's lowest
// final validation loss of one tuning seed (501) at each rate of lm_tuning_grid, 300 steps. Its
// lm_tuning.csv (docs/lm/full_tuning.csv) holds every rate's loss; docs/lm.md the table.
const std::vector<LmTunedRate>& lm_cached_rates() {
  static const std::vector<LmTunedRate> rates{
      {LmInit::gpt2, LmOptimizer::adamw, 16, "inv_sqrt_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 16, "none", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 16, "inv_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 16, "alpha2", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 16, "alpha4", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 16, "qknorm", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "inv_sqrt_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "none", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "inv_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "alpha2", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "alpha4", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 64, "qknorm", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "inv_sqrt_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "none", 0.001},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "inv_d", 0.01},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "alpha2", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "alpha4", 0.003},
      {LmInit::gpt2, LmOptimizer::adamw, 256, "qknorm", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 16, "inv_sqrt_d", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 16, "none", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 16, "inv_d", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 16, "alpha2", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 16, "alpha4", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 16, "qknorm", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 64, "inv_sqrt_d", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 64, "none", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 64, "inv_d", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 64, "alpha2", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 64, "alpha4", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 64, "qknorm", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 256, "inv_sqrt_d", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 256, "none", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 256, "inv_d", 0.01},
      {LmInit::unit, LmOptimizer::adamw, 256, "alpha2", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 256, "alpha4", 0.003},
      {LmInit::unit, LmOptimizer::adamw, 256, "qknorm", 0.003},
      {LmInit::gpt2, LmOptimizer::sgd, 16, "inv_sqrt_d", 0.1},
      {LmInit::gpt2, LmOptimizer::sgd, 16, "none", 0.1},
      {LmInit::gpt2, LmOptimizer::sgd, 64, "inv_sqrt_d", 0.1},
      {LmInit::gpt2, LmOptimizer::sgd, 64, "none", 0.1},
      {LmInit::gpt2, LmOptimizer::sgd, 256, "inv_sqrt_d", 0.1},
      {LmInit::gpt2, LmOptimizer::sgd, 256, "none", 0.1},
  };
  return rates;
}

}  // namespace attnlab::train::lm
