// The KV cache's storage: the codecs (exact where the type holds the value, within half a
// step where it quantizes, bitwise reproducible), paging across blocks, fork with
// copy-on-write, free, the memory accounting, and the errors of misuse.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "attnlab/float16.hpp"
#include "attnlab/kv_cache.hpp"
#include "core/kv_quantize.hpp"

namespace al = attnlab;
using al::CacheType;

namespace {

constexpr CacheType kTypes[] = {CacheType::float32, CacheType::bfloat16, CacheType::float16,
                                CacheType::int8,    CacheType::int4,     CacheType::fp8_e4m3};

al::KVCacheConfig config(CacheType kt, CacheType vt, int64_t d = 80, int64_t tokens = 256) {
  al::KVCacheConfig c;
  c.layers = 2, c.kv_heads = 2, c.head_dim = d, c.max_tokens = tokens, c.block_tokens = 16;
  c.key_type = kt, c.value_type = vt;
  return c;
}

al::Tensor<float> random_rows(std::mt19937_64& rng, int64_t heads, int64_t n, int64_t d, float sigma = 1.0f) {
  al::Tensor<float> t({1, heads, n, d});
  std::normal_distribution<float> normal(0.0f, sigma);
  for (float& x : t.storage()) x = normal(rng);
  return t;
}

// The row as the type stores it, through the codec alone.
std::vector<float> round_trip(CacheType type, const float* x, int64_t d, float scale = 1.0f) {
  std::vector<std::byte> bytes(static_cast<size_t>(al::detail::row_bytes(type, d)));
  EXPECT_EQ(al::detail::encode_row(type, x, 1, d, scale, bytes.data()), -1);
  std::vector<float> y(static_cast<size_t>(d));
  al::detail::decode_row(type, bytes.data(), d, scale, y.data());
  return y;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const al::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(KVCacheCodec, EachTypeWithinItsStep) {
  std::mt19937_64 rng(1);
  for (int64_t d : {1, 31, 32, 80, 128}) {
    const auto x = random_rows(rng, 1, 1, d, 3.0f);
    for (CacheType t : kTypes) {
      const auto y = round_trip(t, x.data(), d);
      for (int64_t c = 0; c < d; ++c) {
        const int64_t g0 = c / 32 * 32, g1 = std::min(d, g0 + 32);
        float amax = 0;
        for (int64_t j = g0; j < g1; ++j) amax = std::max(amax, std::fabs(x.data()[j]));
        const float xc = x.data()[c], yc = y[static_cast<size_t>(c)];
        switch (t) {
          case CacheType::float32:
            EXPECT_EQ(yc, xc);
            break;
          case CacheType::bfloat16:
            EXPECT_EQ(yc, al::round_to<al::bfloat16>(xc));
            break;
          case CacheType::float16:
            EXPECT_EQ(yc, al::round_to<al::float16>(xc));
            break;
          case CacheType::int8:
            EXPECT_LE(std::fabs(yc - xc), amax / 127 * 0.5f * 1.0001f) << c;
            break;
          // one step: the largest magnitude m maps to -8, and +|m| (the other sign) clamps to 7
          case CacheType::int4:
            EXPECT_LE(std::fabs(yc - xc), amax / 8 * 1.0001f) << c;
            break;
          case CacheType::fp8_e4m3:  // 3 mantissa bits: half a step is 2^-4 relative (subnormals: 2^-10 absolute)
            EXPECT_LE(std::fabs(yc - xc), std::max(std::fabs(xc) / 16, 1.0f / 1024)) << c;
            break;
        }
      }
    }
  }
}

TEST(KVCacheCodec, Fp8EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN in e4m3fn
    const float y = al::detail::fp8_e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(al::detail::fp8_e4m3_from_float(y), b == 0x80 ? 0x80 : b) << b;
  }
  EXPECT_EQ(al::detail::fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(al::detail::fp8_e4m3_from_float(17.0f), al::detail::fp8_e4m3_from_float(16.0f));  // tie to even
  EXPECT_EQ(al::detail::fp8_e4m3_to_float(al::detail::fp8_e4m3_from_float(19.0f)), 20.0f);
}

TEST(KVCacheCodec, ZeroGroupsAndLimits) {
  std::vector<float> zeros(64, 0.0f), big(64, 1.0f);
  for (CacheType t : kTypes)
    for (float y : round_trip(t, zeros.data(), 64)) EXPECT_EQ(y, 0.0f) << al::to_string(t);
  big[3] = FLT_MAX, big[40] = -FLT_MAX;  // the largest floats: finite scales, and back exactly to ±max·(1 − tiny)
  for (CacheType t : {CacheType::float32, CacheType::int8, CacheType::int4}) {
    const auto y = round_trip(t, big.data(), 64);
    for (float v : y) EXPECT_TRUE(std::isfinite(v)) << al::to_string(t);
    EXPECT_GE(y[3], FLT_MAX * 0.99f) << al::to_string(t);
    EXPECT_LE(y[40], -FLT_MAX * 0.99f) << al::to_string(t);
  }
  std::vector<std::byte> bytes(256);
  float row[2] = {1.0f, 70000.0f};
  EXPECT_EQ(al::detail::encode_row(CacheType::float16, row, 1, 2, 1.0f, bytes.data()), 1);
  row[1] = 65519.0f;  // rounds to float16's 65504
  EXPECT_EQ(al::detail::encode_row(CacheType::float16, row, 1, 2, 1.0f, bytes.data()), -1);
  row[1] = 3.4e38f;
  EXPECT_EQ(al::detail::encode_row(CacheType::bfloat16, row, 1, 2, 1.0f, bytes.data()), 1);
  row[1] = 460.0f;  // rounds to e4m3's 448
  EXPECT_EQ(al::detail::encode_row(CacheType::fp8_e4m3, row, 1, 2, 1.0f, bytes.data()), -1);
  EXPECT_EQ(al::detail::fp8_e4m3_to_float(static_cast<uint8_t>(bytes[1])), 448.0f);
  EXPECT_EQ(al::detail::encode_row(CacheType::fp8_e4m3, row, 1, 2, 0.5f, bytes.data()), 1);  // 920 > 448
}

TEST(KVCache, AppendsAcrossBlocksAndGathersWhatWasStored) {
  std::mt19937_64 rng(2);
  for (CacheType kt : kTypes) {
    al::KVCache cache(config(kt, CacheType::int8));
    const int64_t a = cache.add_sequence(), b = cache.add_sequence();
    al::Tensor<float> ka({1, 2, 0, 80}), va({1, 2, 0, 80});
    std::vector<al::Tensor<float>> chunks_a, chunks_b;
    for (int64_t n : {5, 16, 1, 30}) {  // interleaved: the two sequences' blocks alternate in the pool
      for (int64_t layer = 0; layer < 2; ++layer) {
        auto k1 = random_rows(rng, 2, n, 80), v1 = random_rows(rng, 2, n, 80);
        auto k2 = random_rows(rng, 2, n + 2, 80), v2 = random_rows(rng, 2, n + 2, 80);
        cache.append(layer, a, k1, v1);
        cache.append(layer, b, k2, v2);
        if (layer == 1) chunks_a.push_back(std::move(k1)), chunks_b.push_back(std::move(k2));
      }
    }
    ASSERT_EQ(cache.length(a, 1), 52);
    ASSERT_EQ(cache.length(b, 1), 60);
    al::Tensor<float> k({1, 2, 52, 80}), v({1, 2, 52, 80});
    cache.gather(1, a, k, v);
    int64_t pos = 0;
    for (const auto& chunk : chunks_a) {
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < chunk.shape()[2]; ++t) {
          const auto y = round_trip(kt, chunk.view().row(0, h, t), 80);
          for (int64_t c = 0; c < 80; ++c)
            ASSERT_EQ(k(0, h, pos + t, c), y[static_cast<size_t>(c)]) << al::to_string(kt);
        }
      pos += chunk.shape()[2];
    }
    const auto mem = cache.memory();
    EXPECT_EQ(mem.used_blocks, 4 + 4);  // 52 and 60 positions in blocks of 16
    EXPECT_EQ(mem.sequences, 2);
    EXPECT_EQ(mem.pool_bytes, mem.total_blocks * mem.block_bytes);
    EXPECT_EQ(mem.bytes_per_token * 16, mem.block_bytes);
  }
}

TEST(KVCache, ForkSharesBlocksAndCopiesOnWrite) {
  std::mt19937_64 rng(3);
  al::KVCache cache(config(CacheType::float32, CacheType::int4, 32));
  const int64_t a = cache.add_sequence();
  for (int64_t layer = 0; layer < 2; ++layer)
    cache.append(layer, a, random_rows(rng, 2, 40, 32), random_rows(rng, 2, 40, 32));
  al::Tensor<float> k0({1, 2, 40, 32}), v0({1, 2, 40, 32});
  cache.gather(0, a, k0, v0);
  const int64_t f = cache.fork(a, 37);  // mid-block: blocks 0, 1 shared, block 2 (positions 32..36) too
  EXPECT_EQ(cache.length(f, 1), 37);
  EXPECT_EQ(cache.memory().shared_blocks, 3);
  EXPECT_EQ(cache.memory().used_blocks, 3);
  const auto kf = random_rows(rng, 2, 3, 32), vf = random_rows(rng, 2, 3, 32);
  cache.append(0, f, kf, vf);  // writes into the shared third block: it is copied first
  EXPECT_EQ(cache.memory().used_blocks, 4);
  EXPECT_EQ(cache.memory().shared_blocks, 2);
  al::Tensor<float> k1({1, 2, 40, 32}), v1({1, 2, 40, 32}), k2({1, 2, 40, 32}), v2({1, 2, 40, 32});
  cache.gather(0, a, k1, v1);
  EXPECT_EQ(k1.storage(), k0.storage());  // the source is untouched
  EXPECT_EQ(v1.storage(), v0.storage());
  cache.gather(0, f, k2, v2);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 40; ++t)
      for (int64_t c = 0; c < 32; ++c) ASSERT_EQ(k2(0, h, t, c), t < 37 ? k0(0, h, t, c) : kf(0, h, t - 37, c));
  cache.append(1, f, kf, vf);  // layer 1 of the same block: already copied, no new block
  EXPECT_EQ(cache.memory().used_blocks, 4);
  cache.free(a);
  EXPECT_EQ(cache.memory().used_blocks, 3);
  EXPECT_EQ(cache.memory().shared_blocks, 0);
  cache.gather(0, f, k2, v2);  // still whole after the source is gone
  EXPECT_EQ(k2(1, 1, 5, 7) == k2(1, 1, 5, 7), true);
  for (int64_t t = 0; t < 37; ++t) ASSERT_EQ(k2(0, 1, t, 7), k0(0, 1, t, 7));
  cache.free(f);
  EXPECT_EQ(cache.memory().used_blocks, 0);
}

TEST(KVCache, SameRowsSameBits) {
  std::mt19937_64 rng(4);
  const auto k = random_rows(rng, 2, 50, 80, 5.0f), v = random_rows(rng, 2, 50, 80, 5.0f);
  for (CacheType t : kTypes) {
    al::KVCache one(config(t, t)), two(config(t, t));
    const int64_t s1 = one.add_sequence(), s2 = two.add_sequence();
    one.append(0, s1, k, v);  // one append of 50 rows against 50 appends of one
    for (int64_t i = 0; i < 50; ++i)
      two.append(0, s2, {k.data() + i * 80, {1, 2, 1, 80}, k.view().strides()},
                 {v.data() + i * 80, {1, 2, 1, 80}, v.view().strides()});
    al::Tensor<float> a({1, 2, 50, 80}), b({1, 2, 50, 80}), c({1, 2, 50, 80}), e({1, 2, 50, 80});
    one.gather(0, s1, a, b);
    two.gather(0, s2, c, e);
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.numel() * 4), 0) << al::to_string(t);
    EXPECT_EQ(std::memcmp(b.data(), e.data(), b.numel() * 4), 0) << al::to_string(t);
  }
}

TEST(KVCache, ErrorsNameTheProblemAndChangeNothing) {
  std::mt19937_64 rng(5);
  al::KVCache cache(config(CacheType::int8, CacheType::float16, 80, 64));
  const int64_t s = cache.add_sequence();
  auto k = random_rows(rng, 2, 20, 80), v = random_rows(rng, 2, 20, 80);
  cache.append(0, s, k, v);
  k(0, 1, 4, 9) = NAN;
  std::string m = message_of([&] { cache.append(0, s, k, v); });
  EXPECT_NE(m.find("k[head 1, token 4, channel 9] is nan"), std::string::npos) << m;
  EXPECT_NE(m.find("position 24"), std::string::npos) << m;
  k(0, 1, 4, 9) = 0.0f, v(0, 0, 2, 1) = 1e5f;
  m = message_of([&] { cache.append(0, s, k, v); });
  EXPECT_NE(m.find("does not fit float16"), std::string::npos) << m;
  EXPECT_EQ(cache.length(s, 0), 20);
  v(0, 0, 2, 1) = 0.0f;
  const auto big_k = random_rows(rng, 2, 50, 80), big_v = random_rows(rng, 2, 50, 80);
  m = message_of([&] { cache.append(0, s, big_k, big_v); });  // 70 positions in a pool of 64
  EXPECT_NE(m.find("pool exhausted"), std::string::npos) << m;
  EXPECT_NE(m.find("2 of 4 are free"), std::string::npos) << m;
  EXPECT_EQ(cache.length(s, 0), 20);
  EXPECT_EQ(cache.memory().used_blocks, 2);
  m = message_of([&] { cache.append(0, 99, k, v); });
  EXPECT_NE(m.find("unknown sequence 99"), std::string::npos) << m;
  m = message_of([&] { cache.append(2, s, k, v); });
  EXPECT_NE(m.find("layer 2 is not in [0, 2)"), std::string::npos) << m;
  const auto wrong = random_rows(rng, 3, 1, 80);
  m = message_of([&] { cache.append(0, s, wrong, wrong); });
  EXPECT_NE(m.find("should be [1, 2, 1, 80]"), std::string::npos) << m;
  m = message_of([&] { cache.fork(s, 21); });
  EXPECT_NE(m.find("but its layer 1 holds only 0 (layers hold 20, 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("append the positions to every layer before forking"), std::string::npos) << m;
  m = message_of([] { al::parse_cache_type("q8_0"); });
  EXPECT_NE(m.find("unknown element type 'q8_0'"), std::string::npos) << m;
  al::KVCacheConfig bad = config(CacheType::float32, CacheType::float32);
  bad.key_scales = {2.0f};
  m = message_of([&] { al::KVCache c(bad); });
  EXPECT_NE(m.find("for fp8_e4m3 only"), std::string::npos) << m;
  al::KVCacheConfig fp8 = config(CacheType::fp8_e4m3, CacheType::float32);
  fp8.key_scales = {1.0f, 0.25f};
  al::KVCache small(fp8);
  const int64_t t = small.add_sequence();
  auto kk = random_rows(rng, 2, 1, 80);
  kk(0, 1, 0, 0) = 200.0f;  // 800 > 448 at head 1's scale 0.25
  m = message_of([&] { small.append(0, t, kk, kk); });
  EXPECT_NE(m.find("raise the head's scale"), std::string::npos) << m;
  kk(0, 0, 0, 0) = 200.0f, kk(0, 1, 0, 0) = 100.0f;
  small.append(0, t, kk, kk);
}

// A batch's append: every sequence's rows or none, with the blocks of all of them counted
// together (a block shared by forks and written by all of them is copied once fewer).
TEST(KVCache, BatchAppendIsAllOrNothing) {
  std::mt19937_64 rng(6);
  al::KVCache cache(config(CacheType::float32, CacheType::float32, 32, 64));  // 4 blocks of 16
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  const int64_t seqs[] = {a, b};
  const auto ka = random_rows(rng, 2, 16, 32), kb = random_rows(rng, 2, 20, 32);
  cache.append(0, a, ka, ka);  // 1 block
  cache.append(0, b, kb, kb);  // 2 blocks: 1 of the 4 is free
  al::Tensor<float> more({2, 2, 14, 32});
  std::normal_distribution<float> normal;
  for (float& x : more.storage()) x = normal(rng);
  // a alone would fit (one more block); a and b need two: neither is appended.
  std::string m = message_of([&] { cache.append(0, seqs, more, more); });
  EXPECT_NE(m.find("need 2 more blocks"), std::string::npos) << m;
  EXPECT_NE(m.find("nothing was appended"), std::string::npos) << m;
  EXPECT_EQ(cache.length(a, 0), 16);
  EXPECT_EQ(cache.length(b, 0), 20);
  EXPECT_EQ(cache.memory().used_blocks, 3);
  const int64_t twice[] = {a, a};
  m = message_of([&] { cache.append(0, twice, more, more); });
  EXPECT_NE(m.find("sequence 0 is listed twice"), std::string::npos) << m;
  more(1, 0, 3, 5) = NAN;
  m = message_of([&] { cache.append(1, seqs, more, more); });  // layer 1 has room; b's row 3 is NaN
  EXPECT_NE(m.find("sequence 1, position 3"), std::string::npos) << m;
  EXPECT_EQ(cache.length(a, 1), 0);
  more(1, 0, 3, 5) = 0.0f;
  cache.append(1, seqs, more, more);  // the blocks hold every layer: no new block
  al::Tensor<float> gk({1, 2, 14, 32}), gv({1, 2, 14, 32});
  cache.gather(1, b, gk, gv);
  EXPECT_EQ(std::memcmp(gk.data(), more.data() + 2 * 14 * 32, 2 * 14 * 32 * 4), 0);  // b's rows are more[1]

  // Three forks of a 10-position prefix share its block; all three write into it: 2 copies.
  al::KVCache pool(config(CacheType::float32, CacheType::float32, 32, 48));  // 3 blocks
  const int64_t root = pool.add_sequence();
  al::Tensor<float> prefix({1, 2, 10, 32}, 1.0f);
  pool.append(0, root, prefix, prefix);
  pool.append(1, root, prefix, prefix);
  const int64_t f1 = pool.fork(root, 10), f2 = pool.fork(root, 10);
  const int64_t all[] = {root, f1, f2};
  al::Tensor<float> step({3, 2, 1, 32}, 2.0f);
  pool.append(0, all, step, step);
  EXPECT_EQ(pool.memory().used_blocks, 3);
  EXPECT_EQ(pool.memory().shared_blocks, 0);
  for (int64_t s : all) EXPECT_EQ(pool.length(s, 0), 11);
}

// Each value within its range, their product not: a block of 65536 layers × 65536 heads ×
// 65536 positions × 262144-byte rows is 2^67 bytes, which wraps int64 to 0 (then divided by:
// SIGFPE) or to a small size (an append would write past the pool). Refused, naming the factors.
TEST(KVCache, SizesWhoseProductLeavesMemoryAreRefused) {
  struct Sizes {
    int64_t layers, kv_heads, head_dim, max_tokens, block_tokens;
  };
  for (const Sizes& z : {Sizes{65536, 65536, 65536, 1, 65536}, Sizes{38737, 55424, 17408, 1, 61696},
                         Sizes{1, 65536, 65536, 1, 65536}, Sizes{1, 4096, 4096, int64_t{1} << 40, 65536}}) {
    al::KVCacheConfig c;
    c.layers = z.layers, c.kv_heads = z.kv_heads, c.head_dim = z.head_dim, c.max_tokens = z.max_tokens;
    c.block_tokens = z.block_tokens;
    const std::string m = message_of([&] { al::KVCache cache(c); });
    EXPECT_NE(m.find("beyond the limit of 140737488355328 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("kv_heads " + std::to_string(z.kv_heads)), std::string::npos) << m;
  }
  // Just within: the sizes the pool reports are the products, unwrapped.
  al::KVCacheConfig ok;
  ok.layers = 3, ok.kv_heads = 5, ok.head_dim = 40, ok.max_tokens = 100, ok.block_tokens = 7;
  const al::KVCacheMemory m = al::KVCache(ok).memory();
  EXPECT_EQ(m.block_bytes, 3 * 5 * 7 * (160 + 160));
  EXPECT_EQ(m.pool_bytes, 15 * m.block_bytes);
}

// An append of no rows writes nothing: a fork's shared block stays shared (it was copied),
// and with a full pool it is no error (it was "need 1 more blocks").
TEST(KVCache, AnEmptyAppendTakesNoBlock) {
  std::mt19937_64 rng(7);
  al::KVCacheConfig c = config(CacheType::float32, CacheType::float32, 32, 32);  // 2 blocks of 16
  c.layers = 1;
  al::KVCache cache(c);
  const int64_t s = cache.add_sequence();
  cache.append(0, s, random_rows(rng, 2, 20, 32), random_rows(rng, 2, 20, 32));  // both blocks
  const int64_t f = cache.fork(s, 20);
  const al::Tensor<float> row({1, 2, 1, 32});
  const al::ConstView<float> none(row.data(), {1, 2, 0, 32});  // NumPy's (2, 0, 32): a pointer, no rows
  cache.append(0, f, none, none);
  EXPECT_EQ(cache.memory().shared_blocks, 2);
  EXPECT_EQ(cache.memory().used_blocks, 2);
  EXPECT_EQ(cache.length(f, 0), 20);
}
