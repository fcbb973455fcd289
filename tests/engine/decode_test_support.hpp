#pragma once
// What the decode path's tests share: the seed, the limits of their random decode shapes,
// the fused step's two ways of asking for K's and V's lines (set while a guard lives),
// and the forward's O and L on a number of threads.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "same_bits.hpp"

namespace attnlab::test::decode {

namespace al = attnlab;

// Seeded: set ATTNLAB_TEST_SEED to explore others; failures print the seed.
inline uint64_t base_seed() {
  const char* s = std::getenv("ATTNLAB_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261214u;
}

// Shapes that take the decode path (decode_path.hpp): Nq ≤ kBr queries against Nk ≥ 2·Nq
// keys; most of them against more than one chunk of keys, some against a short cache.
inline al::test::ProblemLimits decode_limits(int n) {
  al::test::ProblemLimits lim;
  lim.dims = {1, 64, 80, 128, 256};
  lim.min_seq_k = al::engine::kDecodeChunkMin + 1;
  if (n % 30 == 0) {  // a long cache: dozens of chunks merge
    lim.max_seq_q = 2;
    lim.min_seq_k = 5000;
    lim.max_seq_k = 20000;
    lim.max_batch = 1;
    lim.max_kv_heads = 1;
    lim.max_group = 2;
    lim.dims = {1, 64, 80, 128};
  } else if (n % 4 == 1) {  // a chunk of new queries (chunked prefill)
    lim.max_seq_q = al::engine::kBr;
    lim.max_seq_k = 1200;
    lim.max_batch = 1;
    lim.max_kv_heads = 1;
    lim.max_group = 2;
    lim.dims = {1, 64, 80, 128};
  } else if (n % 4 == 3) {  // a short cache: one chunk, no merge
    lim.max_seq_q = 8;
    lim.min_seq_k = 16;
    lim.max_seq_k = al::engine::kDecodeChunkMin;
    lim.max_batch = 2;
    lim.max_kv_heads = 2;
    lim.max_group = 4;
  } else {  // decoding steps: 2 or 3 chunks
    lim.max_seq_q = 4;
    lim.max_seq_k = 1400;
    lim.max_batch = 2;
    lim.max_kv_heads = 2;
    lim.max_group = 4;
  }
  return lim;
}

// Decoding shapes for the fused step's tests: d from 1 (K packed, not read in place, so
// the tile-at-a-time step) to 256, more than one chunk of keys (a tenth of the problems
inline al::test::ProblemLimits fused_step_limits(int n, int64_t max_seq_q, int64_t max_group) {
  al::test::ProblemLimits lim;
  lim.dims = {1, 16, 64, 80, 128, 256};
  lim.max_seq_q = max_seq_q;
  lim.max_group = max_group;
  lim.min_seq_k = al::engine::kDecodeChunkMin + 1;
  lim.max_seq_k = n % 10 == 0 ? 12000 : 2000;
  lim.max_batch = 2;
  lim.max_kv_heads = 2;
  lim.p_bool_mask = lim.p_additive_mask = 0;
  return lim;
}

// The fused step's two ways of asking for K's and V's lines (decode_strategy.hpp,
// FusedReads::beside_loads): beside each load where K and V fit the last-level cache or
// a K/V head has 5 rows or more, spread over each block elsewhere. The thresholds
// (fused_beside_loads_max_kv_bytes, fused_beside_loads_min_rows) set to their extremes
// send every call one way or the other while they live.
struct RequestsFor {
  int64_t saved_bytes = al::engine::testing::fused_beside_loads_max_kv_bytes().load(),
          saved_rows = al::engine::testing::fused_beside_loads_min_rows().load();
  explicit RequestsFor(bool beside_loads) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    al::engine::testing::fused_beside_loads_max_kv_bytes().store(beside_loads ? kMax : 0);
    al::engine::testing::fused_beside_loads_min_rows().store(beside_loads ? saved_rows : kMax);
  }
  ~RequestsFor() {
    al::engine::testing::fused_beside_loads_max_kv_bytes().store(saved_bytes);
    al::engine::testing::fused_beside_loads_min_rows().store(saved_rows);
  }
};

inline std::vector<al::Tensor<float>> forward_out_lse(const al::test::Problem& p, int threads) {
  const al::test::FloatProblem fp(p);
  auto f =
      al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), fp.options(p), al::ComputeConfig{threads});
  return {f.out, f.lse};
}

inline std::vector<al::Tensor<float>> expect_same_bits_for_any_threads(const al::test::Problem& p) {
  auto one = forward_out_lse(p, 1);
  for (int threads : {2, 3}) {
    const auto other = forward_out_lse(p, threads);
    for (size_t x = 0; x < one.size(); ++x)
      EXPECT_TRUE(al::test::same_bits(one[x], other[x]))
          << al::test::kQuantity[x] << ": " << threads << " threads against 1";
  }
  return one;
}

inline std::vector<al::Tensor<float>> forward_with_requests(const al::test::Problem& p, bool beside_loads,
                                                            int threads) {
  const RequestsFor requests(beside_loads);
  return forward_out_lse(p, threads);
}

}  // namespace attnlab::test::decode
