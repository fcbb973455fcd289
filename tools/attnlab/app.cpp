// The attnlab command-line application, built from the subcommands listed here.
// Separate from main() so that the CLI fuzzer can build the same application.
#include <algorithm>
#include <numeric>
#include <string_view>
#include <utility>

#include "attnlab/version.hpp"
#include "command.hpp"

namespace attnlab::cli {

namespace {
std::vector<Command> commands() {
  return {
      attention_command(), attention_backward_command(), demo_command(), report_command(), run_command(),
#ifndef ATTNLAB_CLI_WITHOUT_BENCHMARKS  // the CLI fuzzer's build (tests/fuzz): no peers, no FMA peak
      bench_command(),     bench_variants_command(),     peak_command(),     tune_command(),
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

namespace {
// Levenshtein distance: insertions, deletions and substitutions of one character.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      diagonal = std::exchange(row[j], std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])}));
  }
  return row[b.size()];
}
}  // namespace

std::string unknown_command_message(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* at = &app;
  std::string path = "attnlab";  // app.get_name() is argv[0], a path
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word.empty() || word[0] == '-') continue;  // the apps with subcommands take flags only
    const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty() || at->get_require_subcommand_min() == 0) return "";
    const auto it = std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->get_name() == word; });
    if (it != subs.end()) {
      at = *it;
      path += " " + (*it)->get_name();
      continue;
    }
    const CLI::App* closest = *std::min_element(subs.begin(), subs.end(), [&](const CLI::App* x, const CLI::App* y) {
      return edit_distance(word, x->get_name()) < edit_distance(word, y->get_name());
    });
    // A typo is a few edits away; a word farther from every command gets no guess.
    const bool typo = edit_distance(word, closest->get_name()) <= std::max<size_t>(2, word.size() / 3);
    return "unknown command '" + std::string(word) + "' (" +
           (typo ? "did you mean '" + path + " " + closest->get_name() + "'? " : "") + "`" + path +
           " --help` lists them)";
  }
  return "";
}

}  // namespace attnlab::cli
