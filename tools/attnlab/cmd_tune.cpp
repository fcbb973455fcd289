// `attnlab tune`: measures the decoding step's reads from memory on this machine
// (attnlab/decode_tuning.hpp) and writes the tuning that ATTNLAB_DECODE_TUNING=FILE (or
// attnlab::use_decode_tuning) makes the library use. Prints each cell as it is measured and,
// at the end, the cells where the measured way beats the library's rule.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/decode_tuning.hpp"
#include "attnlab/error.hpp"
#include "cli_values.hpp"
#include "command.hpp"

namespace attnlab::cli {

namespace {

struct TuneArgs {
  std::string out;
  int rounds = 7, threads = 0;
  int64_t bytes_mb = 0;
  std::vector<std::string> types;
  std::vector<int64_t> rows, dims;
};

void run_tune(const TuneArgs& a) {
  if (!a.out.empty()) io::check_output_path(a.out);  // before the measuring, not after
  DecodeTuningOptions o;
  o.rounds = a.rounds, o.threads = a.threads, o.bytes = a.bytes_mb << 20;
  if (!a.types.empty()) o.types = a.types;
  if (!a.rows.empty()) o.rows.assign(a.rows.begin(), a.rows.end());
  if (!a.dims.empty()) o.head_dims.assign(a.dims.begin(), a.dims.end());
  fmt::print("decode tuning on {}\n", decode_tuning_machine());
  fmt::print("{:<9} {:>4} {:>4}  {:<13} {:>9} {:>9}\n", "type", "rows", "d", "reads", "rule ms", "best ms");
  o.on_cell = [](const DecodeTuningCell& c) {
    fmt::print("{:<9} {:>4} {:>4}  {:<13} {:>9.3f} {:>9.3f}\n", c.type, c.rows, c.head_dim, c.reads, c.rule_ms,
               c.best_ms);
    std::fflush(stdout);
  };
  const DecodeTuning t = measure_decode_tuning(o);
  if (t.cells.empty())
    fmt::print("no cell: this target's fused step has one way of reading (only AVX-512 targets have three)\n");
  int beaten = 0;
  for (const DecodeTuningCell& c : t.cells) beaten += c.best_ms < c.rule_ms;
  fmt::print("{} of {} cells read faster than the rule's way (by more than 3 %)\n", beaten, t.cells.size());
  if (a.out.empty()) return;
  io::write_file_atomically(a.out, to_text(t));
  fmt::print("written: {} (use it: ATTNLAB_DECODE_TUNING={})\n", a.out, a.out);
}

}  // namespace

Command tune_command() {
  return {"tune", "Measure how the decoding step reads K and V fastest on this machine (a tuning file)",
          [](CLI::App& sub) {
            static TuneArgs a;
            sub.add_option("--out", a.out, "Write the tuning here (atomically); without it, only print");
            sub.add_option("--rounds", a.rounds, "Interleaved rounds per cell; the median decides")
                ->check(in_range(1, 1000))
                ->capture_default_str();
            sub.add_option("--bytes-mb", a.bytes_mb,
                           "K and V MiB per call (default: 4 x the last-level cache, at least 256)")
                ->check(in_range(1, 1 << 20));
            sub.add_option("--threads", a.threads, "Threads per call (default: OpenMP's)")->check(in_range(0, 4096));
            add_list_option(sub, "--types", a.types, "Element types (default: float32,float16,bfloat16)");
            add_list_option(sub, "--rows", a.rows, "Query rows per K/V head, 1-8 (default: all)");
            add_list_option(sub, "--dims", a.dims, "Head sizes among 64,128,256 (default: all)");
            sub.callback([] { run_tune(a); });
          }};
}

}  // namespace attnlab::cli
