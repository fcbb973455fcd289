#pragma once
// This machine's measured float32 FMA peak, the yardstick of `attnlab peak`
// and of `attnlab bench`'s peak_fraction.
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

}  // namespace attnlab::bench
