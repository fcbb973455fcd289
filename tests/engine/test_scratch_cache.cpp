// The engine's cache of working buffers (engine/scratch_cache.hpp): a released block is
// reused, a small request leaves a large block alone, the cache stays within its bound,
// release_cached_memory empties it, threads share it safely, and what a reused buffer
// held never reaches a result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_path.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/scratch_cache.hpp"
#include "naive_float.hpp"
#include "problem.hpp"
#include "same_bits.hpp"

namespace al = attnlab;
namespace eng = attnlab::engine;

namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

}  // namespace

TEST(ScratchCache, AReleasedBlockIsReusedForTheSameSize) {
  al::engine::release_cached_memory();
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 0u);
  const eng::ScratchBlock a = eng::acquire_scratch(100000);
  ASSERT_NE(a.data, nullptr);
  EXPECT_TRUE(aligned(a.data));
  EXPECT_GE(a.capacity, 100000u);
  std::memset(a.data, 1, 100000);  // the whole request is usable
  eng::release_scratch(a);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 1u);
  EXPECT_EQ(eng::scratch_cache_stats().bytes, a.capacity);
  const eng::ScratchBlock b = eng::acquire_scratch(100000);
  EXPECT_EQ(b.base, a.base);
  EXPECT_EQ(b.capacity, a.capacity);
  EXPECT_TRUE(aligned(b.data));
  EXPECT_NE(b.data, a.data);  // the next offset into the block (scratch_cache.cpp)
  std::memset(b.data, 2, 100000);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 0u);
  eng::release_scratch(b);
}

TEST(ScratchCache, ASmallRequestDoesNotTakeABlockOverTwiceItsSize) {
  al::engine::release_cached_memory();
  const eng::ScratchBlock big = eng::acquire_scratch(1 << 20);
  eng::release_scratch(big);
  const eng::ScratchBlock small = eng::acquire_scratch((1 << 19) - 64);  // under half: a new block
  EXPECT_NE(small.base, big.base);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 1u);
  const eng::ScratchBlock half = eng::acquire_scratch(1 << 19);  // half: the cached block
  EXPECT_EQ(half.base, big.base);
  EXPECT_EQ(half.capacity, big.capacity);
  eng::release_scratch(small);
  eng::release_scratch(half);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 2u);
}

TEST(ScratchCache, HoldsAtMostItsBoundAndReleaseCachedMemoryEmptiesIt) {
  al::engine::release_cached_memory();
  // Five blocks of a quarter of the bound each: four are kept, the fifth is freed.
  std::vector<eng::ScratchBlock> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(eng::acquire_scratch(eng::kScratchCacheBytes / 4));
  for (const eng::ScratchBlock& b : blocks) eng::release_scratch(b);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 4u);
  EXPECT_LE(eng::scratch_cache_stats().bytes, eng::kScratchCacheBytes);
  // A block larger than the bound is never kept.
  const eng::ScratchBlock huge = eng::acquire_scratch(eng::kScratchCacheBytes + 1);
  ASSERT_NE(huge.data, nullptr);
  eng::release_scratch(huge);
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 4u);
  al::engine::release_cached_memory();
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 0u);
  EXPECT_EQ(eng::scratch_cache_stats().bytes, 0u);
}

TEST(ScratchCache, ImpossibleSizesAreNullNotWrapped) {
  EXPECT_EQ(eng::acquire_scratch(SIZE_MAX).data, nullptr);
  EXPECT_EQ(eng::acquire_scratch(SIZE_MAX / 2 + 1).data, nullptr);
  // count · sizeof(float) would wrap to a small size.
  EXPECT_EQ(eng::acquire_scratch_of<float>(SIZE_MAX / 4 + 2).get(), nullptr);
  EXPECT_EQ(eng::acquire_scratch_of<uint32_t>(SIZE_MAX / 2).get(), nullptr);
}

TEST(ScratchCache, AnEngineCallLeavesItsBuffersForTheNext) {
  al::engine::release_cached_memory();
  const al::Tensor<float> q({1, 8, 1, 64}, 0.5f), k({1, 2, 2000, 64}, 0.25f), v({1, 2, 2000, 64}, 1.0f);
  const auto first = al::detail::allocating_forward(q.view(), k.view(), v.view());
  const eng::ScratchCacheStats after_one = eng::scratch_cache_stats();
  EXPECT_GT(after_one.blocks, 0u);
  const auto second = al::detail::allocating_forward(q.view(), k.view(), v.view());
  EXPECT_EQ(eng::scratch_cache_stats().blocks, after_one.blocks);  // the same blocks again
  EXPECT_EQ(eng::scratch_cache_stats().bytes, after_one.bytes);
  EXPECT_EQ(std::memcmp(first.out.data(), second.out.data(), sizeof(float) * static_cast<size_t>(first.out.numel())), 0);
  al::engine::release_cached_memory();
  EXPECT_EQ(eng::scratch_cache_stats().blocks, 0u);
}

TEST(ScratchCache, ThreadsTakeAndGiveBackConcurrently) {
  al::engine::release_cached_memory();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 2000; ++i) {
        const size_t bytes = 64 + rng() % (256 << 10);
        const eng::ScratchBlock b = eng::acquire_scratch(bytes);
        ASSERT_NE(b.data, nullptr);
        ASSERT_GE(b.capacity, bytes);
        // Each thread writes its mark over the whole block and finds it intact: no block
        // is handed to two threads at once.
        std::memset(b.data, t + 1, bytes);
        const auto* c = static_cast<const unsigned char*>(b.data);
        ASSERT_EQ(c[0], t + 1);
        ASSERT_EQ(c[bytes - 1], t + 1);
        eng::release_scratch(b);
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_LE(eng::scratch_cache_stats().bytes, eng::kScratchCacheBytes);
  al::engine::release_cached_memory();
}

// Every call on a cold cache, then again with every cached byte set to 0xFF (a NaN in
// float): the forward and the backward bitwise the same, on both forward paths and
// with the variants (dropout's words, softcap's and score_mod's derivative buffers).
TEST(ScratchCache, WhatAReusedBufferHeldNeverReachesAResult) {
  int decoded = 0;
  for (int n = 0; n < 24; ++n) {
    std::mt19937_64 rng(20261124u + static_cast<uint64_t>(n));
    al::test::ProblemLimits lim;
    lim.dims = {8, 64, 128};
    lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_sinks = lim.p_packed = 0.25;
    lim.p_dropout = n % 2 == 0 ? 0.0 : 0.3;
    if (n % 3 == 0) {
      lim.max_seq_q = 4, lim.min_seq_k = 513, lim.max_seq_k = 1500, lim.max_group = 4;  // the decode path
    } else {
      lim.max_seq = 300;
    }
    const al::test::Problem p = al::test::random_problem(rng, lim);
    SCOPED_TRACE(p.describe());
    const al::test::FloatProblem fp(p);
    const auto opt = fp.options(p);
    const al::ComputeConfig config{2};
    al::engine::release_cached_memory();
    const auto f1 = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, config);
    decoded += al::test::last_forward_path() == al::engine::ForwardPath::decode;
    al::engine::release_cached_memory();
    const auto g1 =
        al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), f1, fp.grad_out.view(), opt, config);
    eng::scribble_scratch_cache(0xFF);
    const auto f2 = al::detail::allocating_forward(fp.q.view(), fp.k.view(), fp.v.view(), opt, config);
    eng::scribble_scratch_cache(0xFF);
    const auto g2 =
        al::detail::allocating_backward(fp.q.view(), fp.k.view(), fp.v.view(), f2, fp.grad_out.view(), opt, config);
    EXPECT_TRUE(al::test::same_bits(f1.out, f2.out)) << "out";
    EXPECT_TRUE(al::test::same_bits(f1.lse, f2.lse)) << "lse";
    EXPECT_TRUE(al::test::same_bits(g1.dq, g2.dq)) << "dq";
    EXPECT_TRUE(al::test::same_bits(g1.dk, g2.dk)) << "dk";
    EXPECT_TRUE(al::test::same_bits(g1.dv, g2.dv)) << "dv";
  }
  EXPECT_GE(decoded, 6);
  al::engine::release_cached_memory();
}

// Under AddressSanitizer a cached block is poisoned: writing to a block after giving it
// back is reported, as it would be after a free.
#ifdef ATTNLAB_ASAN
TEST(ScratchCacheDeathTest, AUseAfterReleaseIsReportedUnderAddressSanitizer) {
  al::engine::release_cached_memory();
  const eng::ScratchBlock b = eng::acquire_scratch(4096);
  ASSERT_NE(b.data, nullptr);
  eng::release_scratch(b);
  EXPECT_DEATH(static_cast<volatile char*>(b.data)[100] = 1, "use-after-poison");
  al::engine::release_cached_memory();
}
#endif
