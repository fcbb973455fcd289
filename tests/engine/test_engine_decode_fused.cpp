// The decode path's fused step (decode_fused-inl.h, decode_strategy.hpp): which shapes and
// targets take it, within the accuracy rule on each; its ways of asking for K's and V's
// lines (beside the loads, spread, in row order) give bitwise the same results; its lazy
// max rescales where it must.
// Seeded: set ATTNLAB_TEST_SEED to explore others; failures print the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "decode_test_support.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "engine_path.hpp"
#include "same_bits.hpp"

namespace al = attnlab;
using al::engine::ForwardPath;
using namespace al::test::decode;

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
      EXPECT_TRUE(al::test::same_bits(beside[x], spread[x]))
          << al::test::kQuantity[x] << " beside the loads against spread";
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  // Not d = 1 (K not read in place), masks or causal edges, nor one row on AVX2 and the rest.
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  EXPECT_GE(fused, avx512 ? kProblems / 4 : kProblems / 6);
  std::printf("fused-step problems: %d of %d\n", fused, kProblems);
}

// Five to eight rows per K/V head (a group of 5 to 8 query heads, or a smaller group with
// two queries) take the fused step on AVX-512 from d = 64 on (decode_strategy.hpp,
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
    if (p.d < al::engine::kFusedManyRowsMinDim) EXPECT_FALSE(took_fused) << "5 to 8 rows take the fused step only from d = 64 on";
    if (took_fused) {
      const auto beside = forward_with_requests(p, true, 2), spread = forward_with_requests(p, false, 2);
      for (size_t x = 0; x < beside.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(beside[x], spread[x]))
            << al::test::kQuantity[x] << " beside the loads against from memory";
    }
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  EXPECT_EQ(n, kProblems) << "too few problems of 5 to 8 rows in " << drawn << " drawn";
  EXPECT_EQ(rows_seen, (std::set<int64_t>{5, 6, 7, 8}));
  if (avx512) EXPECT_GE(fused, kProblems / 5);  // not d = 1, causal edges or padded ends
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
              << al::test::kQuantity[x] << ": " << threads << " threads "
              << (beside_loads ? "beside the loads" : "from memory") << " against 1 beside the loads, " << group
              << " heads a group";
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
// requests; 6 and 8 rows at d = 64 spread theirs). Its multiply-adds are the spread
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
      // 5 to 8 rows are fused on AVX-512 only (from d = 64, kFusedManyRowsMinDim), in row order
      // at d = 128 only (rows of 4 vectors in row order are compiled up to 4 rows).
      const bool fused = group <= 4 ? avx512 || group >= 2 : avx512 && d >= al::engine::kFusedManyRowsMinDim;
      const bool expected = fused && avx512 && d <= 128 && (group <= 4 || d == 128);
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
        EXPECT_TRUE(al::test::same_bits(one[x], spread_requests[x]))
            << al::test::kQuantity[x] << ": row order against the requests";
    }
  if (avx512) EXPECT_EQ(row_order_runs, 10);
}

// Softcap (Gemma 2) and ALiBi are the fused step's own treatments (FusedTreatScores in
// decode_fused_softmax-inl.h): calls with them take it where calls without do, within the
// accuracy rule, with overflowed scores still marked before c·tanh can hide them (EngineErrors),
// and its ways of asking for K's and V's lines still bitwise the same.
TEST(EngineDecode, SoftcapAndAlibiOnTheFusedStepWithinTheAccuracyRule) {
  const uint64_t seed = base_seed() + 6000;
  constexpr int kProblems = 60;
  int softcap = 0, alibi = 0;
  const auto& counts = al::engine::testing::tile_counts();
  for (int n = 0; n < kProblems; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    al::test::ProblemLimits lim = fused_step_limits(n, /*max_seq_q=*/2, /*max_group=*/8);
    lim.p_softcap = lim.p_alibi = 0.6;
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE("seed " + std::to_string(seed + n) + ": " + p.describe());
    const int64_t before = counts.decode_fused.load();
    al::test::check_engine_against_reference(p, n % 5 == 2, al::ComputeConfig{2});
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    if (counts.decode_fused.load() > before) {
      softcap += p.softcap.has_value();
      alibi += !p.alibi_slopes.empty();
      const auto beside = forward_with_requests(p, true, 2), spread = forward_with_requests(p, false, 2);
      for (size_t x = 0; x < beside.size(); ++x)
        EXPECT_TRUE(al::test::same_bits(beside[x], spread[x]))
            << al::test::kQuantity[x] << " beside the loads against from memory";
    }
    if (::testing::Test::HasFailure() && std::getenv("ATTNLAB_KEEP_GOING") == nullptr) break;
  }
  EXPECT_GT(softcap, kProblems / 6) << "fused calls with softcap";
  EXPECT_GT(alibi, kProblems / 6) << "fused calls with ALiBi";
}
