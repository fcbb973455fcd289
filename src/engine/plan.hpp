#pragma once
// What one engine call needs, independent of the SIMD target: the validated
// dimensions, the caller's views, the tile sizes, and per-row helpers (the row's
// key_end and scale). Built by engine.cpp, consumed by the per-target kernels in
// flash_kernels.cpp. Nothing here allocates per element.
#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdint>
#include <limits>

#include <omp.h>

#include "attnlab/engine.hpp"
#include "core/attention_checks.hpp"
#include "core/interrupt_poll.hpp"

namespace attnlab::engine {

// Tile sizes. Br query rows × Bc keys per tile; Bc is a multiple of every
// target's vector length (16, 8, 4 floats), kPad rounds packed row lengths to
// a whole number of vectors on every target. See the comment in flash_kernels.cpp
// (why Bc = 256).
inline constexpr int64_t kBr = 64;
inline constexpr int64_t kBc = 256;
inline constexpr int64_t kPad = 16;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// The first query row, in [b, h, i] order, whose scores overflowed float32 during a
// kernel (|scale·q·k| > 3.4e38, or ∞ − ∞ inside a dot product). Kernels record rows
// from any thread; the entry point reads the smallest after the parallel region and
// turns it into an Error (exceptions cannot leave an OpenMP region). The smallest
// index, not the first to arrive, so the message is the same for any thread count.
class RowErrorLog {
 public:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  void record(int64_t flat_row) {
    int64_t seen = first_.load(std::memory_order_relaxed);
    while (flat_row < seen && !first_.compare_exchange_weak(seen, flat_row, std::memory_order_relaxed)) {
    }
  }
  int64_t first() const { return first_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> first_{kNone};
};

// Whether the call should stop: the caller's interrupt, asked on the calling thread (OpenMP's
// thread 0, through InterruptPoll's 10 ms rate), the answer shared with every thread. Work
// already under way finishes; no new tile starts. (The backward's ordered dQ waits stay
// safe: a tile only waits for tiles handed out before it, and those were all started.)
class StopRequest {
 public:
  explicit StopRequest(const std::function<bool()>* interrupt) : poll_(interrupt) {}
  bool operator()() const {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (omp_get_thread_num() != 0 || !poll_.ask()) return false;
    stopped_.store(true, std::memory_order_relaxed);
    return true;
  }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }

 private:
  mutable detail::InterruptPoll poll_;  // thread 0 only
  mutable std::atomic<bool> stopped_{false};
};

struct Plan {
  detail::AttentionDims dims;
  ConstView<float> q, k, v;
  const AttentionOptions<float>* options = nullptr;
  int threads = 1;
  int64_t d_pad = 0, dv_pad = 0;  // d, dv rounded up to kPad
  int64_t n_qtiles = 0, n_ktiles = 0;
  float fixed_scale = 0;          // the scale when it does not depend on the row
  bool row_scales = false;        // true for the log-n policies: scale_i per row
  mutable RowErrorLog overflowed_rows;  // written by the kernels (the Plan is const there)
  StopRequest stop{nullptr};            // the caller's interrupt (ComputeConfig::interrupt)

  Plan(const detail::AttentionDims& dm, ConstView<float> q_, ConstView<float> k_, ConstView<float> v_,
       const AttentionOptions<float>& opt, int threads_, const std::function<bool()>* interrupt = nullptr)
      : dims(dm), q(q_), k(k_), v(v_), options(&opt), threads(threads_), stop(interrupt) {
    d_pad = round_up(dims.d, kPad);
    dv_pad = round_up(dims.dv, kPad);
    n_qtiles = ceil_div(dims.Nq, kBr);
    n_ktiles = ceil_div(dims.Nk, kBc);
    row_scales = opt.scale.depends_on_n();
    if (!row_scales) fixed_scale = static_cast<float>(opt.scale(dims.d, dims.Nk));
  }

  // Keys [0, key_end) of row i may be visible (causality and padding).
  int64_t key_end(int64_t b, int64_t i) const { return detail::key_end(dims, *options, b, i); }

  // scale_i: for the log-n policies it depends on the row's visible-key count.
  float scale(int64_t b, int64_t h, int64_t i) const {
    if (!row_scales) return fixed_scale;
    return static_cast<float>(options->scale(dims.d, detail::visible_keys(dims, *options, b, h, i)));
  }

  // True if no row of query tile [i0, i1) may see any key of key tile [j0, j1)
  // by causality or padding alone (key_end never decreases with i).
  bool tile_hidden(int64_t b, int64_t i1, int64_t j0) const { return key_end(b, i1 - 1) <= j0; }

  // True if the boolean mask hides every (row, key) of the tile: it is skipped.
  bool tile_masked_out(int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const auto& bm = options->bool_mask;
    if (!bm.present()) return false;
    const int64_t st = bm.stride(kDim);
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* row = detail::mask_row(bm, b, h, i);
      const int64_t end = std::min(j1, key_end(b, i));
      for (int64_t j = j0; j < end; ++j)
        if (row[j * st] != 0) return false;
    }
    return true;
  }
};

}  // namespace attnlab::engine
