// libFuzzer target: the attnlab command line's argument parsing.
// The input is split at newlines into argv. The application is the real one
// (every registered subcommand with its options and validators). Each
// subcommand gets a parse-complete callback that throws DryRun: CLI11 runs it
// after the subcommand's options were converted, validated and checked for
// requirements, and then skips the subcommand's action. (Replacing the action
// instead would destroy the state its lambda keeps alive.) So the fuzzer
// explores parsing and validation, not computation. Property: parse succeeds,
// or throws DryRun, CLI::Error or attnlab::Error; nothing else.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/error.hpp"
#include "command.hpp"

namespace {
struct DryRun {};
void stop_before_actions(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->parse_complete_callback([] { throw DryRun{}; });
    stop_before_actions(*sub);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"attnlab"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  if (args.size() > 32) return 0;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  CLI::App app{"attnlab"};
  attnlab::cli::build_app(app);
  stop_before_actions(app);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const DryRun&) {
  } catch (const CLI::Error&) {
  } catch (const attnlab::Error&) {
  }
  return 0;
}
