// `attnlab report [--out DIR] [--quick] [--seed N] [--only a,b]`: the main job. Runs every
// lab experiment and writes DIR/index.html, DIR/report.json, DIR/figures/, DIR/data/,
// atomically (an earlier report survives a failed run). Under `mpirun -np P` the experiments
// are divided among the ranks and rank 0 writes the same report (docs/scale-out.md).
#include <fmt/format.h>
#include <memory>

#include "attnlab/lab.hpp"
#include "cli_values.hpp"
#include "command.hpp"
#include "lab_print.hpp"
#include "lab_ranks.hpp"

namespace {

struct ReportArgs {
  std::string out = "report";
  bool quick = false;
  uint64_t seed = 0;
  std::vector<std::string> only;
};

void run_report(const ReportArgs& a) {
  attnlab::lab::ReportOptions o;
  o.out = a.out;
  o.quick = a.quick;
  o.seed = a.seed;
  o.only = a.only;
  // Under mpirun the experiments are divided among the ranks; rank 0 writes and prints.
  o.distributor = attnlab::cli::lab_ranks();
  const bool lead = o.distributor == nullptr || o.distributor->rank() == 0;
  o.progress = attnlab::cli::stderr_progress(
      o.distributor == nullptr || o.distributor->size() == 1 ? std::string("report")
                                                             : fmt::format("report, rank {}", o.distributor->rank()));
  const auto s = attnlab::lab::write_report(o);
  if (!lead) return;
  attnlab::cli::print_verdicts(s.claims);
  fmt::print("\nReport written in {:.1f} s: {}\n", s.seconds, s.index_html.string());
}

}  // namespace

attnlab::cli::Command attnlab::cli::report_command() {
  return {"report", "Run every lab experiment and write the HTML report (figures, data, verdicts)", [](CLI::App& sub) {
            auto a = std::make_shared<ReportArgs>();
            sub.add_option("--out", a->out, "Output directory (replaced atomically)")->capture_default_str();
            sub.add_flag("--quick", a->quick, "Small, fast configurations (a smoke test, not the real measurement)");
            attnlab::cli::add_seed_option(sub, "--seed", a->seed, "Seed of the random numbers");
            attnlab::cli::add_list_option(sub, "--only", a->only, "Run only these experiments");
            sub.callback([a] { run_report(*a); });
          }};
}
