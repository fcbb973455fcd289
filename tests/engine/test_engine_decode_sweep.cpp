// The decode path's results, bit for bit, over a sweep of shapes: every row count per K/V
// head from 1 to 64 (grouped heads × queries), d ∈ {64, 80, 128, 256}, float32, bfloat16
// and float16 caches, with K and V taken as in cache and as from memory (the threshold
// of the fused step's requests forced through the test hook), on each SIMD target this
// machine runs. Each target's outputs and log-sum-exps are folded into one digest and
// compared with the digest the library gave before its decode kernels were restructured:
// a change of any bit of any result fails. The digests are target-specific (lane counts
// order the sums), and known only for the targets of the machine they were taken on; on
// another target the test prints its digest and checks determinism alone (two runs).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine_path.hpp"
#include "attnlab/engine.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"

namespace al = attnlab;

namespace {

// FNV-1a over the bytes of a buffer, continuing from h.
uint64_t fold(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

template <class E>
uint64_t run_one(uint64_t h, std::mt19937_64& rng, int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk,
                 int64_t d, bool sinks) {
  // Uniform in [-2, 2): cheap to draw, which keeps the sweep's time in the engine.
  auto nd = [](std::mt19937_64& g) { return static_cast<float>(static_cast<double>(g() >> 40) * 0x1p-22 - 2.0); };
  auto fill = [&](al::Tensor<E>& t) {
    for (int64_t b = 0; b < t.view().batch(); ++b)
      for (int64_t hh = 0; hh < t.view().heads(); ++hh)
        for (int64_t i = 0; i < t.view().seq(); ++i)
          for (int64_t c = 0; c < t.view().dim(); ++c) {
            const float x = nd(rng);
            if constexpr (std::is_same_v<E, float>) t.view()(b, hh, i, c) = x;
            else t.view()(b, hh, i, c) = E::from_float(x);
          }
  };
  al::Tensor<E> q({B, Hq, Nq, d}), k({B, Hkv, Nk, d}), v({B, Hkv, Nk, d}), out({B, Hq, Nq, d});
  al::Tensor<float> lse({B, Hq, Nq, 1});
  fill(q), fill(k), fill(v);
  al::AttentionOptions<float> opt;
  std::vector<float> sink_values;
  if (sinks) {
    for (int64_t i = 0; i < Hq; ++i) sink_values.push_back(nd(rng));
    opt.sinks = sink_values;
  }
  al::engine::attention_forward(q.view(), k.view(), v.view(), opt, {out.view(), lse.view()}, al::ComputeConfig{2});
  EXPECT_EQ(al::test::last_forward_path(), al::engine::ForwardPath::decode);
  h = fold(h, out.view().data(), sizeof(E) * static_cast<size_t>(B * Hq * Nq * d));
  return fold(h, lse.view().data(), sizeof(float) * static_cast<size_t>(B * Hq * Nq));
}

// The digest of the whole sweep on the current target.
uint64_t sweep_digest() {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int from_memory = 0; from_memory < 2; ++from_memory) {
    const al::engine::testing::DecodeFromMemory forced(from_memory != 0);
    for (int64_t rows = 1; rows <= 64; ++rows)
      for (int64_t d : {64, 80, 128, 256})
        for (int type = 0; type < 3; ++type) {
          std::mt19937_64 rng(static_cast<uint64_t>(((rows * 1000 + d) * 3 + type) * 2 + from_memory));
          // rows = group · Nq: a random divisor of rows as the queries.
          std::vector<int64_t> divisors;
          for (int64_t n = 1; n <= rows; ++n)
            if (rows % n == 0) divisors.push_back(n);
          const int64_t Nq = divisors[rng() % divisors.size()], group = rows / Nq;
          const int64_t B = 1 + static_cast<int64_t>(rng() % 2), Hkv = 1 + static_cast<int64_t>(rng() % 2);
          // Whole tiles and a partial one, one to three chunks of keys.
          const int64_t Nk = std::max<int64_t>(2 * Nq, 8 + static_cast<int64_t>(rng() % 1100));
          const bool sinks = rng() % 4 == 0;
          const std::string shape = std::to_string(B) + "/" + std::to_string(group * Hkv) + "/" + std::to_string(Hkv) +
                                    " Nq " + std::to_string(Nq) + " Nk " + std::to_string(Nk) + " d " +
                                    std::to_string(d) + " type " + std::to_string(type);
          SCOPED_TRACE(shape);
          if (type == 0) h = run_one<float>(h, rng, B, group * Hkv, Hkv, Nq, Nk, d, sinks);
          if (type == 1) h = run_one<al::bfloat16>(h, rng, B, group * Hkv, Hkv, Nq, Nk, d, sinks);
          if (type == 2) h = run_one<al::float16>(h, rng, B, group * Hkv, Hkv, Nq, Nk, d, sinks);
        }
  }
  return h;
}

// The digests of the library before the restructuring, by target (Zen 4: AVX-512 with
// AVX512_BF16); AVX3's since 5 to 8 rows take the fused step from d = 64 (decode_strategy.hpp).
// An AVX-512 CPU without AVX512_BF16 takes the float32 products for bfloat16 scores and gives
// another AVX3 digest; the other targets never take them (the same digests on Intel Ice Lake).
const std::map<std::string, uint64_t>& expected_digests() {
  static const std::map<std::string, uint64_t> digests = {
      {"AVX3", 0x51b787b7f3596729ULL},
      {"AVX2", 0x4cdbdd63f71cfc25ULL},
      {"SSE4", 0x1fd749efe6388752ULL},
      {"SCALAR", 0x7945e4e922837698ULL},
  };
  return digests;
}

}  // namespace

TEST(EngineDecodeSweep, EveryTargetGivesTheResultsBitForBitAsBefore) {
  const std::string best = al::engine::target_name();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = al::engine::target_name();
    const uint64_t digest = sweep_digest();
    std::printf("decode sweep digest %s: 0x%016llx\n", name.c_str(), static_cast<unsigned long long>(digest));
    std::fflush(stdout);
    const auto& expected = expected_digests();
    const bool comparable = name != "AVX3" || al::engine::testing::cpu_has_bf16_dot_products();
    if (const auto it = expected.find(name); it != expected.end() && comparable) {
      EXPECT_EQ(digest, it->second) << name;
    } else {
      EXPECT_EQ(sweep_digest(), digest) << name << ": not deterministic";
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(al::engine::target_name(), best);
}
