// A cache read by the engine's decode path through its block table (kv_cache_attention.cpp):
// float32, float16 or bfloat16 rows as elements, int8, int4 or fp8 rows as codes decoded in
// registers. The same bits as the engine on the same values held as float32 tensors (the
// cache's gather), for block sizes that cut the engine's 256-key tiles anywhere, on the fused
// step's 8-key grid and off it (a group of 8 keys across a block's end is copied), sequence
// ends inside a block and across one, grouped heads,
// several query rows under the causal mask, windows, sinks, softcap and ALiBi; and the same bits for 1 and 2
// threads. Where this CPU's decode strategy does not fuse the call, the cache's own step takes
// it and the bits need not agree: the test then checks that it did not take the engine's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/engine.hpp"
#include "attnlab/kv_cache.hpp"
#include "engine/plan.hpp"
#include "engine/testing/engine_probe.hpp"
#include "hwy/targets.h"

namespace al = attnlab;
using al::CacheType;

namespace {

struct Case {
  CacheType type;
  int64_t block_tokens, hq, hkv, nq, d, dv;
  std::optional<CacheType> value_type = {};  // V's, if not K's
};

// variant: 0 plain, 1 a window, 2 sinks, 3 no causal mask, 4 softcap, 5 ALiBi.
constexpr int kVariants = 6;
std::string describe(const Case& c, int variant, int64_t len) {
  return std::string(al::to_string(c.type)) + "/" + al::to_string(c.value_type.value_or(c.type)) + " block " + std::to_string(c.block_tokens) + " heads " +
         std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " nq " + std::to_string(c.nq) + " d " +
         std::to_string(c.d) + "/" + std::to_string(c.dv) + " variant " + std::to_string(variant) + " len " +
         std::to_string(len);
}

// Uniform values in [-2, 2) from a xorshift generator: the test's time is its data's otherwise.
struct Values {
  uint64_t x;
  float operator()() {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return static_cast<float>(x >> 40) * 0x1p-22f - 2.0f;
  }
};

bool same_bits(const al::Tensor<float>& a, const al::Tensor<float>& b) {
  return std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

// The sequences' lengths. The sanitized suite (ATTNLAB_TEST_SANITIZED, set by CMake) leaves out
// the longest: 1000 positions still cross every block size here and span several chunks, and
// the 4500 took three quarters of these tests' time there (400 s of the sanitized suite).
std::vector<int64_t> lengths() {
  if (std::getenv("ATTNLAB_TEST_SANITIZED") != nullptr) return {40, 300, 1000};
  return {40, 300, 1000, 4500};
}

// Returns how many calls took the engine's fused decode over the blocks.
// tile_step: the calls of many rows, which the engine's decode path takes by its tile step
// (counted by its tiles; calls of few rows by its fused tiles: the cache's own step counts none).
int check(const Case& cs, bool tile_step = false) {
  al::KVCacheConfig c;
  c.kv_heads = cs.hkv, c.head_dim = cs.d, c.value_dim = cs.dv, c.max_tokens = 6000 + 12 * cs.block_tokens;
  c.key_type = cs.type, c.value_type = cs.value_type.value_or(cs.type), c.block_tokens = cs.block_tokens;
  al::KVCache cache(c);
  Values normal{static_cast<uint64_t>(cs.block_tokens * 31 + cs.d) | 1};
  // A filler first, so that no sequence's blocks start the pool.
  std::vector<int64_t> seqs, sizes = lengths();
  sizes.insert(sizes.begin(), 3 * cs.block_tokens + 5);
  for (int64_t n : sizes) {
    seqs.push_back(cache.add_sequence());
    al::Tensor<float> k({1, cs.hkv, n, cs.d}), v({1, cs.hkv, n, cs.dv});
    for (float& x : k.storage()) x = normal();
    for (float& x : v.storage()) x = normal();
    cache.append(0, seqs.back(), k, v);
  }
  al::Tensor<float> q({1, cs.hq, cs.nq, cs.d});
  for (float& x : q.storage()) x = normal();
  std::vector<float> sinks;
  std::vector<float> slopes;  // ALiBi's, up to 0.008 a position: up to 36 at 4500 positions
  for (int64_t h = 0; h < cs.hq; ++h) {
    sinks.push_back(0.7f * static_cast<float>(h % 3) - 0.5f);
    slopes.push_back(0.002f * static_cast<float>(h % 4 + 1));
  }
  int taken = 0;
  for (size_t at = 1; at < seqs.size(); ++at)
    for (int variant = 0; variant < kVariants; ++variant) {
      const int64_t len = sizes[at];
      al::AttentionOptions<float> o;
      o.causal = variant == 3 ? al::Causal::none : al::Causal::bottom_right;
      if (variant == 1) o.window = {100, 0};
      if (variant == 2) o.sinks = sinks;
      // c = 4: scaled scores spread about ±1.3, so blocks of keys take both of the softcap's tanh ways.
      if (variant == 4) o.softcap = 4.0;
      if (variant == 5) o.alibi_slopes = slopes;
      al::Tensor<float> out({1, cs.hq, cs.nq, cs.dv}), lse({1, cs.hq, cs.nq, 1}), out2(out.shape()), lse2(lse.shape());
      auto& counts = al::engine::testing::tile_counts();
      const int64_t before = tile_step ? counts.forward.load() : counts.decode_fused.load();
      const int64_t one[] = {seqs[at]};
      al::kv_cache_attention(cache, 0, one, q, o, {out, lse}, {}, {.threads = 2});
      const bool engine_took_it = (tile_step ? counts.forward.load() : counts.decode_fused.load()) > before;
      al::kv_cache_attention(cache, 0, one, q, o, {out2, lse2}, {}, {.threads = 1});
      const std::string what = describe(cs, variant, len);
      EXPECT_TRUE(same_bits(out, out2) && same_bits(lse, lse2)) << "1 and 2 threads differ: " << what;
      if (!engine_took_it) continue;
      ++taken;
      al::Tensor<float> k({1, cs.hkv, len, cs.d}), v({1, cs.hkv, len, cs.dv});
      cache.gather(0, seqs[at], k, v);
      al::Tensor<float> want(out.shape()), want_lse(lse.shape());
      al::engine::attention_forward<float>(q, k, v, o, {want, want_lse}, {.threads = 2});
      EXPECT_TRUE(same_bits(out, want)) << "out is not the engine's: " << what;
      EXPECT_TRUE(same_bits(lse, want_lse)) << "lse is not the engine's: " << what;
    }
  return taken;
}

// Every type against every block size: 1, 4 and 8 rows per K/V head; d = dv and d ≠ dv (dv = 96:
// three int4 groups). Returns the calls the engine's decode path took.
int check_blocks(std::initializer_list<CacheType> types, std::initializer_list<int64_t> blocks) {
  int taken = 0;
  for (CacheType t : types)
    for (int64_t block : blocks)
      taken += check({t, block, 8, 8, 1, 128, 128}) + check({t, block, 32, 8, 1, 64, 64}) +
               check({t, block, 4, 2, 4, 128, 96});
  return taken;
}

}  // namespace

TEST(KVCacheBlocks, FloatCachesGiveTheEnginesBitsForEveryBlockSize) {
  // On AVX-512 every call here is fused; elsewhere at least float32's 4-row ones are.
  EXPECT_GT(check_blocks({CacheType::float32, CacheType::float16, CacheType::bfloat16}, {3, 8, 20, 24, 100, 128, 256, 520}), 0)
      << "no call took the engine's decode path over the blocks";
}

// The codes: sequence ends inside a block leave the last tile to the tile step, which takes the
// rows decoded to float; the rest is fused, the codes decoded in registers.
TEST(KVCacheBlocks, QuantizedCachesGiveTheEnginesBitsOnTheirDecodedValues) {
  EXPECT_GT(check_blocks({CacheType::int8, CacheType::int4, CacheType::fp8_e4m3}, {3, 8, 20, 24, 256, 520}), 0)
      << "no call took the engine's decode path over the blocks";
}

// Chunks of new queries, 16 rows per K/V head (the tile step) and more: K and V of two types,
// and blocks off the fused step's grid of 8 keys, each tile decoded to float32 rows first, then
// the same steps as over tensors; and each type on the grid. (With few rows the cache's own step
// takes the first two.)
TEST(KVCacheBlocks, ChunksOfQueriesGiveTheEnginesBits) {
  const std::pair<CacheType, CacheType> pairs[] = {{CacheType::int8, CacheType::int4},
                                                   {CacheType::float16, CacheType::int8},
                                                   {CacheType::int4, CacheType::fp8_e4m3},
                                                   {CacheType::float32, CacheType::bfloat16}};
  int taken = 0;
  for (const auto& [kt, vt] : pairs)
    for (int64_t block : {20, 128}) taken += check({kt, block, 32, 8, 4, 128, 96, vt}, true);
  for (CacheType t : {CacheType::float16, CacheType::int8}) taken += check({t, 20, 16, 2, 8, 64, 64}, true);
  // One type on the grid: read in place (16-bit keys converted for K·Qᵀ), or codes decoded.
  for (CacheType t : {CacheType::float32, CacheType::float16, CacheType::bfloat16, CacheType::int4})
    taken += check({t, 128, 32, 8, 4, 128, 96}, true);
  EXPECT_GT(taken, 0) << "no call took the engine's decode path over the blocks";
}

// The codecs of every SIMD target this build has (each loads its own way: int4's nibbles, fp8
// through float16), fused and on the tile step (a sequence end inside a block).
TEST(KVCacheBlocks, QuantizedCachesGiveTheEnginesBitsOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    int taken = 0;
    for (CacheType t : {CacheType::int8, CacheType::int4, CacheType::fp8_e4m3})
      taken += check({t, 24, 32, 8, 1, 64, 64}) + check({t, 20, 4, 2, 4, 128, 96});
    EXPECT_GT(taken, 0) << hwy::TargetName(target) << ": no call took the engine's decode path over the blocks";
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The fp8 codec multiplies by 256 × the head's scale in one step: up to kFp8MaxHeadScale the
// engine reads the cache's codes (the engine's bits on the gathered values); above, 256 × the
// scale is no float and the cache's own step reads them (the gathered values' attention).
TEST(KVCacheBlocks, Fp8HeadScalesBeyondTheCodecsRangeKeepTheCachesStep) {
  for (const float scale : {1e36f, 2e36f}) {
    const bool fits = scale <= al::engine::kFp8MaxHeadScale;
    ASSERT_EQ(fits, scale == 1e36f);
    al::KVCacheConfig c;
    c.kv_heads = 2, c.head_dim = 64, c.value_dim = 64, c.max_tokens = 512, c.block_tokens = 16;
    c.key_type = c.value_type = CacheType::fp8_e4m3, c.key_scales = {scale};
    al::KVCache cache(c);
    const int64_t seq = cache.add_sequence(), len = 200;
    Values normal{7};
    al::Tensor<float> k({1, 2, len, 64}), v({1, 2, len, 64}), q({1, 8, 1, 64});
    for (float& x : k.storage()) x = normal() * 1e38f;  // codes up to ±200: the scale is needed
    for (float& x : v.storage()) x = normal();
    for (float& x : q.storage()) x = normal() * 1e-37f;
    cache.append(0, seq, k, v);
    cache.gather(0, seq, k, v);
    al::AttentionOptions<float> o;
    al::Tensor<float> out({1, 8, 1, 64}), lse({1, 8, 1, 1}), want(out.shape()), want_lse(lse.shape());
    const int64_t one[] = {seq};
    al::kv_cache_attention(cache, 0, one, q, o, {out, lse}, {}, {.threads = 2});
    al::engine::attention_forward<float>(q, k, v, o, {want, want_lse}, {.threads = 2});
    if (fits) {
      EXPECT_TRUE(same_bits(out, want) && same_bits(lse, want_lse)) << "scale " << scale;
    } else {
      for (int64_t i = 0; i < out.numel(); ++i)
        EXPECT_NEAR(out.data()[i], want.data()[i], 1e-5) << "scale " << scale << " at " << i;
    }
  }
}

// Softcap and ALiBi are treatments of the fused step (FusedTreatScores), and a group of 8 keys
// across a block's end is copied for it: a float32 cache with 4 rows a K/V head, which every
// target fuses, takes the engine's step with either, and with blocks off the 8-key grid, not
// the cache's own.
TEST(KVCacheBlocks, SoftcapAlibiAndOddBlocksTakeTheEnginesFusedStep) {
  for (const int64_t block : {16, 20}) {
    al::KVCacheConfig c;
    c.kv_heads = 2, c.head_dim = 64, c.value_dim = 64, c.max_tokens = 1024, c.block_tokens = block;
    al::KVCache cache(c);
    const int64_t seq = cache.add_sequence(), len = 500;
    Values normal{11};
    al::Tensor<float> k({1, 2, len, 64}), v({1, 2, len, 64}), q({1, 8, 1, 64});
    for (float& x : k.storage()) x = normal();
    for (float& x : v.storage()) x = normal();
    for (float& x : q.storage()) x = normal();
    cache.append(0, seq, k, v);
    const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f};
    for (int variant = 0; variant < 3; ++variant) {
      al::AttentionOptions<float> o;
      if (variant == 1) o.softcap = 30.0;
      if (variant == 2) o.alibi_slopes = slopes;
      al::Tensor<float> out({1, 8, 1, 64}), lse({1, 8, 1, 1});
      auto& counts = al::engine::testing::tile_counts();
      const int64_t before = counts.decode_fused.load();
      const int64_t one[] = {seq};
      al::kv_cache_attention(cache, 0, one, q, o, {out, lse}, {}, {.threads = 2});
      EXPECT_GT(counts.decode_fused.load(), before) << "blocks of " << block << ", variant " << variant;
    }
  }
}
