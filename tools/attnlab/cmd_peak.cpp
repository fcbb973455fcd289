// `attnlab peak`: this machine's measured float32 FMA peak, on one thread and
// on all of them (bench/peak_flops.cpp explains the loop).
#include <omp.h>

#include <fmt/format.h>

#include "attnlab/attention_options.hpp"
#include "peak_flops.hpp"
#include "command.hpp"

namespace {

struct PeakArgs {
  int threads = 0;
  double seconds = 0.2;
};

void run_peak(const PeakArgs& a) {
  attnlab::check_threads(a.threads, "peak: --threads");
  const int all = a.threads > 0 ? a.threads : omp_get_max_threads();
  const auto one = attnlab::bench::measure_peak(1, a.seconds);
  const auto many = attnlab::bench::measure_peak(all, a.seconds);
  fmt::print("float32 FMA peak, {} target ({} lanes, {} independent FMA chains per thread, best of 5)\n",
             one.target, one.lanes, one.chains);
  fmt::print("{:>8}  {:>14}  {:>14}\n", "threads", "GFLOP/s (wall)", "GFLOP/s (CPU)");
  fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", 1, one.gflops, one.gflops_cpu);
  fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", all, many.gflops, many.gflops_cpu);
  fmt::print("wall: over elapsed time, what the threads got with the machine's current load;\n"
             "CPU: over each thread's CPU time, what the cores do while they run (the hardware peak).\n");
}

const attnlab::cli::Registrar reg("peak", "Measure this machine's float32 FMA peak (GFLOP/s), 1 thread and all threads",
                                  [](CLI::App& sub) {
                                    static PeakArgs a;
                                    sub.add_option("--threads", a.threads, "threads for the second line (0: all cores)")
                                        ->check(CLI::Range(0, attnlab::kMaxThreads));
                                    sub.add_option("--seconds", a.seconds, "duration of each trial")
                                        ->check(CLI::Range(0.01, 10.0));
                                    sub.callback([] { run_peak(a); });
                                  });

}  // namespace
