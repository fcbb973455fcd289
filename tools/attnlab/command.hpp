#pragma once
// Each subcommand of `attnlab` lives in its own cmd_<name>.cpp and registers
// itself with a file-scope `const Registrar`:
//
//   static const attnlab::cli::Registrar reg("demo", "one-line summary", [](CLI::App& sub) {
//     sub.add_option(...);
//     sub.callback([&] { ... });   // throw attnlab::Error for bad input
//   });
//
// main() adds the subcommands in name order. Callbacks report bad input by
// throwing attnlab::Error (or CLI::Error); main turns that into a message on
// stderr and exit status 2, never a crash.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace attnlab::cli {

struct Command {
  std::string name;
  std::string summary;
  std::function<void(CLI::App&)> setup;
};

std::vector<Command>& registry();

// Adds every registered subcommand to app (in name order).
void build_app(CLI::App& app);

struct Registrar {
  Registrar(std::string name, std::string summary, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

}  // namespace attnlab::cli
