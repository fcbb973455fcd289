// Decoding against the KV cache, every figure of docs/python.md's "Decoding" table from one
// command: B = 1, one query row, Nk positions, d = 128, Hkv = 8 and Hq = 8 or 32, for each
// cache type
//   paged       kv_cache_attention over the cache's blocks (128 positions; the fused step, in place)
//   contiguous  the same kernel over one block holding the whole sequence (block_tokens = Nk)
//   gathered    the path the fused step replaced: gather() to float32, then the engine
//   engine      the contiguous engine on K/V tensors (float32 and float16 only)
//   turned      with --turned: paged, keys and values rotated and keys centred
//               (kv_cache.hpp, "Outliers"), against paged: the rotation's cost
//   in-cache    paged, the same Nk keys a head read from blocks held in the last-level cache:
//               the step's arithmetic time, to tell which bound each paged step is under
// timed in interleaved rounds (every case once a round, in a shuffled order), medians and the
// spread (min and max), the GB/s of the K/V bytes each step reads (codes and scales), and
// that rate as a fraction of this machine's read bandwidth (bench/peak_memory.hpp, probed
// before and after the rounds). Then the targets of the cache (int8 and int4 over float16,
// paged over contiguous, 32/8 over 8/8) and each paged step's bounds: its read time at the
// probe's rate, its in-cache time, its products' time at the FMA peak (bench/peak_flops.hpp).
//
//   attnlab_bench_kv_cache [--threads 2] [--rounds 15] [--nk 32768] [--types float32,float16,int8,int4]
//                          [--no-gathered] [--turned] [--block-tokens N (default: the cache's)]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attnlab/engine.hpp"
#include "attnlab/kv_cache.hpp"
#include "peak_flops.hpp"
#include "peak_memory.hpp"

namespace al = attnlab;

namespace {

struct Args {
  int threads = 2, rounds = 15;
  int64_t nk = 32768, d = 128, hkv = 8, block_tokens = al::KVCacheConfig{}.block_tokens;
  std::vector<std::string> types = {"float32", "float16", "int8", "int4"};
  bool gathered = true, turned = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw al::Error("attnlab_bench_kv_cache: " + f + " needs a value");
      return argv[++i];
    };
    if (f == "--threads") a.threads = std::stoi(value());
    else if (f == "--rounds") a.rounds = std::stoi(value());
    else if (f == "--nk") a.nk = std::stoll(value());
    else if (f == "--block-tokens")
      a.block_tokens = std::stoll(value());
    else if (f == "--no-gathered") a.gathered = false;
    else if (f == "--turned") a.turned = true;
    else if (f == "--types") {
      a.types.clear();
      std::string t = value();
      for (size_t p = 0; p <= t.size();) {
        const size_t e = std::min(t.find(',', p), t.size());
        a.types.push_back(t.substr(p, e - p));
        al::parse_cache_type(a.types.back());  // an unknown name is an Error here
        p = e + 1;
      }
    } else throw al::Error("attnlab_bench_kv_cache: unknown argument " + f);
  }
  if (a.threads < 1 || a.rounds < 1 || a.nk < 1 || a.block_tokens < 1)
    throw al::Error("attnlab_bench_kv_cache: values must be positive");
  return a;
}

struct Case {
  std::string name;  // e.g. "int8 paged 32/8"
  double bytes = 0;  // K/V bytes one step reads
  std::function<void()> run;
  std::vector<double> ms;
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const int64_t nk = a.nk, d = a.d, hkv = a.hkv;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  al::Tensor<float> k({1, hkv, nk, d}), v({1, hkv, nk, d});
  for (float& x : k.storage()) x = normal(rng);
  for (float& x : v.storage()) x = normal(rng);
  al::AttentionOptions<float> o;
  o.causal = al::Causal::bottom_right;
  const al::ComputeConfig cfg{.threads = a.threads};
  const int64_t heads[] = {8, 32};
  std::map<int64_t, al::Tensor<float>> q, out, lse;
  std::map<int64_t, al::Tensor<al::float16>> q16, out16;
  for (int64_t hq : heads) {
    q.emplace(hq, al::Tensor<float>({1, hq, 1, d}));
    for (float& x : q.at(hq).storage()) x = normal(rng);
    out.emplace(hq, al::Tensor<float>({1, hq, 1, d}));
    lse.emplace(hq, al::Tensor<float>({1, hq, 1, 1}));
    q16.emplace(hq, al::Tensor<al::float16>({1, hq, 1, d}));
    for (int64_t i = 0; i < hq * d; ++i) q16.at(hq).data()[i] = al::float16::from_float(q.at(hq).data()[i]);
    out16.emplace(hq, al::Tensor<al::float16>({1, hq, 1, d}));
  }
  std::vector<Case> cases;
  std::vector<std::unique_ptr<al::KVCache>> caches;
  // The step's time when reading costs little: the same call, Nk keys a head, its positions
  // from blocks that stay in cache. F forks each share the first Nk/F positions of the paged
  // sequence, and one call decodes all F, one query each. F is at least 64 and large enough
  // that a fork reads at most 2 MiB (the decode grain, engine/decode_path.hpp): the forks then
  // run side by side, one thread each, with no fork and join per sequence. What is left is
  // the arithmetic (dequantizing, scores, softmax, values) and each sequence's setup; where it
  // is near the paged time, memory is not the bound. At small Nk the setup dominates: read it
  // at the default 32768 (a fork of 512 positions or more).
  constexpr int64_t kInCacheMinSequences = 64, kDecodeGrainBytes = int64_t{2} << 20;
  struct InCache {
    std::vector<int64_t> seqs;
    al::Tensor<float> q, out, lse;
  };
  std::deque<InCache> in_cache;  // stable addresses for the cases' closures
  auto add_in_cache_cases = [&](const std::string& tn, al::KVCache& cache, int64_t s) {
    const int64_t bytes_per_token = cache.memory().bytes_per_token;
    int64_t f = std::min(kInCacheMinSequences, nk);
    while (nk / f * bytes_per_token > kDecodeGrainBytes && nk / f > a.block_tokens) f *= 2;
    const int64_t p = nk / f;  // f·p = Nk when f divides Nk
    std::vector<int64_t> seqs;
    for (int64_t i = 0; i < f; ++i) seqs.push_back(cache.fork(s, p));
    for (int64_t hq : heads) {
      InCache& c = in_cache.emplace_back(InCache{seqs, al::Tensor<float>({f, hq, 1, d}), al::Tensor<float>({f, hq, 1, d}),
                                                  al::Tensor<float>({f, hq, 1, 1})});
      for (int64_t i = 0; i < f; ++i) std::copy_n(q.at(hq).data(), hq * d, c.q.data() + i * hq * d);
      const al::KVCache* cp = &cache;
      cases.push_back({fmt::format("{} in-cache {}/{}", tn, hq, hkv), static_cast<double>(bytes_per_token * f * p),
                       [cp, &c, &o, cfg] {
                         al::kv_cache_attention(*cp, 0, c.seqs, c.q.view(), o, {c.out.view(), c.lse.view()}, {}, cfg);
                       }, {}});
    }
  };
  for (const std::string& tn : a.types) {
    const al::CacheType t = al::parse_cache_type(tn);
    for (int layout = 0; layout < (a.turned ? 3 : 2); ++layout) {
      const bool paged = layout != 1, turned = layout == 2;
      al::KVCacheConfig c;
      c.kv_heads = hkv, c.head_dim = d, c.max_tokens = nk, c.key_type = t, c.value_type = t;
      c.block_tokens = paged ? a.block_tokens : nk;
      if (turned) c.key_rotation = c.value_rotation = al::CacheRotation::hadamard, c.center_keys = true;
      if (t == al::CacheType::fp8_e4m3) c.key_scales = {0.02f}, c.value_scales = {0.02f};
      caches.push_back(std::make_unique<al::KVCache>(c));
      al::KVCache& cache = *caches.back();
      const int64_t s = cache.add_sequence();
      cache.append(0, s, k, v);
      const double bytes = static_cast<double>(cache.memory().bytes_per_token * nk);
      if (paged && !turned) add_in_cache_cases(tn, cache, s);
      for (int64_t hq : heads) {
        const std::string name =
            fmt::format("{} {} {}/{}", tn, turned ? "turned" : paged ? "paged" : "contiguous", hq, hkv);
        al::KVCache* cp = &cache;
        cases.push_back({name, bytes, [cp, s, hq, &q, &out, &lse, &o, cfg] {
                           const int64_t id[] = {s};
                           al::kv_cache_attention(*cp, 0, id, q.at(hq).view(), o, {out.at(hq).view(), lse.at(hq).view()}, {}, cfg);
                         }, {}});
        if (paged && !turned && a.gathered)
          cases.push_back({fmt::format("{} gathered {}/{}", tn, hq, hkv), bytes, [cp, s, hq, hkv, nk, d, &q, &out, &lse, &o, cfg] {
                             al::Tensor<float> kg({1, hkv, nk, d}), vg({1, hkv, nk, d});
                             cp->gather(0, s, kg, vg);
                             al::engine::attention_forward<float>(q.at(hq).view(), kg.view(), vg.view(), o, {out.at(hq).view(), lse.at(hq).view()}, cfg);
                           }, {}});
      }
    }
  }
  al::Tensor<al::float16> k16({1, hkv, nk, d}), v16({1, hkv, nk, d});
  for (int64_t i = 0; i < k.numel(); ++i)
    k16.data()[i] = al::float16::from_float(k.data()[i]), v16.data()[i] = al::float16::from_float(v.data()[i]);
  for (int64_t hq : heads) {
    cases.push_back({fmt::format("float32 engine {}/{}", hq, hkv), 8.0 * static_cast<double>(hkv * nk * d),
                     [&, hq] { al::engine::attention_forward<float>(q.at(hq).view(), k.view(), v.view(), o, {out.at(hq).view(), lse.at(hq).view()}, cfg); }, {}});
    cases.push_back({fmt::format("float16 engine {}/{}", hq, hkv), 4.0 * static_cast<double>(hkv * nk * d),
                     [&, hq] { al::engine::attention_forward<al::float16>(q16.at(hq).view(), k16.view(), v16.view(), o, {out16.at(hq).view(), lse.at(hq).view()}, cfg); }, {}});
  }
  const al::bench::Peak fma_peak = al::bench::measure_peak(a.threads);
  const al::bench::Bandwidth before = al::bench::measure_read_bandwidth(a.threads);
  for (Case& c : cases) c.run();  // warm: pages touched, threads created
  // Each round in its own order: a case that reads the K/V another case just read may find
  // part of it in the last-level cache, so no case may always follow the same one.
  std::vector<size_t> order(cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 shuffle_rng(7);
  for (int r = 0; r < a.rounds; ++r) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (size_t i : order) {
      Case& c = cases[i];
      const auto t0 = std::chrono::steady_clock::now();
      c.run();
      c.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const al::bench::Bandwidth after = al::bench::measure_read_bandwidth(a.threads);
  const double peak = std::max(before.gbps, after.gbps);
  std::printf("B = 1, one query, Nk = %lld, d = %lld, %d threads, %d interleaved rounds; read bandwidth %.1f GB/s "
              "before, %.1f after (%s)\n",
              static_cast<long long>(nk), static_cast<long long>(d), a.threads, a.rounds, before.gbps, after.gbps,
              before.reader.name().c_str());
  std::printf("%-28s %9s %17s %9s %8s\n", "case", "median ms", "min-max ms", "GB/s", "of peak");
  std::map<std::string, double> med;
  for (const Case& c : cases) {
    const double m = median(c.ms);
    med[c.name] = m;
    const auto [lo, hi] = std::minmax_element(c.ms.begin(), c.ms.end());
    std::printf("%-28s %9.3f %8.3f-%8.3f %9.1f %7.0f%%\n", c.name.c_str(), m, *lo, *hi, c.bytes / m / 1e6,
                100.0 * c.bytes / m / 1e6 / peak);
  }
  std::printf("\ntargets (ratios of medians)\n");
  auto ratio = [&](const std::string& num, const std::string& den, const char* target) {
    if (med.count(num) && med.count(den))
      std::printf("  %-26s / %-26s %6.2fx  (%s)\n", den.c_str(), num.c_str(), med[den] / med[num], target);
  };
  for (const char* h : {"8/8", "32/8"}) {
    ratio(fmt::format("int8 paged {}", h), fmt::format("float16 paged {}", h), "speed-up, target >= 1.7");
    ratio(fmt::format("int4 paged {}", h), fmt::format("float16 paged {}", h), "speed-up, target >= 2.8");
    for (const std::string& tn : a.types)
      ratio(fmt::format("{} contiguous {}", tn, h), fmt::format("{} paged {}", tn, h), "paged time over contiguous, target <= 1.05");
    for (const std::string& tn : a.types)
      ratio(fmt::format("{} paged {}", tn, h), fmt::format("{} turned {}", tn, h), "rotated time over plain, target <= 1.05");
    ratio(fmt::format("float32 paged {}", h), fmt::format("float32 engine {}", h), "engine time over paged float32");
    ratio(fmt::format("float16 paged {}", h), fmt::format("float16 engine {}", h), "engine time over paged float16");
  }
  for (const std::string& tn : a.types)
    ratio(fmt::format("{} paged 8/8", tn), fmt::format("{} paged 32/8", tn), "32/8 time over 8/8, target <= 1.10");

  // Which bound each paged step is under: reading its K/V at the probe's rate, or its
  // arithmetic (the in-cache time). The products alone at the FMA peak, 4·Hq·Nk·d FLOPs,
  // show how much of that arithmetic is the dequantizing and the softmax around them.
  std::printf("\nbounds of the paged steps: read = K/V bytes at %.1f GB/s; in cache = the in-cache median; products = "
              "4*Hq*Nk*d FLOPs at the FMA peak, %.0f GFLOP/s (%s)\n",
              peak, fma_peak.gflops_cpu, fma_peak.target.c_str());
  std::printf("  %-14s %8s %12s %12s %9s  %s\n", "case", "read ms", "in cache ms", "products ms", "paged ms",
              "bound, paged time against it");
  for (const std::string& tn : a.types)
    for (int64_t hq : heads) {
      const std::string h = fmt::format("{}/{}", hq, hkv), paged = tn + " paged " + h, in_cache = tn + " in-cache " + h;
      if (!med.count(paged) || !med.count(in_cache)) continue;
      const auto it = std::find_if(cases.begin(), cases.end(), [&](const Case& c) { return c.name == paged; });
      const double read_ms = it->bytes / peak / 1e6, cached_ms = med[in_cache], paged_ms = med[paged];
      const double products_ms = 4.0 * static_cast<double>(hq * nk * d) / fma_peak.gflops_cpu / 1e6;
      const bool memory = cached_ms < read_ms;
      std::printf("  %-14s %8.2f %12.2f %12.2f %9.2f  %s, %.0f%% of its rate\n", (tn + " " + h).c_str(), read_ms, cached_ms,
                  products_ms, paged_ms, !memory ? "arithmetic (target >= 80%)" : hq == hkv ? "memory (target >= 90%)" : "memory (target: 32/8 within 10% of 8/8)",
                  100.0 * (memory ? read_ms : cached_ms) / paged_ms);
    }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
