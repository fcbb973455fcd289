// attnlab: the command line. Subcommands register themselves (command.hpp).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fmt/format.h>

#include "attnlab/error.hpp"
#include "command.hpp"

namespace attnlab::cli {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace attnlab::cli

int main(int argc, char** argv) {
  using attnlab::cli::registry;
  CLI::App app{"attnlab: scaled dot-product attention, exact and fast, and a lab for the 1/sqrt(d_k) scale"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnlab 0.1.0");
  std::sort(registry().begin(), registry().end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& command : registry()) command.setup(*app.add_subcommand(command.name, command.summary));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const attnlab::Error& e) {
    fmt::print(stderr, "attnlab: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnlab: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
