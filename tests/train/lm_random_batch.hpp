#pragma once
// A batch of full-context windows of random tokens and targets, for the GPT's tests.
#include <random>

#include "train/gpt.hpp"

namespace attnlab::train::test {

inline lm::LmBatch random_batch(const lm::GptConfig& c, int64_t B, uint64_t seed) {
  std::mt19937_64 rng(seed);
  lm::LmBatch b;
  b.batch = B;
  b.seq = c.context;
  for (int64_t i = 0; i < B * c.context; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab)));
    b.targets.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab)));
  }
  return b;
}

}  // namespace attnlab::train::test
