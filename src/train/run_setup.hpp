#pragma once
// What every run of the training study shares (private to src/train): the check of a run's
// configuration and the seeds of its init, batches and held-out set.
#include <cstdint>

#include "attnlab/train.hpp"

namespace attnlab::train {

// Throws attnlab::Error naming the bad field of a run's configuration.
void check_run_config(const RunConfig& config);

// splitmix64: decorrelates the seeds of init, training batches and the held-out set.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The held-out set depends on the task only, so every run is scored on the same examples.
inline constexpr uint64_t kEvalSeed = 0x5EED0E7A1ull;

// The training batch of step `step` (0-based) of a run with this seed.
inline Batch training_batch(const RunConfig& config, int64_t step) {
  return make_batch(config.task, config.batch, mix(mix(config.seed) ^ mix(static_cast<uint64_t>(step) + 1)));
}

}  // namespace attnlab::train
