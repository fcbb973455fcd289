// Google Benchmark microbenchmarks of the engine: forward and backward at the
// sizes of the targets, single-threaded and on all cores, plus the
// FMA peak loop for reference. Run: build/attnlab_microbench
#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>

#include "attnlab/engine.hpp"
#include "bench/peak_flops.hpp"

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
    auto f = al::attention_forward(in.q, in.k, in.v, opt, al::EngineConfig{threads});
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
  const auto f = al::attention_forward(in.q, in.k, in.v, opt, al::EngineConfig{threads});
  for (auto _ : state) {
    auto g = al::attention_backward(in.q, in.k, in.v, f, in.go, opt, al::EngineConfig{threads});
    benchmark::DoNotOptimize(g.dq.data());
  }
  const double flops = 10.0 * n * n * d * (state.range(3) ? 0.5 : 1.0);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
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

BENCHMARK(BM_Forward)->Apply(EngineArgs);
BENCHMARK(BM_Backward)->Apply(EngineArgs);
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(3);
BENCHMARK_MAIN();
