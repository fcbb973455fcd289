// `attnlab peak`: this machine's measured float32 FMA peak, on one thread and
// on all of them (bench/peak_flops.cpp explains the loop), and the bfloat16 dot-product
// peak where the CPU has one (bench/peak_bf16_dots.cpp), timed beside it, and their ratio;
// with --memory, its read bandwidth the same way (bench/peak_memory.cpp).
#include <omp.h>

#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "attnlab/attention_options.hpp"
#include "attnlab/error.hpp"
#include "peak_flops.hpp"
#include "peak_memory.hpp"
#include "cli_values.hpp"
#include "command.hpp"

namespace {

struct PeakArgs {
  int threads = 0;
  double seconds = 0.2;
  bool memory = false;
  int64_t buffer_mb = 0;
  int passes = 7;
};

void print_bandwidth(const attnlab::bench::Bandwidth& bw, int threads) {
  fmt::print("{:>8}  {:>11.1f}  {:>10.1f}  {:>17.1f}  {}\n", threads, bw.gbps, bw.gbps_cpu, bw.plain_gbps, bw.reader.name());
}

void run_memory(const PeakArgs& a, int all) {
  namespace ab = attnlab::bench;
  // A size asked for is measured as asked or refused: the probe would otherwise shrink it
  // (probe_bytes_within_memory) and report a figure for a buffer nobody chose.
  if (const int64_t asked = a.buffer_mb << 20, available = ab::available_memory_bytes();
      ab::probe_bytes_within_memory(asked, available) < asked)
    throw attnlab::Error(fmt::format("peak: --buffer-mb {} is more than a quarter of the {} MiB this system has "
                                     "available (MemAvailable), the most a probe takes so that it never swaps; use "
                                     "--buffer-mb {} or less",
                                     a.buffer_mb, available >> 20, (available / 4) >> 20));
  const auto one = ab::measure_read_bandwidth(1, a.buffer_mb << 20, a.passes);
  if (one.gbps <= 0)
    throw attnlab::OutOfMemory(fmt::format("peak: could not allocate the {} MiB read buffer", one.bytes >> 20));
  const auto many = ab::measure_read_bandwidth(all, a.buffer_mb << 20, a.passes);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  fmt::print("memory read bandwidth, {} target: best of {} passes over a {} MiB buffer ({}; {}) | load average "
             "{:.2f} {:.2f} {:.2f}\n",
             one.target, one.passes, one.bytes >> 20, many.pages,
             one.l3_bytes > 0 ? fmt::format("{:.0f}× the {} MiB last-level cache", static_cast<double>(one.bytes) /
                                                static_cast<double>(one.l3_bytes), one.l3_bytes >> 20)
                              : std::string("last-level cache size unknown"),
             load[0], load[1], load[2]);
  fmt::print("{:>8}  {:>11}  {:>10}  {:>17}  {}\n", "threads", "GB/s (wall)", "GB/s (CPU)", "loads alone (wall)", "best reader");
  print_bandwidth(one, 1);
  print_bandwidth(many, all);
  fmt::print("GB = 1e9 bytes; each thread reads its own slice. wall: over elapsed time, what the threads got with\n"
             "the machine's current load; CPU: over each thread's CPU time, the rate while they run. Each pass tries\n"
             "four readers (one or two streams per thread; loads alone or 4 multiply-adds per vector between them)\n"
             "and the best is the bandwidth; \"loads alone\" is one stream's plain loop, the probe of earlier versions.\n");
}

void run_peak(const PeakArgs& a) {
  attnlab::check_threads(a.threads, "peak: --threads");
  const int all = a.threads > 0 ? a.threads : omp_get_max_threads();
  if (a.memory) return run_memory(a, all);
  // The bfloat16 dot products (where the CPU has them) are timed beside the FMAs, each thread
  // count in turn, so that their ratio is of one machine state.
  const auto one = attnlab::bench::measure_peak(1, a.seconds);
  const auto one16 = attnlab::bench::measure_bf16_dot_peak(1, a.seconds);
  const auto many = attnlab::bench::measure_peak(all, a.seconds);
  const auto many16 = one16 ? attnlab::bench::measure_bf16_dot_peak(all, a.seconds) : std::nullopt;
  fmt::print("float32 FMA peak, {} target ({} lanes, {} independent FMA chains per thread, best of 5)\n",
             one.target, one.lanes, one.chains);
  fmt::print("{:>8}  {:>14}  {:>14}\n", "threads", "GFLOP/s (wall)", "GFLOP/s (CPU)");
  fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", 1, one.gflops, one.gflops_cpu);
  fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", all, many.gflops, many.gflops_cpu);
  // Where the CPU has them, the bfloat16 dot products that bfloat16 inputs' products run on.
  if (one16 && many16) {
    fmt::print("bfloat16 dot-product peak, VDPBF16PS ({} float lanes, each adding 2 bfloat16 products; {} independent "
               "chains per thread, best of 5)\n",
               one16->lanes, one16->chains);
    fmt::print("{:>8}  {:>14}  {:>14}\n", "threads", "GFLOP/s (wall)", "GFLOP/s (CPU)");
    fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", 1, one16->gflops, one16->gflops_cpu);
    fmt::print("{:>8}  {:>14.1f}  {:>14.1f}\n", all, many16->gflops, many16->gflops_cpu);
    fmt::print("bfloat16 dot products over float32 FMAs (CPU time): {:.2f}x on 1 thread, {:.2f}x on {}\n",
               one16->gflops_cpu / one.gflops_cpu, many16->gflops_cpu / many.gflops_cpu, all);
  } else {
    fmt::print("bfloat16 dot-product peak: not available (this CPU has no AVX512_BF16)\n");
  }
  fmt::print("wall: over elapsed time, what the threads got with the machine's current load;\n"
             "CPU: over each thread's CPU time, what the cores do while they run (the hardware peak).\n");
}

}  // namespace

attnlab::cli::Command attnlab::cli::peak_command() {
  return {"peak",
          "Measure this machine's float32 FMA peak (GFLOP/s) or, with --memory, its read "
          "bandwidth (GB/s), 1 thread and all threads",
          [](CLI::App& sub) {
            static PeakArgs a;
            sub.add_option("--threads", a.threads, "threads for the second line (0: all cores)")
                ->check(attnlab::cli::in_range(0, attnlab::kMaxThreads));
            sub.add_option("--seconds", a.seconds, "duration of each trial")->check(attnlab::cli::in_range(0.01, 10.0));
            sub.add_flag("--memory", a.memory, "measure the read bandwidth (GB/s) instead of the FMA peak");
            sub.add_option("--buffer-mb", a.buffer_mb,
                           "with --memory: MiB read per pass, at most a quarter of the available memory (0: 512 "
                           "or 16× the last-level cache, whichever is larger, within that quarter)")
                ->check(attnlab::cli::in_range(0, 1 << 16));
            sub.add_option("--passes", a.passes, "with --memory: timed passes (the best is kept)")
                ->check(attnlab::cli::in_range(1, 1000));
            sub.callback([&sub] {
              // An option that would do nothing is an error, not silently ignored.
              for (const char* opt : {"--buffer-mb", "--passes"})
                if (!a.memory && sub.count(opt) > 0) throw attnlab::Error(fmt::format("peak: {} needs --memory", opt));
              if (a.memory && sub.count("--seconds") > 0)
                throw attnlab::Error(
                    "peak: --seconds applies to the FMA peak, not --memory "
                    "(use --passes or --buffer-mb)");
              run_peak(a);
            });
          }};
}
