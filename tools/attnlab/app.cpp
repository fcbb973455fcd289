// The attnlab command-line application, built from the registered subcommands.
// Separate from main() so that the CLI fuzzer can build the same application.
#include <algorithm>

#include "attnlab/version.hpp"
#include "command.hpp"

namespace attnlab::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

void build_app(CLI::App& app) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnlab " ATTNLAB_VERSION_STRING);
  std::sort(registry().begin(), registry().end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& command : registry()) command.setup(*app.add_subcommand(command.name, command.summary));
}

}  // namespace attnlab::cli
