#pragma once
// This machine's measured memory read bandwidth, the yardstick of `attnlab peak
// --memory` and of `attnlab bench`'s bandwidth fraction (what decoding against a
// KV cache can reach: it reads K and V once and does 2 FLOPs per byte).
#include <cstdint>
#include <string>

namespace attnlab::bench {

// How a read pass reads its bytes (bench/stream_arithmetic.hpp's loop): each thread on one
// stream (its slice, or K's slice and then V's) or on two at once (two halves of its
// slice, or K and V, a block of 128 floats of each in turn), with `fmas` multiply-adds
// per loaded vector between the loads or none. On Zen 4 (2 threads, 268 MB
// from memory, bench/memory_bursts.cpp) a plain single-stream loop read 20-40 % less than
// the same loads on two streams with 4 multiply-adds per vector: the memory gives more to
// a reader that asks for two streams at a steadier pace. So the probe tries each reader
// and keeps the best: the bandwidth is what the best of them gets.
struct Reader {
  int streams = 1;  // 1 or 2
  int fmas = 0;     // 0, 1, 2, 4 or 8
  std::string name() const;  // e.g. "2 streams, 4 multiply-adds per vector"
};

// The readers the probe tries, the plain one-stream loop first.
const Reader* probe_readers(int* count);

struct Bandwidth {
  double gbps = 0;        // bytes read per second over wall-clock time, 1e9 bytes per GB: what the
                          // threads got, other processes' load included
  double gbps_cpu = 0;    // the same over each thread's CPU time, summed: the rate while our threads
                          // run (on a loaded machine, nearer what the memory gives a running thread)
  int64_t bytes = 0;      // size of the buffer read in each pass
  int64_t l3_bytes = 0;   // the last-level cache it was sized against (0 if unknown)
  int passes = 0;         // passes timed per reader; gbps is the best of all
  Reader reader;          // the reader of the best pass
  double plain_gbps = 0;  // the best pass of the plain one-stream loop (probe_readers()[0])
  std::string target;     // the SIMD target of the read loop (e.g. "AVX2")
  std::string pages;      // the pages the buffer sat in (describe_pages: 4 KiB, 2 MiB or a mix)
};

// The memory the system can give without swapping (MemAvailable of `meminfo`), in bytes;
// 0 if unknown.
int64_t available_memory_bytes(const std::string& meminfo = "/proc/meminfo");

// A probe's buffer of `wanted` bytes, at most a quarter of the available memory (where it is
// known): a probe sized by the cache (16× a 508 MiB figure is 8 GiB) must never swap or meet
// the OOM killer; the probe then measures a smaller buffer and says its size.
int64_t probe_bytes_within_memory(int64_t wanted, int64_t available = available_memory_bytes());

// Best of `passes` timed passes of each of the probe's readers on `threads` OpenMP
// threads, each reading its own contiguous slice of one buffer of `bytes` bytes (0:
// 512 MiB or 16× the last-level cache, whichever is larger, so that nothing is served
// from the caches; either way within probe_bytes_within_memory); the readers take turns
// within each pass round.
Bandwidth measure_read_bandwidth(int threads, int64_t bytes = 0, int passes = 7);

// One read of the `count` floats at `a` and the `count` at `b` by `threads` OpenMP
// threads, each summing its own contiguous slice of both with `reader` (on two streams:
// its slices of a and b in turn); returns the sum (keep it, or the compiler may drop the
// loads). `attnlab bench` times it beside the implementations, on their K and V and under
// the same idle pause, with the probe's best reader: the bound of a pass that must read
// K and V once, in the conditions the passes ran in.
float read_once(const float* a, const float* b, int64_t count, int threads, const Reader& reader = {});

}  // namespace attnlab::bench
