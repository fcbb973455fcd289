#pragma once
// This machine's measured memory read bandwidth, the yardstick of `attnlab peak
// --memory` and of `attnlab bench`'s bandwidth fraction (what decoding against a
// KV cache can reach: it reads K and V once and does 2 FLOPs per byte).
#include <cstdint>
#include <string>

namespace attnlab::bench {

struct Bandwidth {
  double gbps = 0;        // bytes read per second over wall-clock time, 1e9 bytes per GB: what the
                          // threads got, other processes' load included
  double gbps_cpu = 0;    // the same over each thread's CPU time, summed: the rate while our threads
                          // run (on a loaded machine, nearer what the memory gives a running thread)
  int64_t bytes = 0;      // size of the buffer read in each pass
  int64_t l3_bytes = 0;   // the last-level cache it was sized against (0 if unknown)
  int passes = 0;         // passes timed; gbps is the best
  std::string target;     // the SIMD target of the read loop (e.g. "AVX2")
  std::string pages;      // the pages the buffer sat in (describe_pages: 4 KiB, 2 MiB or a mix)
};

// Best of `passes` timed passes of `threads` OpenMP threads, each reading its own
// contiguous slice of one buffer of `bytes` bytes (0: 512 MiB or 16× the last-level
// cache, whichever is larger, so that nothing is served from the caches).
Bandwidth measure_read_bandwidth(int threads, int64_t bytes = 0, int passes = 7);

// One read of the `count` floats at `a` and the `count` at `b` by `threads` OpenMP
// threads, each summing its own contiguous slice of both with the probe's loop; returns
// the sum (keep it, or the compiler may drop the loads). `attnlab bench` times it beside
// the implementations, on their K and V and under the same idle pause: the bound of a
// pass that must read K and V once, in the conditions the passes ran in.
float read_once(const float* a, const float* b, int64_t count, int threads);

}  // namespace attnlab::bench
