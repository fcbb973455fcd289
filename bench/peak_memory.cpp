// Read bandwidth: each thread sums its own contiguous slice of one large buffer with
// full-width vector loads into 8 independent accumulators (bench/stream_arithmetic.hpp's
// loop), so that the adds' latency never limits the loads, in each of the readers of
// peak_memory.hpp (one or two streams per thread, with or without multiply-adds between
// the loads). The buffer is 16× the last-level cache or 512 MiB, whichever is larger,
// and written (by the thread that later reads each slice) before the timings, so that
// every page is mapped and nothing read in a timed pass can still be in a cache from the
// previous one. The sum is kept so that the compiler cannot drop the loads. A pass counts
// the buffer's bytes once; the best of several passes is reported (the machine is
// shared: the best pass is the one least disturbed).
#include "peak_memory.hpp"
#include "page_kind.hpp"
#include "stream_arithmetic.hpp"
#include "attnlab/engine.hpp"
#include "hwy/aligned_allocator.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace attnlab::bench {

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Sum of x[0, n) and y[0, n) read by `r`: on two streams a block of kBlock floats of
// each in turn, on one all of x and then all of y (y may be null: x alone). The loops
// take whole blocks; the rest (fewer than kBlock floats) is summed one by one.
constexpr size_t kBlock = 128;  // a multiple of 8 vectors on every target (AVX-512: 8 × 16)

float read_with(const Reader& r, const float* x, const float* y, size_t n) {
  const size_t whole = n / kBlock * kBlock;
  float s = 0;
  if (y != nullptr && r.streams == 2) s = stream_pair_with_arithmetic(x, y, whole, kBlock, r.fmas, 0);
  else {
    s = stream_with_arithmetic(x, whole, r.fmas, 0);
    if (y != nullptr) s += stream_with_arithmetic(y, whole, r.fmas, 0);
  }
  for (size_t i = whole; i < n; ++i) s += x[i] + (y != nullptr ? y[i] : 0.0f);
  return s;
}

}  // namespace

std::string Reader::name() const {
  return std::to_string(streams) + (streams == 1 ? " stream" : " streams") +
         (fmas == 0 ? std::string(", loads alone") : ", " + std::to_string(fmas) + " multiply-adds per vector");
}

const Reader* probe_readers(int* count) {
  // One and two streams, without work between the loads and with 4 multiply-adds per
  // vector (as many as a decoding step with 4 query rows per K/V head does per float it
  // reads; on Zen 4 the fastest of 0, 1, 4 and 8 on two streams, by a few percent).
  static constexpr Reader kReaders[] = {{1, 0}, {1, 4}, {2, 0}, {2, 4}};
  *count = static_cast<int>(std::size(kReaders));
  return kReaders;
}

int64_t available_memory_bytes(const std::string& meminfo) {
  std::ifstream f(meminfo);
  std::string key, unit;
  int64_t value = 0;
  while (f >> key >> value) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return unit.find("kB") != std::string::npos ? value << 10 : value;
  }
  return 0;
}

int64_t probe_bytes_within_memory(int64_t wanted, int64_t available) {
  return available > 0 ? std::min(wanted, available / 4) : wanted;
}

Bandwidth measure_read_bandwidth(int threads, int64_t bytes, int passes) {
  Bandwidth bw;
  bw.l3_bytes = attnlab::engine::last_level_cache_bytes();
  if (bytes <= 0) bytes = std::max<int64_t>(int64_t{512} << 20, 16 * bw.l3_bytes);
  bytes = probe_bytes_within_memory(bytes);
  // Each thread's slice is a whole number of 4 KiB pages (and so of 8 vectors); two
  // streams read its two halves.
  constexpr int64_t kPageFloats = 4096 / sizeof(float);
  const int64_t per_thread = std::max<int64_t>(1, bytes / static_cast<int64_t>(sizeof(float)) / threads / kPageFloats) * kPageFloats;
  const int64_t n = per_thread * threads;
  bw.bytes = n * static_cast<int64_t>(sizeof(float));
  bw.passes = passes;
  bw.target = stream_target_name();
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
  const size_t half = static_cast<size_t>(per_thread) / 2;
  volatile float sink = 0;
  int reader_count = 0;
  const Reader* readers = probe_readers(&reader_count);
  for (int pass = 0; pass < passes; ++pass)
    for (int ri = 0; ri < reader_count; ++ri) {
      const Reader& r = readers[ri];
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num();
        const float* mine = x + t * per_thread;
        const double c0 = thread_cpu_seconds();
        sums[static_cast<size_t>(t)] = r.streams == 2 ? read_with(r, mine, mine + half, half)
                                                      : read_with(r, mine, nullptr, static_cast<size_t>(per_thread));
        cpu_rate[static_cast<size_t>(t)] = slice_bytes / std::max(thread_cpu_seconds() - c0, 1e-9);
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (float s : sums) sink = sink + s;
      double cpu_total = 0;
      for (double c : cpu_rate) cpu_total += c;
      const double gbps = static_cast<double>(bw.bytes) / std::max(dt, 1e-9) / 1e9;
      if (ri == 0) bw.plain_gbps = std::max(bw.plain_gbps, gbps);
      if (gbps > bw.gbps) bw.gbps = gbps, bw.reader = r;
      bw.gbps_cpu = std::max(bw.gbps_cpu, cpu_total / 1e9);
    }
  return bw;
}

float read_once(const float* a, const float* b, int64_t count, int threads, const Reader& reader) {
  std::vector<float> sums(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    // Slices of whole cache lines (16 floats), one per thread the region got; the last
    // also takes the remainder.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t per_thread = count / team / 16 * 16;
    const int64_t begin = t * per_thread, n = t + 1 == team ? count - begin : per_thread;
    sums[static_cast<size_t>(t)] = read_with(reader, a + begin, b + begin, static_cast<size_t>(n));
  }
  float total = 0;
  for (float s : sums) total += s;
  return total;
}

}  // namespace attnlab::bench
