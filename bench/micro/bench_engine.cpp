// Google Benchmark microbenchmarks of the engine: its pieces (the register-
// blocked product at the tile shapes of the five products, exp), forward and
// backward single-threaded and on 2 threads, the decode work item, a read stream
// with arithmetic in its loop (what memory time hides), and the FMA peak loop for
// reference. Run: build/attnlab_microbench
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnlab/attention.hpp"
#include "core/attention_results.hpp"
#include "hwy/aligned_allocator.h"
#include "peak_flops.hpp"
#include "stream_arithmetic.hpp"
#include "engine/plan.hpp"
#include "engine/testing/kernel_pieces.hpp"

namespace al = attnlab;

namespace {

struct Inputs {
  al::Tensor<float> q, k, v, go;
  explicit Inputs(int64_t n, int64_t d) : q({1, 1, n, d}), k({1, 1, n, d}), v({1, 1, n, d}), go({1, 1, n, d}) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (auto* t : {&q, &k, &v, &go})
      for (float& x : t->storage()) x = nd(rng);
  }
};

// args: N, d, threads, causal
void BM_Forward(benchmark::State& state) {
  const int64_t n = state.range(0), d = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  Inputs in(n, d);
  al::AttentionOptions<float> opt;
  opt.causal = state.range(3) ? al::Causal::top_left : al::Causal::none;
  opt.check_finite = false;
  for (auto _ : state) {
    auto f = al::detail::allocating_forward(in.q, in.k, in.v, opt, al::ComputeConfig{threads});
    benchmark::DoNotOptimize(f.out.data());
  }
  const double flops = 4.0 * n * n * d * (state.range(3) ? 0.5 : 1.0);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Backward(benchmark::State& state) {
  const int64_t n = state.range(0), d = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  Inputs in(n, d);
  al::AttentionOptions<float> opt;
  opt.causal = state.range(3) ? al::Causal::top_left : al::Causal::none;
  opt.check_finite = false;
  const auto f = al::detail::allocating_forward(in.q, in.k, in.v, opt, al::ComputeConfig{threads});
  for (auto _ : state) {
    auto g = al::detail::allocating_backward(in.q, in.k, in.v, f, in.go, opt, al::ComputeConfig{threads});
    benchmark::DoNotOptimize(g.dq.data());
  }
  const double flops = 10.0 * n * n * d * (state.range(3) ? 0.5 : 1.0);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One tile product: args M, N, K, transposed A (as in Pᵀ dO and dSᵀ Q).
void BM_TileGemm(benchmark::State& state) {
  const size_t M = static_cast<size_t>(state.range(0)), N = static_cast<size_t>(state.range(1)),
               K = static_cast<size_t>(state.range(2));
  const bool at = state.range(3) != 0;
  std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N, 0.0f);
  for (auto _ : state) {
    al::engine::testing::gemm_piece(M, N, K, A.data(), at ? 1 : K, at ? M : 1, B.data(), N, C.data(), N, true);
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Exp(benchmark::State& state) {
  std::vector<float> src(4096), x(4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = -static_cast<float>(i % 64) * 0.25f;  // S − m ≤ 0
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), x.begin());  // vectorised; keeps the inputs in range
    al::engine::testing::exp_piece(x.data(), x.size());
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["Gexp/s"] = benchmark::Counter(4096e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The forward's softmax step on one 64 × 256 tile (mask and scale, row max, exp,
// row sum, the rescale of O), per score, including a copy of the raw scores in
// (as the product writes them). Compare with the products: 2·d FMAs per score,
// i.e. 128 cycles per 16 scores per core at d = 64.
void BM_SoftmaxTile(benchmark::State& state) {
  const int64_t rows = 64, nc = 256;
  std::vector<float> s(rows * 256);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 8.0f);
  for (float& x : s) x = nd(rng);
  for (auto _ : state) {
    al::engine::testing::softmax_piece(s.data(), rows, nc, 16);
    benchmark::DoNotOptimize(s.data());
  }
  state.counters["Gscore/s"] = benchmark::Counter(16.0 * rows * nc * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Decoding against a KV cache through the public API (the engine picks its decode
// path): args Hq, Hkv, Nq, Nk, d, threads, bottom-right causal; B = 1. KV GB/s: the
// bytes of K and V over the time (K and V are 2·Nk·d·Hkv floats, far past L3 at
// Nk = 32768: read from memory on every call), to compare with `attnlab peak --memory`.
void BM_Decode(benchmark::State& state) {
  const int64_t hq = state.range(0), hkv = state.range(1), nq = state.range(2), nk = state.range(3),
                d = state.range(4);
  const int threads = static_cast<int>(state.range(5));
  al::Tensor<float> q({1, hq, nq, d}), k({1, hkv, nk, d}), v({1, hkv, nk, d});
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (auto* t : {&q, &k, &v})
    for (float& x : t->storage()) x = nd(rng);
  al::AttentionOptions<float> opt;
  opt.causal = state.range(6) ? al::Causal::bottom_right : al::Causal::none;
  opt.check_finite = false;
  for (auto _ : state) {
    auto f = al::detail::allocating_forward(q, k, v, opt, al::ComputeConfig{threads});
    benchmark::DoNotOptimize(f.out.data());
  }
  const double kv_bytes = 2.0 * hkv * nk * d * sizeof(float);
  state.counters["KV GB/s"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * hq * nq * nk * d * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The decode path's work item alone, on one thread, K and V in L2 (256 keys, 256 KB at
// d = 128, repeated): its compute cost per key, the time memory must hide. Args Hq,
// Hkv, Nq, d, from_memory: 0 for the step the engine takes on a cache this small (its
// requests beside the loads), 1 for the one it takes on a cache read from memory (on
// AVX-512 the row order, decode_strategy.hpp) though K and V are in L2. Compare KV
// GB/s with the read bandwidth per core.
void BM_DecodeChunk(benchmark::State& state) {
  const int64_t hq = state.range(0), hkv = state.range(1), nq = state.range(2), d = state.range(3), nk = 256;
  std::vector<float> q(static_cast<size_t>(hq * nq * d)), k(static_cast<size_t>(hkv * nk * d)), v(k.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = nd(rng);
  for (auto _ : state) {
    al::engine::testing::decode_chunk_piece(q.data(), k.data(), v.data(), hq, hkv, nq, nk, d, 16, state.range(4) != 0);
    benchmark::DoNotOptimize(q.data());
  }
  const double keys = 16.0 * nk;
  state.counters["ns/key"] = benchmark::Counter(keys, benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.counters["KV GB/s"] =
      benchmark::Counter(keys * 2 * d * sizeof(float) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(keys * 4.0 * (hq / hkv) * nq * d * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Each thread (one core, or both) reading a buffer of its own with `fmas` multiply-adds
// per loaded vector in its loop (stream_arithmetic.hpp), with a software prefetch
// `prefetch` bytes ahead or none; the buffer is 256 MiB (from memory) or 256 KiB
// (resident in L2: the arithmetic's own time). The decode kernels' question: does a
// loop's arithmetic hide under its memory time (ns/KB from memory = max of the two) or
// add to it (= their sum)? Args fmas, prefetch, resident.
void BM_StreamArithmetic(benchmark::State& state) {
  const int fmas = static_cast<int>(state.range(0));
  const size_t prefetch = static_cast<size_t>(state.range(1));
  const size_t bytes = state.range(2) ? size_t{256} << 10 : size_t{256} << 20;
  // The prefetches ask for lines up to `prefetch` bytes past the end: allocated, never read.
  const size_t allocated = (bytes + prefetch) / sizeof(float) + 64;
  auto x = hwy::AllocateAligned<float>(allocated);
  std::fill(x.get(), x.get() + allocated, 1.0f);
  for (auto _ : state) benchmark::DoNotOptimize(al::bench::stream_with_arithmetic(x.get(), bytes / sizeof(float), fmas, prefetch));
  // With several threads the library sums a counter over them and divides by a time per
  // iteration of all of them: kAvgThreads makes GB/s the cores' total, and ns/KB is per
  // core (each core's KB over its own time).
  const double threads = state.threads();
  using C = benchmark::Counter;
  state.counters["GB/s"] = C(static_cast<double>(bytes) * 1e-9, C::kIsIterationInvariantRate | C::kAvgThreads);
  state.counters["ns/KB"] = C(static_cast<double>(bytes) / 1024.0 / threads,
                              C::kIsIterationInvariantRate | C::kInvert | C::kAvgThreads);
}

void BM_FmaPeak(benchmark::State& state) {
  for (auto _ : state) {
    const auto p = al::bench::measure_peak(static_cast<int>(state.range(0)), 0.05, 1);
    state.counters["GFLOP/s"] = p.gflops;
  }
}

void EngineArgs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {512, 2048})
    for (int64_t d : {64, 128})
      for (int64_t t : {1, 2}) b->Args({n, d, t, 0});
  b->Args({2048, 64, 2, 1});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

// The tile shapes (Br = 64, Bc = 256, plan.hpp) at d = 64 and 128: S = Q Kᵀ and
// dP = dO Vᵀ are 64 × 256 × d; O += P V and dQ = dS K are 64 × d × 256;
// dV += Pᵀ dO and dK += dSᵀ Q are 256 × d × 64 with A transposed.
BENCHMARK(BM_TileGemm)
    ->Args({64, 256, 64, 0})->Args({64, 256, 128, 0})
    ->Args({64, 64, 256, 0})->Args({64, 128, 256, 0})
    ->Args({256, 64, 64, 1})->Args({256, 128, 64, 1});
BENCHMARK(BM_Exp);
BENCHMARK(BM_SoftmaxTile);
BENCHMARK(BM_Forward)->Apply(EngineArgs);
BENCHMARK(BM_Backward)->Apply(EngineArgs);
// The decode shapes of issue 14 (d = 128): a decoding step without and with grouped-query
// heads, a batch of 4 against a 4096-key cache (per call B = 1 here: 4 heads' worth), and
// a chunk of 16 new queries, and 4 speculative tokens of 32/8 heads (16 rows per K/V head:
// Sᵀ = K·Qᵀ with K and V asked for ahead).
BENCHMARK(BM_Decode)
    ->Args({8, 8, 1, 32768, 128, 1, 0})->Args({8, 8, 1, 32768, 128, 2, 0})
    ->Args({32, 8, 1, 32768, 128, 1, 0})->Args({32, 8, 1, 32768, 128, 2, 0})
    ->Args({32, 8, 16, 8192, 128, 2, 1})->Args({32, 8, 4, 16384, 128, 2, 0})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeChunk)
    ->Args({1, 1, 1, 128, 0})->Args({4, 1, 1, 128, 0})->Args({8, 1, 1, 128, 0})->Args({4, 1, 16, 128, 0})
    ->Args({1, 1, 1, 64, 0})->Args({4, 1, 1, 64, 0})
    ->Args({1, 1, 1, 128, 1})->Args({2, 1, 1, 128, 1})->Args({4, 1, 1, 128, 1})->Args({6, 1, 1, 128, 1})
    ->Args({8, 1, 1, 128, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StreamArithmetic)
    ->ArgsProduct({{0, 1, 2, 4, 8}, {0, 4096}, {1, 0}})
    ->ArgNames({"fmas", "prefetch", "resident"})
    ->Unit(benchmark::kMillisecond);
// Both cores at once, each its own buffer from memory: the same question where a 2-thread
// decode asks it, the cores sharing the memory (GB/s summed over them; ns/KB per core).
BENCHMARK(BM_StreamArithmetic)
    ->ArgsProduct({{0, 2, 4, 8}, {0, 4096}, {0}})
    ->ArgNames({"fmas", "prefetch", "resident"})
    ->Threads(2)->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(3);
BENCHMARK_MAIN();
