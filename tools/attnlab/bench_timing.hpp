#pragma once
// `attnlab bench`'s timed rounds: every implementation's forward and backward, interleaved
// repeat by repeat after the same idle pause and untimed calls, with the read bound (K and V
// read once) timed before each round; each pass's wall-clock and CPU time, peak resident
// memory, and distance from the first implementation's result.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnlab/tensor.hpp"
#include "peak_memory.hpp"
#include "peers/peers.hpp"

namespace attnlab::cli {

// One implementation with the element type it runs in: the engine once per --dtype,
// the peers in float32.
struct BenchImpl {
  std::unique_ptr<bench::Peer> peer;
  std::string dtype = "f32";
  std::string key() const { return peer->name() + "/" + dtype; }
};

// Allocated as Tensor allocates (64-byte aligned), as a KV cache of attnlab, PyTorch or
// llama.cpp is: std::vector's 16 bytes would split every other vector load.
using BenchBuffer = Tensor<float>::Storage;

// What every implementation is called on. q, grad_out, out, dq: [B, Hq, Nq, D]; k, v, dk, dv: [B, Hkv, Nk, D].
struct BenchBuffers {
  BenchBuffer q, k, v, go, out, dq, dk, dv;
};

struct BenchProtocol {
  int repeats = 5;
  int settle_ms = 150;
  bool cold = false;       // time the first call after the pause
  bool evict_llc = false;  // read 3× the last-level cache before each timed forward and read bound
  bool forward_only = false;
  int threads = 1;
  bench::Reader reader;  // the read bound's
};

struct BenchSample {
  std::vector<double> ms;      // wall-clock time of each repeat
  std::vector<double> cpu_ms;  // CPU time of the whole process (all threads) during each repeat
  double rss_mb = 0;
};

struct BenchTimings {
  // By (implementation key, pass), and ("read", "bound").
  std::map<std::pair<std::string, std::string>, BenchSample> samples;
  std::map<std::pair<std::string, std::string>, double> diff;  // largest |difference| from the first implementation
  int64_t llc_bytes = 0;  // the last-level cache's size (assumed 32 MiB when not found)
  bool llc_found = false;
  size_t evict_floats = 0;  // read before each timed call with --evict-llc
};

// Peak resident memory: /proc/self/clear_refs "5" resets VmHWM to the current
// RSS (Linux ≥ 4.0), so the peak of each pass can be read afterwards.
bool reset_peak_rss();

BenchTimings time_rounds(std::vector<BenchImpl>& impls, BenchBuffers& buf, const BenchProtocol& a);

}  // namespace attnlab::cli
