// The decode path (src/engine/decode_path.hpp, decode_strategy.hpp): few query rows against a
// long key/value cache, with the query heads of a group together and the keys split
// into chunks merged in a fixed order. Its results obey the engine's accuracy rule
// (engine_check.hpp) on random decode (Nq ≤ 4) and chunked-prefill (Nq ≤ 64) shapes
// with every option and variant, on chunks of more keys, and on the portable target. A test
// hook (last_forward_path) proves these shapes ran the decode path.
// Seeded: set ATTNLAB_TEST_SEED to explore others; failures print the seed.
#include <gtest/gtest.h>
#include <hwy/targets.h>

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

// Calls with many work items take chunks of more keys (decode_chunk_keys, a function of
// the shape alone): the rule's steps, and a cache whose heads merge chunks of 4096 keys
// (the last one short, one batch item padded) within the accuracy rule, bitwise the same
// for 1, 2 and 3 threads.
TEST(EngineDecode, LargerChunksForCallsWithManyItems) {
  using al::engine::decode_chunk_keys;
  const int64_t min_chunk = al::engine::kDecodeChunkMin;
  EXPECT_EQ(decode_chunk_keys(1, 8, 32768), 4096);  // 64 items
  EXPECT_EQ(decode_chunk_keys(4, 8, 4096), 2048);   // 64 items of 2048 keys, 32 of 4096
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

TEST(EngineDecode, PortableTargetRunsTheDecodePathWithinTheAccuracyRule) {
  // EMU128 (4 lanes) or SCALAR (1): fewer rows than lanes take the dot products, more
  // take Sᵀ = K·Qᵀ; odd head dims make K's rows a copy rather than read in place.
  // (SSE4's 4 lanes in the sanitized build, which compiles no portable target.)
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
