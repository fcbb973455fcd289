// The attnlab command-line application, built from the subcommands listed here.
// Separate from main() so that the CLI fuzzer can build the same application.
#include <algorithm>

#include "attnlab/version.hpp"
#include "command.hpp"

namespace attnlab::cli {

namespace {
std::vector<Command> commands() {
  return {
      attention_command(), attention_backward_command(), demo_command(), report_command(), run_command(),
#ifndef ATTNLAB_CLI_WITHOUT_BENCHMARKS  // the CLI fuzzer's build (tests/fuzz): no peers, no FMA peak
      bench_command(),     bench_variants_command(),     peak_command(),
#endif
  };
}
}  // namespace

void build_app(CLI::App& app) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnlab " ATTNLAB_VERSION_STRING);
  std::vector<Command> all = commands();
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& command : all) command.setup(*app.add_subcommand(command.name, command.summary));
}

}  // namespace attnlab::cli
