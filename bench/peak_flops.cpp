// FMA peak: each thread runs a loop of kChains independent fused multiply-adds
// on full vectors of the widest SIMD target (Highway runtime dispatch). An FMA
// has a latency of ~4 cycles and a CPU issues one or two per cycle, so at least
// latency × issue rate = 8 independent chains are needed to keep the FMA units
// busy; we use 12 with 32 vector registers (AVX-512) and 8 with 16. The chains
// x ← x·a + b (a < 1) converge to b/(1 − a), so the values stay finite and
// normal (no denormal slow-down), and the result is stored so that the
// compiler cannot drop the loop. FLOPs = 2 · lanes · chains · iterations.
#include "peak_flops.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak_flops.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET <= HWY_AVX3
constexpr int kChains = 12;
#else
constexpr int kChains = 8;
#endif

// Runs `iters` iterations; returns a value that depends on every chain.
float FmaLoop(int64_t iters, int* lanes, int* chains) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const V a = hn::Set(df, 0.999999f), b = hn::Set(df, 1e-6f);
  V x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = hn::Set(df, 0.5f + 0.01f * static_cast<float>(c));
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) x[c] = hn::MulAdd(x[c], a, b);
  }
  V s = x[0];
  for (int c = 1; c < kChains; ++c) s = hn::Add(s, x[c]);
  *lanes = static_cast<int>(hn::Lanes(df));
  *chains = kChains;
  return hn::GetLane(s);
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::bench {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(TargetName);

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

Peak measure_loop_peak(const std::function<float(int64_t)>& loop, double flops_per_iter, int threads, double seconds,
                       int trials) {
  Peak peak;
  // Calibrate the iteration count on one thread.
  int64_t iters = 1 << 20;
  volatile float sink = 0;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + loop(iters);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > seconds / 4 || iters > (int64_t{1} << 40)) {
      iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / std::max(dt, 1e-9));
      break;
    }
    iters *= 4;
  }
  for (int t = 0; t < trials; ++t) {
    std::vector<float> out(static_cast<size_t>(threads));
    std::vector<double> cpu_rate(static_cast<size_t>(threads), 0.0);
    const double flops_per_thread = flops_per_iter * static_cast<double>(iters);
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const double c0 = thread_cpu_seconds();
      out[static_cast<size_t>(omp_get_thread_num())] = loop(iters);
      cpu_rate[static_cast<size_t>(omp_get_thread_num())] = flops_per_thread / std::max(thread_cpu_seconds() - c0, 1e-9);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float v : out) sink = sink + v;
    double cpu_total = 0;
    for (double r : cpu_rate) cpu_total += r;
    peak.gflops = std::max(peak.gflops, flops_per_thread * threads / dt / 1e9);
    peak.gflops_cpu = std::max(peak.gflops_cpu, cpu_total / 1e9);
  }
  return peak;
}

Peak measure_peak(int threads, double seconds, int trials) {
  int lanes = 0, chains = 0;
  (void)HWY_DYNAMIC_DISPATCH(FmaLoop)(1, &lanes, &chains);
  Peak peak = measure_loop_peak(
      [](int64_t iters) {
        int l = 0, c = 0;
        return HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, &l, &c);
      },
      2.0 * lanes * chains, threads, seconds, trials);
  peak.target = HWY_DYNAMIC_DISPATCH(TargetName)();
  peak.lanes = lanes;
  peak.chains = chains;
  return peak;
}

}  // namespace attnlab::bench
#endif  // HWY_ONCE
