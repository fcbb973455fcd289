// Attention over the KV cache: where it gathers (d = 80 is outside the fused decode step,
// test_kv_cache_fused.cpp tests that one) bitwise the engine's result on the gathered
// (dequantized, contiguous) K/V, the same for 1 and 2 threads; within the engine's accuracy rule of the
// double reference over the same values (docs/engine.md, "Tolerances"), with the variants;
// and the end-to-end error of each element type against float32 K/V, printed
// (docs/python.md, "Decoding").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "attnlab/engine.hpp"
#include "attnlab/kv_cache.hpp"
#include "core/attention_results.hpp"
#include "engine_check.hpp"

namespace al = attnlab;
using al::CacheType;

namespace {

constexpr CacheType kTypes[] = {CacheType::float32, CacheType::bfloat16, CacheType::float16,
                                CacheType::int8,    CacheType::int4,     CacheType::fp8_e4m3};

void fill(al::Tensor<float>& t, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  for (float& x : t.storage()) x = normal(rng);
}

struct Filled {
  al::KVCache cache;
  std::vector<int64_t> seqs;
};

// Sequences of the given lengths, appended in chunks of up to 23 positions, layer 1 of 2.
Filled filled_cache(CacheType kt, CacheType vt, int64_t hkv, int64_t d, std::vector<int64_t> lengths, uint64_t seed) {
  al::KVCacheConfig c;
  c.layers = 2, c.kv_heads = hkv, c.head_dim = d, c.max_tokens = 4096, c.key_type = kt, c.value_type = vt;
  Filled f{al::KVCache(c), {}};
  std::mt19937_64 rng(seed);
  for (int64_t len : lengths) {
    const int64_t s = f.cache.add_sequence();
    f.seqs.push_back(s);
    for (int64_t done = 0; done < len;) {
      const int64_t n = std::min<int64_t>(23, len - done);
      al::Tensor<float> k({1, hkv, n, d}), v({1, hkv, n, d});
      fill(k, rng, 2.0f), fill(v, rng);
      f.cache.append(1, s, k, v);
      done += n;
    }
  }
  return f;
}

al::ConstView<float> rows(const al::Tensor<float>& x, int64_t s, int64_t row0, int64_t n, bool packed) {
  if (!packed)
    return {x.data() + s * x.view().strides()[0], {1, x.shape()[1], x.shape()[2], x.shape()[3]}, x.view().strides()};
  return {x.data() + row0 * x.shape()[3], {1, x.shape()[1], n, x.shape()[3]}, x.view().strides()};
}

bool same_bits(al::ConstView<float> a, al::ConstView<float> b) {
  for (int64_t h = 0; h < a.heads(); ++h)
    for (int64_t i = 0; i < a.seq(); ++i)
      if (std::memcmp(a.row(0, h, i), b.row(0, h, i), static_cast<size_t>(a.dim()) * 4) != 0) return false;
  return true;
}

}  // namespace

TEST(KVCacheAttention, EqualsTheEngineOnTheGatheredCacheForAnyThreads) {
  const std::vector<int64_t> lengths = {1, 31, 32, 33, 100, 300};
  for (CacheType kt : kTypes)
    for (bool packed : {false, true}) {
      const CacheType vt = kTypes[(static_cast<int>(kt) + 3) % 6];
      Filled f = filled_cache(kt, vt, 2, 80, lengths, 7);
      std::mt19937_64 rng(8);
      // Decoding (3 rows per sequence), or chunked prefill: a chunk of its own per sequence.
      const std::vector<int64_t> qlen = {1, 5, 32, 0, 17, 64};
      const int64_t total = packed ? 119 : 3, n_seq = packed ? 1 : 6;
      al::Tensor<float> q({n_seq, 8, total, 80}), out({n_seq, 8, total, 80}), lse({n_seq, 8, total, 1});
      al::Tensor<float> out2(out.shape()), lse2(lse.shape());
      fill(q, rng);
      al::AttentionOptions<float> o;
      o.causal = al::Causal::bottom_right;
      const std::span<const int64_t> ql = packed ? std::span<const int64_t>(qlen) : std::span<const int64_t>();
      al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out, lse}, ql, {.threads = 1});
      al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out2, lse2}, ql, {.threads = 2});
      EXPECT_EQ(std::memcmp(out.data(), out2.data(), out.numel() * 4), 0);
      EXPECT_EQ(std::memcmp(lse.data(), lse2.data(), lse.numel() * 4), 0);
      int64_t row0 = 0;
      for (size_t s = 0; s < lengths.size(); ++s) {
        const int64_t n = packed ? qlen[s] : 3;
        if (n == 0) continue;  // a sequence with no new row this call
        al::Tensor<float> k({1, 2, lengths[s], 80}), v({1, 2, lengths[s], 80}), os({1, 8, n, 80}), ls({1, 8, n, 1});
        f.cache.gather(1, f.seqs[s], k, v);
        al::engine::attention_forward(rows(q, static_cast<int64_t>(s), row0, n, packed), k.view(), v.view(), o,
                                      {os.view(), ls.view()}, {.threads = 2});
        EXPECT_TRUE(same_bits(os, rows(out, static_cast<int64_t>(s), row0, n, packed)))
            << al::to_string(kt) << " seq " << s;
        EXPECT_TRUE(same_bits(ls, rows(lse, static_cast<int64_t>(s), row0, n, packed)))
            << al::to_string(kt) << " seq " << s;
        row0 += n;
      }
    }
}

// A call of many sequences, each too small for a team of its own (the decode grain: 2 MiB of
// K and V), runs them side by side, one thread each: the same bits as each sequence alone
// and as one thread; an error is the one the first failing sequence in order gives; the
// caller's interrupt is asked on the calling thread only; one query row a sequence and chunked
// prefill (up to 64 rows a K/V head: the tile step). d = 128, 32/8 heads (4 rows a query):
// float32 and bfloat16 take the engine's fused step in place, int8 keys with int4 values the
// cache's step. float32 is 8 KiB a position: 300 and 900 positions take a team, the rest (up
// to 256) do not and hold 9.2 MB together; int8/int4 (1.7 KiB) all run side by side.
TEST(KVCacheAttention, SmallSequencesSideBySideGiveEachSequencesOwnBits) {
  const std::vector<int64_t> lengths = {40, 250, 130, 300, 7, 200, 256, 90, 180, 900};
  const std::pair<CacheType, CacheType> types[] = {
      {CacheType::float32, CacheType::float32}, {CacheType::bfloat16, CacheType::bfloat16}, {CacheType::int8, CacheType::int4}};
  const auto n_seq = static_cast<int64_t>(lengths.size());
  for (const auto& [kt, vt] : types) {
    Filled f = filled_cache(kt, vt, 8, 128, lengths, 21);
    std::mt19937_64 rng(22);
    al::Tensor<float> q({n_seq, 32, 1, 128}), out({n_seq, 32, 1, 128}), lse({n_seq, 32, 1, 1});
    al::Tensor<float> out1(out.shape()), lse1(lse.shape());
    fill(q, rng);
    al::AttentionOptions<float> o;
    o.causal = al::Causal::bottom_right;
    al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out, lse}, {}, {.threads = 2});
    al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out1, lse1}, {}, {.threads = 1});
    EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.numel() * 4), 0) << al::to_string(kt);
    EXPECT_EQ(std::memcmp(lse.data(), lse1.data(), lse.numel() * 4), 0) << al::to_string(kt);
    for (int64_t s = 0; s < n_seq; ++s) {
      al::Tensor<float> os({1, 32, 1, 128}), ls({1, 32, 1, 1});
      const int64_t id[] = {f.seqs[static_cast<size_t>(s)]};
      al::kv_cache_attention(f.cache, 1, id, rows(q, s, 0, 1, false), o, {os.view(), ls.view()}, {}, {.threads = 2});
      EXPECT_TRUE(same_bits(os, rows(out, s, 0, 1, false))) << al::to_string(kt) << " seq " << s;
      EXPECT_TRUE(same_bits(ls, rows(lse, s, 0, 1, false))) << al::to_string(kt) << " seq " << s;
    }
    // Chunked prefill, packed: rows of their own per sequence (none for one), the same.
    const std::vector<int64_t> qlen = {1, 3, 0, 2, 1, 5, 1, 1, 4, 16};
    al::Tensor<float> qp({1, 32, 34, 128}), op({1, 32, 34, 128}), lp({1, 32, 34, 1}), op1(op.shape()), lp1(lp.shape());
    fill(qp, rng);
    al::kv_cache_attention(f.cache, 1, f.seqs, qp, o, {op, lp}, qlen, {.threads = 2});
    al::kv_cache_attention(f.cache, 1, f.seqs, qp, o, {op1, lp1}, qlen, {.threads = 1});
    EXPECT_EQ(std::memcmp(op.data(), op1.data(), op.numel() * 4), 0) << al::to_string(kt) << " packed";
    for (int64_t s = 0, row0 = 0; s < n_seq; row0 += qlen[static_cast<size_t>(s)], ++s) {
      const int64_t n = qlen[static_cast<size_t>(s)];
      if (n == 0) continue;
      al::Tensor<float> os({1, 32, n, 128}), ls({1, 32, n, 1});
      const int64_t id[] = {f.seqs[static_cast<size_t>(s)]};
      al::kv_cache_attention(f.cache, 1, id, rows(qp, 0, row0, n, true), o, {os.view(), ls.view()}, {}, {.threads = 2});
      EXPECT_TRUE(same_bits(os, rows(op, 0, row0, n, true))) << al::to_string(kt) << " packed seq " << s;
      EXPECT_TRUE(same_bits(ls, rows(lp, 0, row0, n, true))) << al::to_string(kt) << " packed seq " << s;
    }

    // Non-finite queries in sequences 8 and 5 (both side by side): sequence 5 is named, whatever the threads.
    al::Tensor<float> bad = q;
    bad.data()[(8 * 32 + 3) * 128 + 7] = NAN;
    bad.data()[(5 * 32 + 9) * 128 + 1] = INFINITY;
    al::AttentionOptions<float> checked = o;
    checked.check_finite = true;
    for (int threads : {1, 2}) {
      try {
        al::kv_cache_attention(f.cache, 1, f.seqs, bad, checked, {out1, lse1}, {}, {.threads = threads});
        ADD_FAILURE() << "no error for a non-finite query";
      } catch (const al::Error& e) {
        EXPECT_NE(std::string(e.what()).find("q[5, 9, 0] = inf"), std::string::npos) << e.what();
      }
    }

    // An interrupt that says stop at once: Interrupted; one that never does: the same bits. Both
    // are asked on the calling thread alone (Python's asks for the GIL).
    std::mutex m;
    std::vector<std::thread::id> askers;
    auto asked = [&] {
      const std::lock_guard<std::mutex> lock(m);
      askers.push_back(std::this_thread::get_id());
    };
    al::ComputeConfig stop_now{.threads = 2, .interrupt = [&] { return asked(), true; }};
    EXPECT_THROW(al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out1, lse1}, {}, stop_now), al::Interrupted);
    al::ComputeConfig never{.threads = 2, .interrupt = [&] { return asked(), false; }};
    al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out1, lse1}, {}, never);
    EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.numel() * 4), 0) << al::to_string(kt);
    EXPECT_FALSE(askers.empty());
    for (const std::thread::id& id : askers) EXPECT_EQ(id, std::this_thread::get_id());
  }
}

// The engine over the cache against the reference over the cache, under the rule
// err ≤ 2·err(naive float32) + 16 ulp·size·(1 + max|L|), for O and L, with the variants.
TEST(KVCacheAttention, WithinTheAccuracyRuleWithVariants) {
  for (int variant = 0; variant < 5; ++variant)
    for (CacheType kt : {CacheType::float32, CacheType::int8, CacheType::int4, CacheType::fp8_e4m3}) {
      const std::vector<int64_t> lengths = {7, 64, 250};
      Filled f = filled_cache(kt, kt, 2, 64, lengths, 10 + static_cast<uint64_t>(variant));
      std::mt19937_64 rng(11);
      al::test::Problem p;  // each sequence's problem: its queries and the gathered K/V in double
      std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625}, sinks = {0.5, -1.0, 2.0, 0.0};
      std::vector<float> slopes_f(slopes.begin(), slopes.end()), sinks_f(sinks.begin(), sinks.end());
      al::AttentionOptions<float> o;
      o.causal = al::Causal::bottom_right;
      if (variant == 1) o.window = {40, 0};
      if (variant == 2) o.softcap = 5.0;
      if (variant == 3) o.alibi_slopes = slopes_f;
      if (variant == 4) o.sinks = sinks_f;
      al::AttentionOptions<double> od;
      od.causal = o.causal, od.window = o.window, od.softcap = o.softcap;
      if (variant == 3) od.alibi_slopes = slopes;
      if (variant == 4) od.sinks = sinks;
      al::Tensor<float> q({3, 4, 4, 64}), out({3, 4, 4, 64}), lse({3, 4, 4, 1});
      fill(q, rng);
      al::Tensor<double> qd(q.shape()), outd(out.shape()), lsed(lse.shape());
      std::copy(q.storage().begin(), q.storage().end(), qd.storage().begin());
      al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out, lse});
      al::reference::kv_cache_attention(f.cache, 1, f.seqs, qd, od, {outd, lsed});
      for (size_t s = 0; s < lengths.size(); ++s) {
        std::mt19937_64 r2(12);
        p = al::test::make_problem(r2, 1, 4, 2, 4, lengths[s], 64, 64);
        al::Tensor<float> k({1, 2, lengths[s], 64}), v({1, 2, lengths[s], 64});
        f.cache.gather(1, f.seqs[s], k, v);
        std::copy(k.storage().begin(), k.storage().end(), p.k.storage().begin());
        std::copy(v.storage().begin(), v.storage().end(), p.v.storage().begin());
        for (int64_t i = 0; i < p.q.numel(); ++i) p.q.data()[i] = q.data()[static_cast<int64_t>(s) * p.q.numel() + i];
        p.causal = od.causal, p.window = od.window, p.softcap = od.softcap;
        if (variant == 3) p.alibi_slopes = slopes;
        if (variant == 4) p.sinks = sinks;
        const al::test::FloatProblem fp(p);
        const auto nv = al::test::naive_float_attention(p, fp, true);
        const auto rf = al::detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
        const al::Tensor<double>* ref[al::test::kQuantities] = {&rf.out, &rf.lse, &rf.out, &rf.out, &rf.out, &rf.out};
        const auto floor = al::test::accuracy_floors(p, rf, ref, nv);
        al::Tensor<double> eo({1, 4, 4, 64}), el({1, 4, 4, 1}), ro(eo.shape()), rl(el.shape());
        for (int64_t i = 0; i < eo.numel(); ++i)
          eo.data()[i] = out.data()[static_cast<int64_t>(s) * eo.numel() + i],
          ro.data()[i] = outd.data()[static_cast<int64_t>(s) * eo.numel() + i];
        for (int64_t i = 0; i < el.numel(); ++i)
          el.data()[i] = lse.data()[static_cast<int64_t>(s) * el.numel() + i],
          rl.data()[i] = lsed.data()[static_cast<int64_t>(s) * el.numel() + i];
        EXPECT_EQ(al::test::max_abs_diff(ro, rf.out),
                  0.0);  // the cache's oracle is the reference on the gathered values
        EXPECT_LE(al::test::max_abs_diff(eo, ro),
                  2 * al::test::max_abs_diff(al::test::to_double(nv.out), rf.out) + floor[0])
            << "variant " << variant << " " << al::to_string(kt);
        EXPECT_LE(al::test::max_abs_diff(el, rl),
                  2 * al::test::max_abs_diff(al::test::to_double(nv.lse), rf.lse) + floor[1])
            << "variant " << variant << " " << al::to_string(kt);
      }
    }
}

TEST(KVCacheAttention, RejectsWhatTheCacheCannotMean) {
  Filled f = filled_cache(CacheType::float32, CacheType::float32, 2, 32, {10}, 1);
  al::Tensor<float> q({1, 4, 1, 32}), out({1, 4, 1, 32}), lse({1, 4, 1, 1}), q3({1, 3, 1, 32});
  auto message = [&](const al::AttentionOptions<float>& o, al::ConstView<float> qq, int64_t layer = 1) {
    try {
      al::kv_cache_attention(f.cache, layer, f.seqs, qq, o, {out, lse});
    } catch (const al::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  al::AttentionOptions<float> o;
  o.causal = al::Causal::top_left;
  EXPECT_NE(message(o, q).find("causal top_left"), std::string::npos);
  o.causal = al::Causal::bottom_right;
  const int64_t lengths[] = {10};
  o.key_lengths = lengths;
  EXPECT_NE(message(o, q).find("key_lengths"), std::string::npos);
  o.key_lengths = {};
  o.query_offset = 3;  // the cache places its rows itself
  EXPECT_NE(message(o, q).find("query_offset/key_offset"), std::string::npos);
  o.query_offset = 0;
  EXPECT_NE(message(o, q3).find("not a positive multiple of the cache's 2 K/V heads"), std::string::npos);
  EXPECT_NE(message(o, q, 5).find("layer 5"), std::string::npos);
  EXPECT_EQ(message(o, q), "(no error)");
}

// End-to-end error of each element type (keys and values both) against float32 K/V:
// max |O − O_f32| / max |O_f32| over 4 sequences of 1024 positions, 32/8 heads, d = 128,
// one query row each; on standard normal data, and on keys with 4 large channels per head
// (offset 20, spread 4: the outliers of trained models' keys).
TEST(KVCacheAttention, AccuracyOfEachTypeAgainstFloat32) {
  for (bool outliers : {false, true}) {
    std::mt19937_64 rng(20);
    const int64_t hkv = 8, hq = 32, d = 128, len = 1024, n_seq = 4;
    std::vector<al::Tensor<float>> ks, vs;
    for (int64_t s = 0; s < n_seq; ++s) {
      al::Tensor<float> k({1, hkv, len, d}), v({1, hkv, len, d});
      fill(k, rng), fill(v, rng);
      if (outliers)
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t t = 0; t < len; ++t)
            for (int64_t c : {3, 40, 77, 101}) k(0, h, t, c) = 20.0f + 4.0f * k(0, h, t, c);
      ks.push_back(std::move(k)), vs.push_back(std::move(v));
    }
    al::Tensor<float> q({n_seq, hq, 1, d});
    fill(q, rng);
    al::AttentionOptions<float> o;
    o.causal = al::Causal::bottom_right;
    al::Tensor<float> base({n_seq, hq, 1, d});
    std::printf("%-9s %s\n", "type",
                outliers ? "keys with 4 large channels: max|O-O32|/max|O32|" : "random: max|O-O32|/max|O32|");
    for (CacheType t : kTypes) {
      al::KVCacheConfig c;
      c.kv_heads = hkv, c.head_dim = d, c.max_tokens = n_seq * len, c.key_type = t, c.value_type = t;
      if (t == CacheType::fp8_e4m3)
        c.key_scales = {outliers ? 0.1f : 0.02f}, c.value_scales = {0.02f};  // max/448 of the data
      al::KVCache cache(c);
      std::vector<int64_t> seqs;
      for (int64_t s = 0; s < n_seq; ++s)
        seqs.push_back(cache.add_sequence()), cache.append(0, seqs.back(), ks[s], vs[s]);
      al::Tensor<float> out({n_seq, hq, 1, d}), lse({n_seq, hq, 1, 1});
      al::kv_cache_attention(cache, 0, seqs, q, o, {out, lse});
      if (t == CacheType::float32) base = out;
      double err = 0, big = 0;
      for (int64_t i = 0; i < out.numel(); ++i)
        err = std::max(err, std::fabs(double(out.data()[i]) - base.data()[i])),
        big = std::max(big, std::fabs(double(base.data()[i])));
      std::printf("%-9s %.2e\n", al::to_string(t), err / big);
      // About 1.5 times what was measured (docs/python.md): a quantization that got worse fails.
      const double bound = (t == CacheType::int4       ? 0.2
                            : t == CacheType::fp8_e4m3 ? 0.07
                            : t == CacheType::int8     ? 0.013
                            : t == CacheType::bfloat16 ? 0.0045
                                                       : 0.0006) *
                           (outliers ? 6.0 : 1.0);
      EXPECT_LE(err / big, bound) << al::to_string(t);
    }
    // The alternative int8 grouping: one scale per token and head (d = max|row|/127), by hand.
    al::Tensor<float> out({n_seq, hq, 1, d}), lse({n_seq, hq, 1, 1});
    for (int64_t s = 0; s < n_seq; ++s) {
      al::Tensor<float> k = ks[s], v = vs[s];
      for (al::Tensor<float>* x : {&k, &v})
        for (int64_t r = 0; r < hkv * len; ++r) {
          float* row = x->data() + r * d;
          float amax = 0;
          for (int64_t c = 0; c < d; ++c) amax = std::max(amax, std::fabs(row[c]));
          const float step = amax / 127;
          for (int64_t c = 0; c < d; ++c) row[c] = std::nearbyint(row[c] / step) * step;
        }
      al::engine::attention_forward<float>(
          {q.data() + s * hq * d, {1, hq, 1, d}}, k, v, o,
          {{out.data() + s * hq * d, {1, hq, 1, d}}, {lse.data() + s * hq, {1, hq, 1, 1}}});
    }
    double err = 0, big = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      err = std::max(err, std::fabs(double(out.data()[i]) - base.data()[i])),
      big = std::max(big, std::fabs(double(base.data()[i])));
    std::printf("%-9s %.2e  (int8, one scale per token and head)\n", "int8/row", err / big);
  }
}

// One validation of the options for every path: the fused decode step (≤ 8 rows per K/V head,
// d a multiple of 32) refuses what the chunked path and the engine refuse, with the same
// words; it once read slopes past the vector's end and took softcap 0 or NaN.
TEST(KVCacheAttention, EveryPathRefusesTheSameOptions) {
  Filled f = filled_cache(CacheType::float32, CacheType::float32, 1, 32, {40}, 3);
  const std::vector<float> one = {0.5f}, four = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> nan4 = {0.5f, NAN, 0.5f, 0.5f}, inf4 = {0.5f, 0.5f, INFINITY, 0.5f};
  struct Bad {
    const char* expected;
    std::function<void(al::AttentionOptions<float>&)> set;
  };
  const std::vector<Bad> bads = {
      {"alibi_slopes: 1 value; expected Hq = 4", [&](auto& o) { o.alibi_slopes = one; }},
      {"sinks: 1 value; expected one per query head (Hq = 4)", [&](auto& o) { o.sinks = one; }},
      {"window: (-5, 0) has a side below -1", [](auto& o) { o.window = {-5, 0}; }},
      {"softcap: 0 must be a positive finite number", [](auto& o) { o.softcap = 0.0; }},
      {"softcap: -1 must be a positive finite number", [](auto& o) { o.softcap = -1.0; }},
      {"softcap: nan must be a positive finite number", [](auto& o) { o.softcap = NAN; }},
      {"alibi_slopes: non-finite value nan at [1]", [&](auto& o) { o.alibi_slopes = nan4; }},
      {"sinks: non-finite value inf at [2]", [&](auto& o) { o.sinks = inf4; }},
  };
  for (const int64_t rows : {1, 20}) {  // 1: the fused step; 20 rows: gathered, then the engine
    al::Tensor<float> q({1, 4, rows, 32}), out({1, 4, rows, 32}), lse({1, 4, rows, 1});
    for (const Bad& bad : bads) {
      al::AttentionOptions<float> o;
      bad.set(o);
      std::string m = "(no error)";
      try {
        al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out, lse});
      } catch (const al::Error& e) {
        m = e.what();
      }
      EXPECT_NE(m.find(bad.expected), std::string::npos) << rows << " rows: " << m;
    }
    al::AttentionOptions<float> o;
    o.alibi_slopes = four;
    al::kv_cache_attention(f.cache, 1, f.seqs, q, o, {out, lse});  // the right count works on both
  }
}
