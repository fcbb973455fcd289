// The decode policy's decision table (decode_strategy.hpp) row by row: what
// choose_decode_strategy answers for the shapes the table names, on AVX-512 and on AVX2
// facts, whatever machine runs the test (the function is target-independent).
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/decode_path.hpp"
#include "engine/decode_strategy.hpp"

namespace al = attnlab;
using al::engine::DecodeScores;
using al::engine::DecodeShape;
using al::engine::DecodeStrategy;
using al::engine::DecodeSwitches;
using al::engine::DecodeTargetFacts;
using al::engine::ElementType;
using al::engine::FusedReads;
using al::engine::VFetch;

namespace {

constexpr DecodeTargetFacts kAvx512{16, true, true}, kAvx2{8, false, false};
constexpr int64_t kLlc = int64_t{32} << 20;

DecodeStrategy choose(const DecodeTargetFacts& t, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t d,
                      ElementType type = ElementType::f32) {
  DecodeShape c;
  c.Hkv = Hkv, c.rows = Hq / Hkv * Nq, c.Nk = Nk, c.d = d, c.dv = d, c.dv_pad = (d + 15) / 16 * 16, c.type = type;
  c.bf16_queries = type == ElementType::bf16;
  DecodeSwitches s;
  s.beside_loads_max_kv_bytes = kLlc;
  return al::engine::choose_decode_strategy(c, t, s);
}

}  // namespace

TEST(DecodeStrategy, ThirtyTwoByEightHeadsFromMemoryReadInRowOrder) {
  // B = 1, 32/8 heads, one query, Nk = 32768, d = 128, float32: 4 rows per K/V head, K and
  // V 256 MiB (beyond the cache): the fused step in row order, rows of 8 vectors.
  const DecodeStrategy st = choose(kAvx512, 32, 8, 1, 32768, 128);
  EXPECT_EQ(st.rows, 4);
  EXPECT_TRUE(st.fused);
  EXPECT_EQ(st.reads, FusedReads::row_order);
  EXPECT_EQ(st.row_vectors, 8);
  EXPECT_FALSE(st.asks_next_block);
  EXPECT_FALSE(st.bf16_dots);
  // In the cache (Nk = 2048: 16 MiB): beside the loads.
  EXPECT_EQ(choose(kAvx512, 32, 8, 1, 2048, 128).reads, FusedReads::beside_loads);
  // On AVX2: fused with the spread requests.
  const DecodeStrategy avx2 = choose(kAvx2, 32, 8, 1, 32768, 128);
  EXPECT_TRUE(avx2.fused);
  EXPECT_EQ(avx2.reads, FusedReads::spread);
}

TEST(DecodeStrategy, TheTableRowByRow) {
  // One row: fused on AVX-512 (row order asking for the next block's row), the tile step on AVX2.
  EXPECT_TRUE(choose(kAvx512, 8, 8, 1, 32768, 128).fused);
  EXPECT_TRUE(choose(kAvx512, 8, 8, 1, 32768, 128).asks_next_block);
  EXPECT_FALSE(choose(kAvx2, 8, 8, 1, 32768, 128).fused);
  EXPECT_EQ(choose(kAvx2, 8, 8, 1, 32768, 128).v_fetch, VFetch::kCached);
  // d = 256 and 80 from memory: spread requests (rows of 16 or 5 vectors).
  EXPECT_EQ(choose(kAvx512, 32, 8, 1, 32768, 256).reads, FusedReads::spread);
  EXPECT_EQ(choose(kAvx512, 16, 8, 1, 65536, 80).reads, FusedReads::spread);
  // 6 to 8 rows: row order at d = 128 with the next block asked for; beside the loads at 256 (float32).
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 128).reads, FusedReads::row_order);
  EXPECT_TRUE(choose(kAvx512, 64, 8, 1, 32768, 128).asks_next_block);
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 256).reads, FusedReads::beside_loads);
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 256, ElementType::f16).reads, FusedReads::spread);
  // 5 to 8 rows: fused from d = 64 (row order only on the bfloat16 dot products there); below, the tile step.
  EXPECT_TRUE(choose(kAvx512, 64, 8, 1, 32768, 64).fused);
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 64).reads, FusedReads::beside_loads);  // float32 from 6 rows
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 64, ElementType::f16).reads, FusedReads::spread);
  EXPECT_EQ(choose(kAvx512, 64, 8, 1, 32768, 64, ElementType::bf16).reads, FusedReads::row_order);
  EXPECT_FALSE(choose(kAvx512, 64, 8, 1, 32768, 48).fused);
  EXPECT_TRUE(choose(kAvx512, 64, 8, 1, 32768, 64, ElementType::bf16).fused);
  EXPECT_TRUE(choose(kAvx512, 64, 8, 1, 32768, 64, ElementType::bf16).bf16_dots);
  EXPECT_FALSE(choose(kAvx512, 16, 8, 1, 32768, 128, ElementType::bf16).bf16_dots);  // 2 rows
  // float32 queries on a bfloat16 cache (kv_cache_attention): VDPBF16PS would truncate them.
  DecodeShape float_queries;
  float_queries.Hkv = 8, float_queries.rows = 8, float_queries.Nk = 32768, float_queries.d = float_queries.dv = 64;
  float_queries.dv_pad = 64, float_queries.type = ElementType::bf16;
  EXPECT_FALSE(al::engine::choose_decode_strategy(float_queries, kAvx512, DecodeSwitches{}).bf16_dots);
}

TEST(DecodeStrategy, SixteenBitBlocksOfShortRunsAskBesideTheLoads) {
  // 32/8 heads, d = 128, from memory: row order over a tensor; over a paged cache's blocks of
  // 128 positions (a 32 KiB run of float16 K per head) beside the loads; of 512 (128 KiB) row
  // order again; float32 keeps row order.
  DecodeShape c;
  c.Hkv = 8, c.rows = 4, c.Nk = 32768, c.d = c.dv = c.dv_pad = 128, c.type = ElementType::f16;
  DecodeSwitches s;
  s.beside_loads_max_kv_bytes = kLlc;
  EXPECT_EQ(al::engine::choose_decode_strategy(c, kAvx512, s).reads, FusedReads::row_order);
  c.block_run_bytes = 128 * 256;
  EXPECT_EQ(al::engine::choose_decode_strategy(c, kAvx512, s).reads, FusedReads::beside_loads);
  c.block_run_bytes = 512 * 256;
  EXPECT_EQ(al::engine::choose_decode_strategy(c, kAvx512, s).reads, FusedReads::row_order);
  c.type = ElementType::f32, c.block_run_bytes = 128 * 512;
  EXPECT_EQ(al::engine::choose_decode_strategy(c, kAvx512, s).reads, FusedReads::row_order);
  // 16-bit caches off AVX-512 and 5 or more rows there: the tile step, V streamed.
  EXPECT_FALSE(choose(kAvx2, 32, 8, 1, 32768, 128, ElementType::bf16).fused);
  EXPECT_EQ(choose(kAvx2, 32, 8, 1, 32768, 128, ElementType::bf16).v_fetch, VFetch::kStream);
  EXPECT_FALSE(choose(kAvx2, 48, 8, 1, 32768, 128).fused);
  // 9 to 14 rows (15 on AVX-512, below its 16 lanes): dot products, V streamed; beyond:
  // K·Qᵀ, V's next block asked for.
  EXPECT_EQ(choose(kAvx512, 15, 1, 1, 32768, 128).scores, DecodeScores::dots);
  EXPECT_EQ(choose(kAvx512, 15, 1, 1, 32768, 128).v_fetch, VFetch::kStream);
  EXPECT_EQ(choose(kAvx512, 16, 1, 1, 32768, 128).scores, DecodeScores::keys_times_queries);
  EXPECT_EQ(choose(kAvx2, 15, 1, 1, 32768, 128).scores, DecodeScores::keys_times_queries);
  EXPECT_EQ(choose(kAvx512, 32, 8, 16, 8192, 128).v_fetch, VFetch::kNextBlock);
  EXPECT_FALSE(choose(kAvx512, 32, 8, 16, 8192, 128).fused);
}

// The grain of decode_path.hpp: a decode call that reads at most 2 MiB of K and V runs on the
// calling thread whatever the team; a larger one on the whole team.
TEST(DecodeThreads, SmallCallsRunOnTheCallingThread) {
  using attnlab::engine::decode_threads;
  const int64_t eight_heads_256_keys = 2 * 8 * 256 * 128 * int64_t{4};  // K and V, float32, d = 128
  EXPECT_EQ(decode_threads(2, eight_heads_256_keys), 1);
  EXPECT_EQ(decode_threads(2, 2 * eight_heads_256_keys), 2);
  EXPECT_EQ(decode_threads(16, attnlab::engine::kSmallDecodeBytes + 1), 16);
  EXPECT_EQ(decode_threads(1, int64_t{1} << 40), 1);
}
