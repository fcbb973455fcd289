// Read bandwidth: each thread sums its own contiguous slice of one large buffer
// with full-width vector loads (Highway runtime dispatch) into 8 independent
// accumulators, so that the adds' latency never limits the loads: the loop is
// bound by how fast memory delivers the bytes. The buffer is 16× the last-level
// cache or 512 MiB, whichever is larger, and written (by the thread that later
// reads each slice) before the timings, so that every page is mapped and nothing
// read in a timed pass can still be in a cache from the previous one. The sum is
// kept so that the compiler cannot drop the loads. A pass counts the buffer's
// bytes once; the best of several passes is reported (the machine is shared:
// the best pass is the one least disturbed).
#include "peak_memory.hpp"
#include "page_kind.hpp"
#include "attnlab/engine.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak_memory.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnlab::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of x[0, n); n a multiple of 8 vectors, x aligned.
float SumSlice(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  size_t i = 0;
  // LoadU: read_once's buffers need not start on a vector; on the probe's aligned buffer
  // it reads as fast as Load.
  for (; i + 8 * L <= n; i += 8 * L) {
    a0 = hn::Add(a0, hn::LoadU(df, x + i));
    a1 = hn::Add(a1, hn::LoadU(df, x + i + L));
    a2 = hn::Add(a2, hn::LoadU(df, x + i + 2 * L));
    a3 = hn::Add(a3, hn::LoadU(df, x + i + 3 * L));
    a4 = hn::Add(a4, hn::LoadU(df, x + i + 4 * L));
    a5 = hn::Add(a5, hn::LoadU(df, x + i + 5 * L));
    a6 = hn::Add(a6, hn::LoadU(df, x + i + 6 * L));
    a7 = hn::Add(a7, hn::LoadU(df, x + i + 7 * L));
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  float tail = 0;  // fewer than 8 vectors left (the probe's slices never have any; read_once's may)
  for (; i < n; ++i) tail += x[i];
  return hn::GetLane(hn::SumOfLanes(df, s)) + tail;
}

const char* ReadTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attnlab::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::bench {

HWY_EXPORT(SumSlice);
HWY_EXPORT(ReadTargetName);

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

Bandwidth measure_read_bandwidth(int threads, int64_t bytes, int passes) {
  Bandwidth bw;
  bw.l3_bytes = attnlab::engine::last_level_cache_bytes();
  if (bytes <= 0) bytes = std::max<int64_t>(int64_t{512} << 20, 16 * bw.l3_bytes);
  // Each thread's slice is a whole number of 4 KiB pages (and so of 8 vectors).
  constexpr int64_t kPageFloats = 4096 / sizeof(float);
  const int64_t per_thread = std::max<int64_t>(1, bytes / static_cast<int64_t>(sizeof(float)) / threads / kPageFloats) * kPageFloats;
  const int64_t n = per_thread * threads;
  bw.bytes = n * static_cast<int64_t>(sizeof(float));
  bw.passes = passes;
  bw.target = HWY_DYNAMIC_DISPATCH(ReadTargetName)();
  auto buf = hwy::AllocateAligned<float>(static_cast<size_t>(n));
  if (!buf) return bw;  // gbps = 0: the caller says the buffer could not be allocated
  float* x = buf.get();
#pragma omp parallel num_threads(threads)
  {
    float* mine = x + omp_get_thread_num() * per_thread;
    std::fill(mine, mine + per_thread, 1.0f);  // first touch by the reading thread
  }
  bw.pages = describe_pages(x, static_cast<size_t>(bw.bytes));
  std::vector<float> sums(static_cast<size_t>(threads));
  std::vector<double> cpu_rate(static_cast<size_t>(threads));
  const double slice_bytes = static_cast<double>(per_thread) * sizeof(float);
  volatile float sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      const double c0 = thread_cpu_seconds();
      sums[static_cast<size_t>(t)] = HWY_DYNAMIC_DISPATCH(SumSlice)(x + t * per_thread, static_cast<size_t>(per_thread));
      cpu_rate[static_cast<size_t>(t)] = slice_bytes / std::max(thread_cpu_seconds() - c0, 1e-9);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float s : sums) sink = sink + s;
    double cpu_total = 0;
    for (double r : cpu_rate) cpu_total += r;
    bw.gbps = std::max(bw.gbps, static_cast<double>(bw.bytes) / std::max(dt, 1e-9) / 1e9);
    bw.gbps_cpu = std::max(bw.gbps_cpu, cpu_total / 1e9);
  }
  return bw;
}

float read_once(const float* a, const float* b, int64_t count, int threads) {
  std::vector<float> sums(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    // Slices of whole cache lines (16 floats), one per thread the region got; the last
    // also takes the remainder.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t per_thread = count / team / 16 * 16;
    const int64_t begin = t * per_thread, n = t + 1 == team ? count - begin : per_thread;
    sums[static_cast<size_t>(t)] = HWY_DYNAMIC_DISPATCH(SumSlice)(a + begin, static_cast<size_t>(n)) +
                                   HWY_DYNAMIC_DISPATCH(SumSlice)(b + begin, static_cast<size_t>(n));
  }
  float total = 0;
  for (float s : sums) total += s;
  return total;
}

}  // namespace attnlab::bench
#endif  // HWY_ONCE
