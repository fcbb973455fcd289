// Decoding over the paged cache (the engine's decode path through the block table,
// kv_cache_attention.cpp): for every element
// type (keys and values of different types too), grouped heads, 1-2 query rows per sequence,
// several sequences of odd lengths in one call (some longer than one work item of 64
// blocks), d = 64 and 128 with dv = 96, the variants; the result within the engine's
// accuracy rule (engine_check.hpp: err ≤ 2·err(naive float32) + 16 ulp·size·(1 + max|L|))
// of the double reference over the same dequantized values, and the same bits for 1 and 2
// threads. The quantization is not the kernels' error: both sides see the dequantized cache.
// Also: an overflowing score's error, the decision table's cache axis, the caller's interrupt.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstring>
#include <random>

#include "attnlab/kv_cache.hpp"
#include "attnlab/reference.hpp"
#include "core/kv_quantize.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_strategy.hpp"
#include "engine_check.hpp"

namespace al = attnlab;
using al::CacheType;

namespace {

constexpr CacheType kTypes[] = {CacheType::float32, CacheType::bfloat16, CacheType::float16,
                                CacheType::int8,    CacheType::int4,     CacheType::fp8_e4m3};

struct Case {
  CacheType kt, vt;
  int64_t hq, hkv, nq, d, dv;
  int variant;  // 0 plain, 1 window, 2 softcap, 3 ALiBi, 4 sinks, 5 no causal mask
  int64_t block_tokens = 32;
};

void check(const Case& cs) {
  const std::vector<int64_t> lengths = {2, 33, 95, 2100, 4500};
  al::KVCacheConfig c;
  c.kv_heads = cs.hkv, c.head_dim = cs.d, c.value_dim = cs.dv, c.max_tokens = 8000;
  c.key_type = cs.kt, c.value_type = cs.vt, c.block_tokens = cs.block_tokens;
  if (cs.kt == CacheType::fp8_e4m3) c.key_scales = {0.02f};
  if (cs.vt == CacheType::fp8_e4m3) c.value_scales = {0.02f};
  al::KVCache cache(c);
  std::mt19937_64 rng(static_cast<uint64_t>(cs.variant * 100 + static_cast<int>(cs.kt) * 10 + static_cast<int>(cs.vt)));
  std::normal_distribution<float> normal;
  std::vector<int64_t> seqs;
  for (int64_t len : lengths) {
    seqs.push_back(cache.add_sequence());
    al::Tensor<float> k({1, cs.hkv, len, cs.d}), v({1, cs.hkv, len, cs.dv});
    for (float& x : k.storage()) x = normal(rng);
    for (float& x : v.storage()) x = normal(rng);
    cache.append(0, seqs.back(), k, v);
  }
  const auto n_seq = static_cast<int64_t>(lengths.size());
  al::Tensor<float> q({n_seq, cs.hq, cs.nq, cs.d}), out({n_seq, cs.hq, cs.nq, cs.dv}), lse({n_seq, cs.hq, cs.nq, 1});
  al::Tensor<float> out2(out.shape()), lse2(lse.shape());
  for (float& x : q.storage()) x = normal(rng);
  std::vector<double> slopes, sinks;
  for (int64_t h = 0; h < cs.hq; ++h) slopes.push_back(0.5 / (h + 1)), sinks.push_back(0.7 * static_cast<double>(h % 3) - 0.5);
  std::vector<float> slopes_f(slopes.begin(), slopes.end()), sinks_f(sinks.begin(), sinks.end());
  al::AttentionOptions<float> o;
  o.causal = cs.variant == 5 ? al::Causal::none : al::Causal::bottom_right;
  if (cs.variant == 1) o.window = {40, 0};
  if (cs.variant == 2) o.softcap = 5.0;
  if (cs.variant == 3) o.alibi_slopes = slopes_f;
  if (cs.variant == 4) o.sinks = sinks_f;
  al::kv_cache_attention(cache, 0, seqs, q, o, {out, lse}, {}, {.threads = 1});
  al::kv_cache_attention(cache, 0, seqs, q, o, {out2, lse2}, {}, {.threads = 2});
  const std::string what = std::string(al::to_string(cs.kt)) + "/" + al::to_string(cs.vt) + " variant " +
                           std::to_string(cs.variant) + " heads " + std::to_string(cs.hq) + "/" +
                           std::to_string(cs.hkv) + " nq " + std::to_string(cs.nq) + " d " + std::to_string(cs.d);
  EXPECT_EQ(std::memcmp(out.data(), out2.data(), static_cast<size_t>(out.numel()) * 4), 0) << what;
  EXPECT_EQ(std::memcmp(lse.data(), lse2.data(), static_cast<size_t>(lse.numel()) * 4), 0) << what;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t len = lengths[static_cast<size_t>(s)];
    std::mt19937_64 r2(1);
    al::test::Problem p = al::test::make_problem(r2, 1, cs.hq, cs.hkv, cs.nq, len, cs.d, cs.dv);
    al::Tensor<float> k({1, cs.hkv, len, cs.d}), v({1, cs.hkv, len, cs.dv});
    cache.gather(0, seqs[static_cast<size_t>(s)], k, v);
    std::copy(k.storage().begin(), k.storage().end(), p.k.storage().begin());
    std::copy(v.storage().begin(), v.storage().end(), p.v.storage().begin());
    for (int64_t i = 0; i < p.q.numel(); ++i) p.q.data()[i] = q.data()[s * p.q.numel() + i];
    p.causal = o.causal, p.window = o.window, p.softcap = o.softcap;
    if (cs.variant == 3) p.alibi_slopes = slopes;
    if (cs.variant == 4) p.sinks = sinks;
    const al::test::FloatProblem fp(p);
    const auto nv = al::test::naive_float_attention(p, fp, true);
    const auto rf = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
    const al::Tensor<double>* ref[al::test::kQuantities] = {&rf.out, &rf.lse, &rf.out, &rf.out, &rf.out, &rf.out};
    const auto floor = al::test::accuracy_floors(p, rf, ref, nv);
    al::Tensor<double> eo(rf.out.shape()), el(rf.lse.shape());
    for (int64_t i = 0; i < eo.numel(); ++i) eo.data()[i] = out.data()[s * eo.numel() + i];
    for (int64_t i = 0; i < el.numel(); ++i) el.data()[i] = lse.data()[s * el.numel() + i];
    EXPECT_LE(al::test::max_abs_diff(eo, rf.out),
              2 * al::test::max_abs_diff(al::test::to_double(nv.out), rf.out) + floor[0])
        << what << " length " << len;
    EXPECT_LE(al::test::max_abs_diff(el, rf.lse),
              2 * al::test::max_abs_diff(al::test::to_double(nv.lse), rf.lse) + floor[1])
        << what << " length " << len;
  }
}

}  // namespace

TEST(KVCacheFusedDecode, EachTypeWithinTheAccuracyRuleAndTheSameForAnyThreads) {
  for (CacheType t : kTypes) {
    check({t, t, 8, 2, 1, 128, 96, 0});  // 4 rows per K/V head
    check({t, t, 2, 2, 1, 64, 64, 0});   // 1 row
  }
  // Keys and values of different types.
  check({CacheType::int8, CacheType::int4, 4, 2, 2, 64, 64, 0});
  check({CacheType::fp8_e4m3, CacheType::bfloat16, 4, 1, 1, 128, 128, 0});
  check({CacheType::float16, CacheType::int8, 8, 1, 1, 64, 96, 0});
  // Blocks of other sizes: steps cut at block ends (48: 32 + 16), blocks shorter than a step.
  check({CacheType::int8, CacheType::int8, 8, 2, 1, 64, 64, 0, 48});
  check({CacheType::int4, CacheType::float32, 8, 2, 1, 64, 64, 1, 16});
}

// Each SIMD target's row codec (row_codec-inl.h) reads every value as gather() does: with one
// position a row's softmax weight is exactly 1, so O is the dequantized V row, equal value for
// value. fp8 rows hold all of its 254 finite codes (subnormals included), the others random
// values.
TEST(KVCacheFusedDecode, EveryTargetDequantizesAsGatherDoes) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (CacheType t : kTypes) {
      const int64_t hkv = 2, d = 128;
      al::KVCacheConfig c;
      c.kv_heads = hkv, c.head_dim = d, c.max_tokens = 64, c.key_type = t, c.value_type = t;
      if (t == CacheType::fp8_e4m3) c.key_scales = c.value_scales = {0.5f};
      al::KVCache cache(c);
      std::mt19937_64 rng(3);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      al::Tensor<float> k({1, hkv, 1, d}), v({1, hkv, 1, d});
      for (float& x : k.storage()) x = normal(rng);
      for (int64_t i = 0; i < v.numel(); ++i) {
        const auto code = static_cast<uint8_t>(i < 127 ? i : i < 254 ? i + 1 : 0);  // 0x7F, 0xFF (NaN) skipped
        v.data()[i] = t == CacheType::fp8_e4m3 ? al::detail::fp8_e4m3_to_float(code) * 0.5f : normal(rng);
      }
      const int64_t s = cache.add_sequence();
      cache.append(0, s, k, v);
      al::Tensor<float> q({1, 2 * hkv, 1, d}), out({1, 2 * hkv, 1, d}), lse({1, 2 * hkv, 1, 1});
      for (float& x : q.storage()) x = normal(rng);
      al::kv_cache_attention(cache, 0, std::vector<int64_t>{s}, q, {}, {out, lse});
      al::Tensor<float> gk({1, hkv, 1, d}), gv({1, hkv, 1, d});
      cache.gather(0, s, gk, gv);
      for (int64_t h = 0; h < 2 * hkv; ++h)
        for (int64_t c = 0; c < d; ++c)
          if (out.data()[h * d + c] != gv.data()[(h / 2) * d + c]) {
            ADD_FAILURE() << al::to_string(t) << " on target " << hwy::TargetName(target) << ", query head " << h
                          << ", channel " << c << ": " << out.data()[h * d + c] << " against gather's "
                          << gv.data()[(h / 2) * d + c];
            break;
          }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(KVCacheFusedDecode, VariantsWithinTheAccuracyRule) {
  for (int variant = 1; variant <= 5; ++variant)
    for (CacheType t : {CacheType::float32, CacheType::int8, CacheType::int4}) {
      check({t, t, 8, 2, 2, 64, 64, variant});  // 8 rows per K/V head (4 heads × 2 queries)
      check({t, t, 6, 2, 1, 128, 96, variant});  // 3 rows, padded to the kernel's 4
    }
}

// A score that overflows float (finite inputs near its limits) is an error naming the row,
// as the engine's, not NaN in the output.
TEST(KVCacheFusedDecode, AnOverflowingScoreIsAnError) {
  al::KVCacheConfig c;
  c.kv_heads = 1, c.head_dim = 32, c.max_tokens = 64;
  al::KVCache cache(c);
  const int64_t s = cache.add_sequence();
  al::Tensor<float> k({1, 1, 5, 32}), v({1, 1, 5, 32}), q({1, 2, 1, 32}), out({1, 2, 1, 32}), lse({1, 2, 1, 1});
  for (float& x : k.storage()) x = 1e30f;
  for (float& x : v.storage()) x = 1.0f;
  for (float& x : q.storage()) x = 1e30f;
  cache.append(0, s, k, v);
  const int64_t ids[] = {s};
  try {
    al::kv_cache_attention(cache, 0, ids, q, {}, {out, lse});
    ADD_FAILURE() << "no error";
  } catch (const al::Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
}

// The cache axis of the decision table (decode_strategy.hpp), row by row.
TEST(KVCacheFusedDecode, TheCacheAxisOfTheDecisionTable) {
  using attnlab::engine::CacheStep;
  auto step = [](bool decode_path, bool fused_in_place, int64_t rows, int64_t d, int64_t dv, bool centred = false,
                 bool row_sinks = false, bool softcap = false) {
    return attnlab::engine::choose_cache_step(decode_path, fused_in_place, rows, d, dv, centred, row_sinks, softcap);
  };
  // The fused step in place: the engine, whatever the rows' type.
  for (int64_t rows = 1; rows <= 8; ++rows) EXPECT_EQ(step(true, true, rows, 128, 128), CacheStep::engine) << rows;
  // Not in place (two types, blocks off the grid, softcap, ALiBi, a call not fused): the cache's step.
  EXPECT_EQ(step(true, false, 4, 128, 128), CacheStep::cache);
  EXPECT_EQ(step(true, false, 8, 64, 256), CacheStep::cache);
  // Beyond its rows or head sizes: the engine's tile step over the table where the decode path
  // takes the call, else gathered.
  EXPECT_EQ(step(true, false, 16, 128, 128), CacheStep::engine);
  EXPECT_EQ(step(true, false, 4, 80, 80), CacheStep::engine);      // not whole groups of 32 channels
  EXPECT_EQ(step(true, false, 1, 288, 288), CacheStep::engine);    // beyond the cache's query registers
  EXPECT_EQ(step(false, false, 16, 128, 128), CacheStep::gather);  // the tiled path's call
  EXPECT_EQ(step(true, false, 16, 72, 72), CacheStep::gather);     // not whole vectors
  EXPECT_EQ(step(true, true, 0, 72, 72), CacheStep::gather);
  // Centred keys: the engine gives the lost q·μ back through lse and a sink per query head.
  EXPECT_EQ(step(true, true, 4, 128, 128, true), CacheStep::engine);
  EXPECT_EQ(step(true, true, 4, 128, 128, true, true), CacheStep::cache);    // sinks, several rows a head
  EXPECT_EQ(step(true, true, 16, 128, 128, true, true), CacheStep::gather);
  EXPECT_EQ(step(true, true, 4, 128, 128, true, false, true), CacheStep::gather);  // softcap: no shift
}

// ComputeConfig::interrupt (Python's Ctrl-C) is asked between the decode path's work items, as
// between the engine's tiles: true ends the call with Interrupted; false changes nothing.
TEST(KVCacheFusedDecode, AnInterruptStopsALongDecode) {
  al::KVCacheConfig c;
  c.kv_heads = 2, c.head_dim = 64, c.max_tokens = 40000, c.key_type = CacheType::int8, c.value_type = CacheType::int8;
  al::KVCache cache(c);
  const int64_t s = cache.add_sequence();
  al::Tensor<float> k({1, 2, 32768, 64}), v({1, 2, 32768, 64});  // 16 work items per K/V head
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  for (float& x : k.storage()) x = normal(rng);
  for (float& x : v.storage()) x = normal(rng);
  cache.append(0, s, k, v);
  al::Tensor<float> q({1, 8, 1, 64}), out({1, 8, 1, 64}), lse({1, 8, 1, 1}), out2(out.shape()), lse2(lse.shape());
  for (float& x : q.storage()) x = normal(rng);
  const int64_t ids[] = {s};
  al::kv_cache_attention(cache, 0, ids, q, {}, {out, lse}, {}, {.threads = 2});
  for (int threads : {1, 2}) {
    int asked = 0;
    al::ComputeConfig stop_now{.threads = threads};
    stop_now.interrupt = [&asked] { return ++asked >= 1; };
    try {
      al::kv_cache_attention(cache, 0, ids, q, {}, {out2, lse2}, {}, stop_now);
      ADD_FAILURE() << "not interrupted, threads " << threads;
    } catch (const al::Interrupted& e) {
      EXPECT_NE(std::string(e.what()).find("interrupted by the caller"), std::string::npos) << e.what();
    }
    EXPECT_EQ(asked, 1) << threads;  // asked once, then no item starts
    al::ComputeConfig never{.threads = threads};
    never.interrupt = [&asked] { return ++asked < 0; };
    al::kv_cache_attention(cache, 0, ids, q, {}, {out2, lse2}, {}, never);
    EXPECT_GE(asked, 2) << threads;
    EXPECT_EQ(out2.storage(), out.storage()) << threads;  // asking changes nothing
    EXPECT_EQ(lse2.storage(), lse.storage()) << threads;
  }
}
