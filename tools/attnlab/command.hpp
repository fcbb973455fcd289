#pragma once
// Each subcommand of `attnlab` lives in its own cmd_<name>.cpp, which defines the function
// declared below that returns it; app.cpp lists them all (as the lab's registry.cpp lists its
// experiments: no static self-registration, which a linker may drop from a static library).
//
//   Command demo_command() {
//     return {"demo", "one-line summary", [](CLI::App& sub) {
//       sub.add_option(...);
//       sub.callback([&] { ... });   // throw attnlab::Error for bad input
//     }};
//   }
//
// Callbacks report bad input by throwing attnlab::Error (or CLI::Error); main turns that
// into a message on stderr and exit status 2, never a crash.
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

Command attention_command();
Command attention_backward_command();
Command bench_command();
Command bench_variants_command();
Command demo_command();
Command peak_command();
Command report_command();
Command run_command();
Command tune_command();

// Adds every subcommand to app (in name order).
void build_app(CLI::App& app);

// When argv names, where a subcommand is required, a word that is none of them: "unknown
// command 'atention' (did you mean 'attention'? ...)", the closest by edit distance. Empty
// otherwise (CLI11's own message then stands).
std::string unknown_command_message(const CLI::App& app, int argc, const char* const* argv);

}  // namespace attnlab::cli
