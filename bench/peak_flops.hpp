#pragma once
// This machine's measured float32 FMA peak, the yardstick of `attnlab peak`
// and of `attnlab bench`'s peak_fraction.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace attnlab::bench {

struct Peak {
  double gflops = 0;      // float32 GFLOP/s over wall-clock time (an FMA counts 2 FLOPs per lane):
                          // what the threads got, other processes' load included
  double gflops_cpu = 0;  // the same over each thread's CPU time, summed: what the cores do
                          // while our threads run (the hardware peak, even on a loaded machine)
  std::string target;   // the SIMD target that ran (e.g. "AVX3")
  int lanes = 0;        // floats per vector on that target
  int chains = 0;       // independent FMA chains per thread
};

// Best of `trials` runs of ~`seconds` each, on `threads` OpenMP threads.
Peak measure_peak(int threads, double seconds = 0.2, int trials = 5);

// The bfloat16 dot-product peak where the CPU has AVX512_BF16 (VDPBF16PS: 16 lanes, each
// adding two products of bfloat16 pairs, 64 FLOPs per instruction), the same way
// (bench/peak_bf16_dots.cpp); nullopt on other CPUs. The yardstick of bfloat16 inputs'
// products where they run on it (docs/tuning.md, "The bfloat16 dot-product peak").
std::optional<Peak> measure_bf16_dot_peak(int threads, double seconds = 0.2, int trials = 5);

// The harness of both: `loop(iters)` runs `iters` iterations of `flops_per_iter` FLOPs on
// the calling thread and returns a value that depends on all of them. Calibrated on one
// thread to ~`seconds`, then timed `trials` times on `threads` threads, the best kept.
Peak measure_loop_peak(const std::function<float(int64_t)>& loop, double flops_per_iter, int threads, double seconds,
                       int trials);

}  // namespace attnlab::bench
