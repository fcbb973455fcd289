// The decode path (src/engine/decode_path.hpp, decode_strategy.hpp): few query rows against a
// long key/value cache, with the query heads of a group together and the keys split
// into chunks merged in a fixed order. Its results obey the engine's accuracy rule
// (engine_check.hpp) on random decode (Nq ≤ 4) and chunked-prefill (Nq ≤ 64) shapes
// with every option, are bitwise identical for 1, 2 and 3 threads, and bad input gets
// the errors it got before. A test hook (last_forward_path) proves these shapes ran
// the decode path: the engine chooses it itself, the API has no say.
// Seeded: set ATTNLAB_TEST_SEED to explore others; failures print the seed.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine_path.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "same_bits.hpp"

namespace al = attnlab;
using al::engine::ForwardPath;

namespace {

uint64_t base_seed() {
  const char* s = std::getenv("ATTNLAB_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261214u;
}

// Shapes that take the decode path (decode_path.hpp): Nq ≤ kBr queries against Nk ≥ 2·Nq
// keys; most of them against more than one chunk of keys, some against a short cache.
al::test::ProblemLimits decode_limits(int n) {
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
// dozens of them), no boolean or additive mask (those take the tile-at-a-time step).
al::test::ProblemLimits fused_step_limits(int n, int64_t max_seq_q, int64_t max_group) {
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

}  // namespace

TEST(EngineDecode, RandomDecodeAndChunkShapesWithinTheAccuracyRule) {
  const uint64_t seed = base_seed();
  constexpr int kProblems = 120;
  int gqa = 0, padded = 0, masked = 0, bottom_right = 0, top_left = 0, row_scale = 0, strided = 0, long_cache = 0,
      chunk = 0, short_cache = 0, decode_path = 0, fused = 0;
  std::set<al::ScalePolicy::Kind> policies;
  std::set<int64_t> dims;
  double worst_ratio[5] = {};
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    const al::test::Problem p = al::test::random_problem(rng, decode_limits(n));
    const bool use_strides = n % 5 == 2;
    SCOPED_TRACE("seed " + std::to_string(seed + n) + (use_strides ? " strided: " : ": ") + p.describe());
    gqa += p.Hq != p.Hkv;
    padded += !p.key_lengths.empty();
    masked += p.bool_mask.numel() > 0 || p.additive_mask.numel() > 0;
    bottom_right += p.causal == al::Causal::bottom_right;
    top_left += p.causal == al::Causal::top_left;
    row_scale += p.scale.depends_on_n();
    strided += use_strides;
    long_cache += p.Nk >= 5000;
    short_cache += p.Nk <= al::engine::kDecodeChunkMin;
    chunk += p.Nq > 16;
    policies.insert(p.scale.kind());
    dims.insert(p.d);
    const int64_t fused_before = al::engine::testing::tile_counts().decode_fused.load();
    const auto e = al::test::check_engine_against_reference(p, use_strides, al::ComputeConfig{2});
    decode_path += al::test::last_forward_path() == ForwardPath::decode;
    fused += al::engine::testing::tile_counts().decode_fused.load() > fused_before;
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    for (int x = 0; x < 5; ++x)
      if (e.naive[x] > 0) worst_ratio[x] = std::max(worst_ratio[x], e.engine[x] / e.naive[x]);
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  for (int x = 0; x < 5; ++x)
    std::printf("worst error ratio on %s: engine/naive %.3f (errors below the floor included)\n",
                al::test::kQuantity[x], worst_ratio[x]);
  EXPECT_EQ(decode_path, kProblems);
  EXPECT_GT(gqa, kProblems / 4);
  EXPECT_GT(padded, kProblems / 6);
  EXPECT_GT(masked, kProblems / 4);
  EXPECT_GT(bottom_right, kProblems / 10);
  EXPECT_GT(top_left, kProblems / 10);
  EXPECT_GT(row_scale, kProblems / 20);
  EXPECT_GT(strided, kProblems / 10);
  EXPECT_GE(long_cache, 3);
  EXPECT_GT(short_cache, kProblems / 6);
  EXPECT_GT(chunk, kProblems / 10);
  // Grouped heads decoding (2 to 4 rows per key/value head, to 8 on AVX-512, no score
  // treatment) takes the fused step on its whole tiles; the rest the tile-at-a-time step
  // (decode_strategy.hpp).
  EXPECT_GE(fused, 8);
  EXPECT_LT(fused, kProblems);
  EXPECT_EQ(dims, (std::set<int64_t>{1, 64, 80, 128, 256}));
  EXPECT_EQ(policies.size(), 6u) << "every scale policy";
}

// Grouped heads decoding without a score treatment, the shapes of the fused step
// (decode_fused-inl.h): 2 to 4 rows per key/value head on whole tiles, the tile-at-a-time step
// on partial ones (a cache length or the cache's end inside a tile) and on everything else.
// Both within the accuracy rule, on long caches too (dozens of chunks merged).
TEST(EngineDecode, GroupedHeadsFusedStepWithinTheAccuracyRule) {
  const uint64_t seed = base_seed() + 3000;
  constexpr int kProblems = 60;
  int fused = 0, padded = 0, row_scale = 0;
  std::set<int64_t> dims;
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    const al::test::Problem p = al::test::random_problem(rng, fused_step_limits(n, /*max_seq_q=*/2, /*max_group=*/4));
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    padded += !p.key_lengths.empty();
    row_scale += p.scale.depends_on_n();
    dims.insert(p.d);
    const int64_t fused_before = al::engine::testing::tile_counts().decode_fused.load();
    al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    fused += al::engine::testing::tile_counts().decode_fused.load() > fused_before;
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  EXPECT_GT(fused, kProblems / 4);
  EXPECT_GT(padded, kProblems / 6);
  EXPECT_GT(row_scale, kProblems / 20);
  EXPECT_EQ(dims.size(), 6u);
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

// The forward's O and L of a problem on `threads` threads.
std::vector<al::Tensor<float>> forward_out_lse(const al::test::Problem& p, int threads) {
  const al::test::FloatProblem fp(p);
  auto f =
      al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), fp.options(p), al::ComputeConfig{threads});
  return {f.out, f.lse};
}

// Expects the forward's O and L bitwise the same on 2 and 3 threads as on 1; returns 1's.
std::vector<al::Tensor<float>> expect_same_bits_for_any_threads(const al::test::Problem& p) {
  auto one = forward_out_lse(p, 1);
  for (int threads : {2, 3}) {
    const auto other = forward_out_lse(p, threads);
    for (size_t x = 0; x < one.size(); ++x)
      EXPECT_TRUE(al::test::same_bits(one[x], other[x])) << al::test::kQuantity[x] << ": " << threads << " threads against 1";
  }
  return one;
}

// The forward's O and L of a problem, with the fused step's requests one way or the other.
std::vector<al::Tensor<float>> forward_with_requests(const al::test::Problem& p, bool beside_loads, int threads) {
  const RequestsFor requests(beside_loads);
  return forward_out_lse(p, threads);
}

// One query row per K/V head (decoding without grouped heads) takes the fused step on the
// AVX-512 targets, whatever the cache's size (decode_strategy.hpp), and never
// elsewhere (AVX2 keeps the tile-at-a-time step). Within the accuracy rule with its
// requests either way (padding, every scale policy, d from 1 to 256, caches of up to 24
// chunks merged); by default those whose K and V fit the last-level cache, most of them,
// ask beside the loads, the others spread (counted). Bitwise the same for 1, 2 and 3 threads.
TEST(EngineDecode, OneQueryRowFusedStepWithinTheAccuracyRule) {
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  const uint64_t seed = base_seed() + 5000;
  constexpr int kProblems = 40;
  int fused = 0, beside_at_default = 0, padded = 0, row_scale = 0;
  std::set<int64_t> dims;
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    const al::test::Problem p = al::test::random_problem(rng, fused_step_limits(n, /*max_seq_q=*/1, /*max_group=*/1));
    ASSERT_EQ(p.Hq, p.Hkv);
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    padded += !p.key_lengths.empty();
    row_scale += p.scale.depends_on_n();
    dims.insert(p.d);
    const auto& counts = al::engine::testing::tile_counts();
    int64_t before = counts.decode_fused.load(), beside_before = counts.decode_fused_beside_loads.load();
    al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    const bool took_fused = counts.decode_fused.load() > before;
    fused += took_fused;
    // By default beside the loads when K and V fit the last-level cache, as most of these do.
    const double kv_bytes = 4.0 * static_cast<double>(p.B * p.Hkv * p.Nk * (p.d + p.dv));
    const bool fits = kv_bytes <= static_cast<double>(al::engine::testing::fused_beside_loads_max_kv_bytes().load());
    const int64_t beside = counts.decode_fused_beside_loads.load() - beside_before;
    EXPECT_EQ(beside, fits ? counts.decode_fused.load() - before : 0) << kv_bytes << " bytes of K and V";
    beside_at_default += took_fused && beside > 0;
    if (!avx512) EXPECT_FALSE(took_fused) << "one row takes the fused step only on AVX-512 targets";
    {
      const RequestsFor spread(false);
      before = counts.decode_fused.load(), beside_before = counts.decode_fused_beside_loads.load();
      al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
      EXPECT_EQ(counts.decode_fused.load() > before, took_fused);
      EXPECT_EQ(counts.decode_fused_beside_loads.load(), beside_before) << "the requests spread";
    }
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  if (avx512) EXPECT_GT(fused, kProblems / 4);  // not d = 1 (K not read in place), masks or causal edges
  // Most of these caches fit a last-level cache of 8 MiB or more (sysfs may not tell: then none).
  if (avx512 && al::engine::testing::fused_beside_loads_max_kv_bytes().load() >= (int64_t{8} << 20))
    EXPECT_GT(beside_at_default, fused / 2);
  EXPECT_GT(padded, kProblems / 6);
  EXPECT_GT(row_scale, kProblems / 20);
  EXPECT_EQ(dims.size(), 6u);

  // Split-KV over 7 chunks, key padding: bitwise the same for 1, 2 and 3 threads, either way.
  std::mt19937_64 rng(seed);
  al::test::Problem p;
  p.B = 2, p.Hq = p.Hkv = 3, p.Nq = 1, p.Nk = 7 * al::engine::kDecodeChunkMin - 5, p.d = p.dv = 128;
  p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
  p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
  p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
  for (auto* t : {&p.q, &p.k, &p.v}) al::test::fill_normal(*t, rng);
  p.key_lengths = {p.Nk, p.Nk - 1000};
  for (const bool beside_loads : {true, false}) {
    const int64_t before = al::engine::testing::tile_counts().decode_fused.load();
    const auto one = forward_with_requests(p, beside_loads, 1);
    EXPECT_EQ(al::engine::testing::tile_counts().decode_fused.load() > before, avx512);
    for (int threads : {2, 3}) {
      const auto other = forward_with_requests(p, beside_loads, threads);
      for (size_t x = 0; x < one.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(one[x], other[x]))
            << al::test::kQuantity[x] << ": " << threads << " threads against 1, beside the loads " << beside_loads;
    }
  }
}

// The fused step's requests beside the loads and spread over each block ask for the same
// lines at other moments; the arithmetic is the same code in both, so the results must be
// bitwise the same: 1 to 4 rows per K/V head, padding, strided views, caches of up to 12
// chunks. On targets without the two ways (AVX2 and the rest) both runs take the same one.
TEST(EngineDecode, FusedStepRequestsBesideTheLoadsOrSpreadGiveBitwiseTheSameResults) {
  const uint64_t seed = base_seed() + 5500;
  constexpr int kProblems = 40;
  int fused = 0;
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    const al::test::Problem p = al::test::random_problem(rng, fused_step_limits(n, /*max_seq_q=*/2, /*max_group=*/4));
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    const int64_t before = al::engine::testing::tile_counts().decode_fused.load();
    const auto beside = forward_with_requests(p, true, 2);
    fused += al::engine::testing::tile_counts().decode_fused.load() > before;
    const auto spread = forward_with_requests(p, false, 2);
    for (size_t x = 0; x < beside.size(); ++x)
      EXPECT_TRUE(al::test::same_bits(beside[x], spread[x])) << al::test::kQuantity[x] << " beside the loads against spread";
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  // Not d = 1 (K not read in place), masks or causal edges, nor one row on AVX2 and the rest.
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  EXPECT_GE(fused, avx512 ? kProblems / 4 : kProblems / 6);
  std::printf("fused-step problems: %d of %d\n", fused, kProblems);
}

// Five to eight rows per K/V head (a group of 5 to 8 query heads, or a smaller group with
// two queries) take the fused step on AVX-512 from d = 128 on (decode_strategy.hpp,
// kFusedMaxRows: its 32 registers hold their accumulators), the tile-at-a-time step
// elsewhere. Within the accuracy rule, with d from 1 to 256, padding and long caches;
// asking beside the loads where K and V fit the cache (FusedReads::beside_loads), bitwise
// the same as from memory (row order with the queries held at d = 128, spread requests at
// d = 256); split-KV bitwise the same for 1, 2 and 3 threads, either way.
TEST(EngineDecode, FiveToEightRowsFusedOnAvx512WithinTheAccuracyRule) {
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  const uint64_t seed = base_seed() + 3500;
  constexpr int kProblems = 40;
  int fused = 0, padded = 0;
  std::set<int64_t> rows_seen, dims;
  const auto& counts = al::engine::testing::tile_counts();
  int n = 0, drawn = 0;
  for (; n < kProblems && drawn < 50 * kProblems; ++drawn) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(drawn));
    al::test::ProblemLimits lim = fused_step_limits(n, /*max_seq_q=*/2, /*max_group=*/8);
    lim.dims = {1, 64, 128, 192, 256};  // below 128 the tile-at-a-time step keeps them
    const al::test::Problem p = al::test::random_problem(rng, lim);
    const int64_t rows = p.Nq * (p.Hq / p.Hkv);
    if (rows < 5 || rows > 8) continue;  // the other tests' shapes
    ++n;
    SCOPED_TRACE("seed " + std::to_string(seed + drawn) + ": " + p.describe());
    rows_seen.insert(rows);
    padded += !p.key_lengths.empty();
    dims.insert(p.d);
    const int64_t before = counts.decode_fused.load(), beside_before = counts.decode_fused_beside_loads.load();
    al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    const bool took_fused = counts.decode_fused.load() > before;
    fused += took_fused;
    // By default beside the loads (these K and V fit the cache; larger ones: below).
    EXPECT_EQ(counts.decode_fused_beside_loads.load() - beside_before, counts.decode_fused.load() - before);
    if (!avx512) EXPECT_FALSE(took_fused) << "5 to 8 rows take the fused step only on AVX-512 targets";
    if (p.d < 128) EXPECT_FALSE(took_fused) << "5 to 8 rows take the fused step only from d = 128 on";
    if (took_fused) {
      const auto beside = forward_with_requests(p, true, 2), spread = forward_with_requests(p, false, 2);
      for (size_t x = 0; x < beside.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(beside[x], spread[x])) << al::test::kQuantity[x] << " beside the loads against from memory";
    }
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  EXPECT_EQ(n, kProblems) << "too few problems of 5 to 8 rows in " << drawn << " drawn";
  EXPECT_EQ(rows_seen, (std::set<int64_t>{5, 6, 7, 8}));
  if (avx512) EXPECT_GE(fused, kProblems / 5);  // not d < 128, causal edges or padded ends (12-14 of 40)
  EXPECT_GT(padded, kProblems / 6);
  EXPECT_EQ(dims.size(), 5u);
  std::printf("fused-step problems of 5 to 8 rows: %d of %d\n", fused, kProblems);

  // Split-KV over 5 chunks, key padding, 8 and 6 rows: bitwise the same for 1, 2 and 3 threads.
  for (const int64_t group : {8, 3}) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(group));
    al::test::Problem p;
    p.B = 2, p.Hkv = 2, p.Hq = 2 * group, p.Nq = group == 8 ? 1 : 2, p.Nk = 5 * al::engine::kDecodeChunkMin - 3,
    p.d = p.dv = 128;
    p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
    p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
    p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
    for (auto* t : {&p.q, &p.k, &p.v}) al::test::fill_normal(*t, rng);
    p.key_lengths = {p.Nk, p.Nk - 700};
    {
      // From memory (K and V taken as larger than the cache): in row order, the queries held.
      const RequestsFor from_memory(false);
      const int64_t before = counts.decode_fused.load(), row_order_before = counts.decode_fused_row_order.load();
      forward_out_lse(p, 2);
      EXPECT_EQ(counts.decode_fused.load() > before, avx512) << group << " heads a group";
      EXPECT_EQ(counts.decode_fused_row_order.load() - row_order_before, counts.decode_fused.load() - before);
    }
    const auto one = forward_with_requests(p, true, 1);
    for (const bool beside_loads : {true, false})
      for (int threads : {1, 2, 3}) {
        if (beside_loads && threads == 1) continue;
        const auto other = forward_with_requests(p, beside_loads, threads);
        for (size_t x = 0; x < one.size(); ++x)
          EXPECT_TRUE(al::test::same_bits(one[x], other[x]))
              << al::test::kQuantity[x] << ": " << threads << " threads " << (beside_loads ? "beside the loads" : "from memory")
              << " against 1 beside the loads, " << group << " heads a group";
      }
  }
}

// The fused step's lazy max (decode_fused_softmax-inl.h, FusedSoftmaxRow): its reference m moves only
// when a block's score passes it, then to that block's max + 8. Scores planted along one
// query's direction make head 0's scores climb through the cache: a ramp of 0.012 a key
// (6 over a chunk of 512, whose reference starts afresh), and jumps of 9 at key 500 and 12
// at key 1100, past the headroom inside the first and third chunks, so blocks take the
// exact update, rescaling O, after runs of the lazy one; the other heads see the same
// keys at other angles. A skipped rescale, or 1 % of a block's sum left out of l, fails
// the rule (both tried).
TEST(EngineDecode, FusedStepLazyMaxRescalesWithinTheAccuracyRule) {
  for (const int64_t d : {64, 128}) {
    std::mt19937_64 rng(base_seed() + 9000 + static_cast<uint64_t>(d));
    al::test::ProblemLimits lim;
    lim.dims = {d};
    lim.max_seq_q = 1;
    lim.min_seq_k = lim.max_seq_k = 3 * al::engine::kDecodeChunkMin + 40;
    lim.max_batch = lim.max_kv_heads = 1;
    lim.max_group = 1;
    lim.p_causal = lim.p_bool_mask = lim.p_additive_mask = lim.p_padding = lim.p_other_scale = 0;
    al::test::Problem p = al::test::random_problem(rng, lim);
    ASSERT_EQ(p.dv, d);
    // Four query heads on the one K/V head (the fused step's 4 rows), head 0's query q0.
    p.Hq = 4;
    al::Tensor<double> q({1, 4, 1, d}), g({1, 4, 1, d});
    al::test::fill_normal(q, rng);
    al::test::fill_normal(g, rng);
    p.q = q;
    p.grad_out = g;
    double q0_sq = 0;
    for (int64_t c = 0; c < d; ++c) q0_sq += q(0, 0, 0, c) * q(0, 0, 0, c);
    const double sqrt_d = std::sqrt(static_cast<double>(d));
    for (int64_t j = 0; j < p.Nk; ++j) {
      // Adds t to head 0's scaled score (scale 1/√d) of key j.
      const double t = 0.012 * static_cast<double>(j) + (j >= 500 ? 9.0 : 0.0) + (j >= 1100 ? 12.0 : 0.0);
      for (int64_t c = 0; c < d; ++c) p.k(0, 0, j, c) += t * sqrt_d * q(0, 0, 0, c) / q0_sq;
    }
    SCOPED_TRACE("d " + std::to_string(d) + ": " + p.describe());
    const int64_t fused_before = al::engine::testing::tile_counts().decode_fused.load();
    al::test::check_engine_against_reference(p, false, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    EXPECT_GT(al::engine::testing::tile_counts().decode_fused.load(), fused_before);
  }
}

// The variants of today's inference (attention_variants.hpp) on decode shapes: a sliding
// window over the cache (Mistral, Gemma), softcap (Gemma 2), ALiBi, sinks (gpt-oss),
// packed sequences each decoding its own rows, score_mod and mask_mod. The decode path
// treats a row's scores as the tiled path does (MaskRow) and merges a sink after the
// chunks; dropout, for training, takes the tiled path.
TEST(EngineDecode, VariantsOnDecodeShapesWithinTheAccuracyRule) {
  const uint64_t seed = base_seed() + 7000;
  constexpr int kProblems = 80;
  int window = 0, softcap = 0, alibi = 0, sinks = 0, packed = 0, mods = 0;
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    al::test::ProblemLimits lim = decode_limits(n);
    lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_sinks = 0.4;
    lim.p_packed = 0.3;
    lim.p_mask_mod = lim.p_score_mod = 0.1;
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    window += p.window.present();
    softcap += p.softcap.has_value();
    alibi += !p.alibi_slopes.empty();
    sinks += !p.sinks.empty();
    packed += !p.cu_seqlens_q.empty();
    mods += p.mask_mod != nullptr || p.score_mod != nullptr;
    al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  EXPECT_GT(window, kProblems / 5);
  EXPECT_GT(softcap, kProblems / 5);
  EXPECT_GT(alibi, kProblems / 5);
  EXPECT_GT(sinks, kProblems / 5);
  EXPECT_GT(packed, 3);
  EXPECT_GT(mods, 3);
}

TEST(EngineDecode, SplitKVBitwiseIdenticalForOneTwoThreeThreads) {
  struct Variant {
    int64_t B, Hq, Hkv, Nq, Nk, d;
    al::Causal causal;
    bool padding, bool_mask;
    al::ScalePolicy scale;
    bool variants = false;  // window, softcap, ALiBi and sinks together
  };
  const Variant variants[] = {
      {2, 8, 2, 1, 5000, 64, al::Causal::none, false, false, al::ScalePolicy::inv_sqrt_d()},
      {1, 4, 1, 16, 3000, 128, al::Causal::bottom_right, true, false, al::ScalePolicy::inv_sqrt_d()},
      {3, 2, 2, 3, 1500, 80, al::Causal::none, true, true, al::ScalePolicy::scalable_softmax(0.5)},
      {1, 8, 2, 1, 6000, 64, al::Causal::bottom_right, false, false, al::ScalePolicy::inv_sqrt_d(), true},
  };
  for (const Variant& vt : variants) {
    std::mt19937_64 rng(91 + vt.Nk);
    al::test::Problem p;
    p.B = vt.B, p.Hq = vt.Hq, p.Hkv = vt.Hkv, p.Nq = vt.Nq, p.Nk = vt.Nk, p.d = p.dv = vt.d;
    p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
    p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
    p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
    p.grad_out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
    for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
    p.causal = vt.causal;
    p.scale = vt.scale;
    if (vt.padding)
      for (int64_t b = 0; b < p.B; ++b) p.key_lengths.push_back(p.Nk - 700 * b - 37);
    if (vt.bool_mask) {
      p.bool_mask = al::Tensor<uint8_t>({p.B, 1, p.Nq, p.Nk});
      std::bernoulli_distribution keep(0.6);
      for (auto& m : p.bool_mask.storage()) m = keep(rng);
    }
    if (vt.variants) {
      p.window = {2500, 0};
      p.softcap = 5.0;
      for (int64_t h = 0; h < p.Hq; ++h) {
        p.alibi_slopes.push_back(std::ldexp(1.0, -static_cast<int>(h + 1)));
        p.sinks.push_back(0.3 * static_cast<double>(h) - 1.0);
      }
    }
    SCOPED_TRACE(p.describe());
    const al::test::FloatProblem fp(p);
    const auto opt = fp.options(p);
    auto run = [&](int threads) {
      const al::ComputeConfig cfg{threads};
      auto f = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, cfg);
      EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
      auto g = al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), f, fp.grad_out.view(), opt, cfg);
      return std::vector<al::Tensor<float>>{f.out, f.lse, g.dq, g.dk, g.dv};
    };
    const auto one = run(1);
    for (int threads : {2, 3, 3, 0}) {
      const auto other = run(threads);
      for (size_t x = 0; x < one.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(one[x], other[x])) << al::test::kQuantity[x] << ": " << threads << " threads against 1";
    }
  }
}

// Calls with many work items take chunks of more keys (decode_chunk_keys, a function of
// the shape alone): the rule's steps, and a cache whose heads merge chunks of 4096 keys
// (the last one short, one batch item padded) within the accuracy rule, bitwise the same
// for 1, 2 and 3 threads.
TEST(EngineDecode, LargerChunksForCallsWithManyItems) {
  using al::engine::decode_chunk_keys;
  const int64_t min_chunk = al::engine::kDecodeChunkMin;
  EXPECT_EQ(decode_chunk_keys(1, 8, 32768), 4096);     // 64 items
  EXPECT_EQ(decode_chunk_keys(4, 8, 4096), 2048);      // 64 items of 2048 keys, 32 of 4096
  EXPECT_EQ(decode_chunk_keys(1, 32, 2048), 1024);
  EXPECT_EQ(decode_chunk_keys(1, 8, 4096), min_chunk);  // 8 × 8 items of 512 keys: fewer than 64 at any size
  EXPECT_EQ(decode_chunk_keys(1, 1, 1 << 20), 4096);
  EXPECT_EQ(decode_chunk_keys(2, 3, 7 * min_chunk - 5), min_chunk);
  EXPECT_EQ(decode_chunk_keys(1, 1, 1), min_chunk);

  std::mt19937_64 rng(base_seed() + 7100);
  al::test::Problem p;
  p.B = 2, p.Hq = 64, p.Hkv = 16, p.Nq = 1, p.Nk = 2 * 4096 + 100, p.d = p.dv = 32;
  ASSERT_EQ(decode_chunk_keys(p.B, p.Hkv, p.Nk), 4096);
  p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
  p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
  p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
  p.grad_out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
  for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
  p.key_lengths = {p.Nk, 4096 + 7};
  SCOPED_TRACE(p.describe());
  al::test::check_engine_against_reference(p, false, al::ComputeConfig{2});
  EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
  expect_same_bits_for_any_threads(p);
}

// The fused step in row order with the hardware prefetchers alone (decode_strategy.hpp,
// FusedReads::row_order), while it lives: on or off.
struct RowOrder {
  bool saved = al::engine::testing::fused_row_order_allowed().load();
  explicit RowOrder(bool allowed) { al::engine::testing::fused_row_order_allowed().store(allowed); }
  ~RowOrder() { al::engine::testing::fused_row_order_allowed().store(saved); }
};

// Where the fused step does not ask beside its loads (K and V from memory), 1 to 4 rows per
// K/V head at d = 64 and 128, and 6 and 8 (their queries held in registers) at d = 128, take
// it in row order on the AVX-512 targets, and nothing else does (d = 256, AVX2: the spread
// requests; 6 and 8 rows at d = 64 are not fused). Its multiply-adds are the spread
// requests' step's in the same order: within the accuracy rule (forward and backward),
// bitwise the same as with row order turned off, and bitwise the same for 1, 2 and 3
// threads; counted where it runs.
TEST(EngineDecode, RowOrderStepBitwiseTheSpreadRequests) {
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  const RequestsFor spread(false);
  const auto& counts = al::engine::testing::tile_counts();
  int row_order_runs = 0;
  for (const int64_t group : {1, 2, 3, 4, 6, 8})
    for (const int64_t d : {64, 128, 256}) {
      std::mt19937_64 rng(base_seed() + 7200 + static_cast<uint64_t>(group * 1000 + d));
      al::test::Problem p;
      p.B = 2, p.Hkv = 2, p.Hq = 2 * group, p.Nq = 1, p.Nk = 3 * al::engine::kDecodeChunkMin - 5, p.d = p.dv = d;
      p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
      p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
      p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
      p.grad_out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
      for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
      p.key_lengths = {p.Nk, p.Nk - 300};
      SCOPED_TRACE(p.describe());
      // 5 to 8 rows are fused on AVX-512 only, and at d = 64 not at all (kFusedManyRowsMinDim).
      const bool fused = group <= 4 ? avx512 || group >= 2 : avx512 && d >= 128;
      const bool expected = fused && avx512 && d <= 128;
      int64_t before = counts.decode_fused_row_order.load();
      al::test::check_engine_against_reference(p, false, al::ComputeConfig{2});
      const bool ran = counts.decode_fused_row_order.load() > before;
      EXPECT_EQ(ran, expected);
      row_order_runs += ran;

      const auto one = expect_same_bits_for_any_threads(p);
      const RowOrder off(false);
      before = counts.decode_fused_row_order.load();
      const int64_t fused_before = counts.decode_fused.load();
      const auto spread_requests = forward_out_lse(p, 2);
      EXPECT_EQ(counts.decode_fused_row_order.load(), before) << "turned off";
      EXPECT_EQ(counts.decode_fused.load() > fused_before, fused) << "the fused step either way";
      for (size_t x = 0; x < one.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(one[x], spread_requests[x])) << al::test::kQuantity[x] << ": row order against the requests";
    }
  if (avx512) EXPECT_EQ(row_order_runs, 10);
}

TEST(EngineDecode, TheEngineChoosesThePathFromTheShapes) {
  auto path = [](int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, bool diagnostics) {
    const al::Tensor<float> q({1, Hq, Nq, 8}, 0.5f), k({1, Hkv, Nk, 8}, 0.25f), v({1, Hkv, Nk, 8}, 1.0f);
    if (diagnostics) {
      al::Tensor<float> out(q.shape()), lse({1, Hq, Nq, 1}), pmax({1, Hq, Nq, 1});
      const al::RowDiagnostics<float> diag{pmax.view(), {}, {}};
      al::engine::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view(), diag});
    } else {
      al::detail::allocating_forward(q.view(), k.view(), v.view());
    }
    return al::test::last_forward_path();
  };
  const int64_t chunk = al::engine::kDecodeChunkMin, br = al::engine::kBr;
  EXPECT_EQ(path(8, 8, 1, chunk + 1, false), ForwardPath::decode);   // a decoding step
  EXPECT_EQ(path(32, 8, 1, 4 * chunk, false), ForwardPath::decode);  // grouped-query heads
  EXPECT_EQ(path(4, 1, br, chunk + 1, false), ForwardPath::decode);  // a chunk of new queries
  EXPECT_EQ(path(8, 8, 1, 2, false), ForwardPath::decode);           // a cache of two keys
  EXPECT_EQ(path(8, 8, 1, 1, false), ForwardPath::tiled);            // fewer than 2·Nq keys
  EXPECT_EQ(path(8, 8, 16, 31, false), ForwardPath::tiled);
  EXPECT_EQ(path(8, 8, 16, 32, false), ForwardPath::decode);
  EXPECT_EQ(path(8, 1, 16, chunk, false), ForwardPath::tiled);       // a lone item of two row blocks
  EXPECT_EQ(path(8, 1, 8, chunk, false), ForwardPath::decode);       // a lone item of one row block
  EXPECT_EQ(path(8, 1, 16, chunk + 1, false), ForwardPath::decode);  // two items
  EXPECT_EQ(path(2, 2, br + 1, 4 * chunk, false), ForwardPath::tiled);  // more than a query tile per head
  EXPECT_EQ(path(8, 8, 1, 4 * chunk, true), ForwardPath::tiled);     // diagnostics are the tiled path's
  {  // dropout is for training: the tiled path draws its mask
    const al::Tensor<float> q({1, 2, 1, 8}, 0.5f), k({1, 2, 4 * chunk, 8}, 0.25f), v({1, 2, 4 * chunk, 8}, 1.0f);
    al::AttentionOptions<float> o;
    o.dropout = {0.1, 5};
    al::detail::allocating_forward(q.view(), k.view(), v.view(), o);
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::tiled);
  }
}

TEST(EngineDecode, BadInputGetsTheSameErrors) {
  const int64_t nk = al::engine::kDecodeChunkMin * 3 + 5;
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const al::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A NaN deep in the cache, and a key length past Nk: the reference's messages.
  {
    al::Tensor<float> q({2, 4, 1, 16}, 0.5f), k({2, 2, nk, 16}, 0.25f), v({2, 2, nk, 16}, 1.0f);
    al::Tensor<double> qd({2, 4, 1, 16}, 0.5), kd({2, 2, nk, 16}, 0.25), vd({2, 2, nk, 16}, 1.0);
    k(1, 1, nk - 3, 7) = NAN;
    kd(1, 1, nk - 3, 7) = NAN;
    const std::string want = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view()); });
    EXPECT_EQ(want, "k: non-finite value nan at [1, 1, " + std::to_string(nk - 3) + ", 7]");
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view()); }), want);
    k(1, 1, nk - 3, 7) = kd(1, 1, nk - 3, 7) = 0.25f;
    al::AttentionOptions<float> of;
    al::AttentionOptions<double> od;
    const std::vector<int64_t> lengths{nk, nk + 1};
    of.key_lengths = od.key_lengths = lengths;
    const std::string want_len = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); });
    EXPECT_FALSE(want_len.empty());
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want_len);
  }
  // The decode path checks K and V while it reads them, and scans the keys no row sees:
  // a NaN or ±inf anywhere in them, used or not, gets the reference's message (and k's
  // before v's before the additive mask's, as check_forward_args orders them).
  {
    struct Bad {
      const char* what;
      bool in_k;
      int64_t key;
      float value;
      int causal;  // 0 none, 1 top-left (rows see 1 key: the rest are never read), 2 padding
    };
    const Bad cases[] = {
        {"nan in v", false, 700, NAN, 0},          {"inf in k", true, 3, INFINITY, 0},
        {"-inf in v", false, nk - 1, -INFINITY, 0}, {"nan in unread k", true, nk - 2, NAN, 1},
        {"inf in unread v", false, 900, INFINITY, 1}, {"nan past the cache length", true, nk - 1, NAN, 2},
    };
    for (const Bad& c : cases) {
      SCOPED_TRACE(c.what);
      al::Tensor<float> q({2, 4, 1, 16}, 0.5f), k({2, 2, nk, 16}, 0.25f), v({2, 2, nk, 16}, 1.0f);
      al::Tensor<double> qd({2, 4, 1, 16}, 0.5), kd({2, 2, nk, 16}, 0.25), vd({2, 2, nk, 16}, 1.0);
      (c.in_k ? k : v)(1, 0, c.key, 5) = c.value;
      (c.in_k ? kd : vd)(1, 0, c.key, 5) = c.value;
      al::AttentionOptions<float> of;
      al::AttentionOptions<double> od;
      const std::vector<int64_t> lengths{nk, 100};
      if (c.causal == 1) of.causal = od.causal = al::Causal::top_left;
      if (c.causal == 2) of.key_lengths = od.key_lengths = lengths;
      const std::string want = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); });
      EXPECT_NE(want.find(c.in_k ? "k: non-finite value" : "v: non-finite value"), std::string::npos) << want;
      const int64_t fused_before = al::engine::testing::tile_counts().decode_fused.load();
      EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want);
      EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
      // Two query heads per key/value head: without causality the tiles are the fused step's.
      if (c.causal == 0) EXPECT_GT(al::engine::testing::tile_counts().decode_fused.load(), fused_before);
      // k's or v's error comes before the additive mask's.
      al::Tensor<float> am({1, 1, 1, nk}, 0.0f);
      al::Tensor<double> amd({1, 1, 1, nk}, 0.0);
      am(0, 0, 0, 4) = INFINITY;
      amd(0, 0, 0, 4) = INFINITY;
      of.additive_mask = am.view();
      od.additive_mask = amd.view();
      EXPECT_EQ(message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); }), want);
      EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want);
    }
  }
  // Scores past float's range in one chunk of one row: that row is named, as in the tiled path.
  {
    al::Tensor<float> q({1, 2, 2, 2}, 0.5f), k({1, 1, nk, 2}, 0.5f), v({1, 1, nk, 2}, 1.0f);
    q(0, 1, 1, 0) = q(0, 1, 1, 1) = 1e20f;
    k(0, 0, nk - 2, 0) = k(0, 0, nk - 2, 1) = 1e20f;  // in the last chunk
    al::AttentionOptions<float> none;
    none.scale = al::ScalePolicy::none();
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), none); }),
              "attention: scores of row [0, 1, 1] overflow float32 (|scale·q·k| > 3.4e38); scale the inputs down or "
              "use the double-precision reference");
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    // With the check off: NaN in that row only, the others normal.
    none.check_finite = false;
    const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), none);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        const bool bad = h == 1 && i == 1;
        EXPECT_EQ(std::isnan(f.lse(0, h, i, 0)), bad) << h << " " << i;
        EXPECT_EQ(std::isnan(f.out(0, h, i, 0)), bad) << h << " " << i;
      }
  }
  // The caller's interrupt stops the decode path too.
  {
    const al::Tensor<float> q({1, 8, 1, 64}, 0.5f), k({1, 8, nk, 64}, 0.25f), v({1, 8, nk, 64}, 1.0f);
    al::ComputeConfig cfg{2};
    cfg.interrupt = [] { return true; };
    EXPECT_THROW(al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, cfg), al::Interrupted);
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
  }
}

TEST(EngineDecode, PortableTargetRunsTheDecodePathWithinTheAccuracyRule) {
  // EMU128 (4 lanes) or SCALAR (1): fewer rows than lanes take the dot products, more
  // take Sᵀ = K·Qᵀ; odd head dims make K's rows a copy rather than read in place.
  const std::string best = al::engine::target_name();
  hwy::SetSupportedTargetsForTest(HWY_EMU128 | HWY_SCALAR);
  for (int n = 0; n < 12 && !::testing::Test::HasFailure(); ++n) {
    std::mt19937_64 rng(7000 + n);
    al::test::ProblemLimits lim;
    lim.dims = {1, 3, 64, 80};
    lim.max_seq_q = n % 3 == 0 ? 6 : 2;
    lim.min_seq_k = al::engine::kDecodeChunkMin + 1;
    lim.max_seq_k = 1300;
    lim.max_batch = 1;
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE("problem " + std::to_string(n) + " on " + al::engine::target_name() + ": " + p.describe());
    al::test::check_engine_against_reference(p, n % 4 == 1, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(al::engine::target_name(), best);
}
