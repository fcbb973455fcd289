// `attnlab run EXPERIMENT [--out DIR] [--json FILE] [--set key=value ...] [--seed N] [--quick]`:
// runs one registered lab experiment (attnlab/lab.hpp), writes its CSVs and figures
// and prints its verdicts. Each experiment is a subcommand of `run`, so that
// `attnlab run NAME --help` lists its parameters with their defaults; each
// parameter is also an option of its own (--dims 16,64).
#include <cctype>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <memory>

#include "attnlab/atomic_files.hpp"
#include "attnlab/output_directory.hpp"
#include "attnlab/lab.hpp"
#include "cli_values.hpp"
#include "command.hpp"
#include "lab_print.hpp"
#include "lab_ranks.hpp"

namespace {

struct RunOptions {
  std::string out;
  std::string json;
  std::vector<std::string> sets;
  uint64_t seed = 0;
  bool quick = false;
  std::map<std::string, std::string> direct;  // --<parameter> VALUE
};

// "int list" → "INT,...": what CLI11 shows after the option name.
std::string type_name(const std::string& type) {
  std::string t = type.substr(0, type.find(' '));
  for (auto& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return type.find("list") != std::string::npos ? t + ",..." : t;
}

attnlab::lab::Config parse_sets(const std::vector<std::string>& sets) {
  attnlab::lab::Config config;
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw attnlab::Error("--set '" + s + "': expected key=value");
    config[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return config;
}

void run_experiment(const attnlab::lab::Experiment& e, const RunOptions& o) {
  attnlab::lab::Config config;
  if (o.quick) config = e.quick;
  for (const auto& [k, v] : parse_sets(o.sets)) config[k] = v;
  for (const auto& [k, v] : o.direct) config[k] = v;
  const std::string out = o.out.empty() ? "lab-runs/" + e.name : o.out;
  // Under mpirun an experiment that sweeps (train) divides its runs among the ranks, and
  // rank 0 alone writes; the others run their share and return.
  const attnlab::lab::RunDistributor* ranks = attnlab::cli::lab_ranks();
  const bool several = ranks != nullptr && ranks->size() > 1;
  // Before the run: where its results go must be free to replace, and --json writable.
  attnlab::cli::check_on_rank0(ranks, [&] {
    attnlab::io::check_replaceable_directory(out, "--out");
    attnlab::io::require_outside_output_directory(o.json, "--json", out, "--out");
    if (!o.json.empty()) attnlab::io::check_output_path(o.json);
  });
  const auto progress = attnlab::cli::stderr_progress(several ? fmt::format("{}, rank {}", e.name, ranks->rank()) : e.name);
  if (several && ranks->rank() != 0) {
    attnlab::lab::run(e.name, config, o.seed, progress, {}, ranks);
    return;
  }
  // Written into a hidden sibling and swapped in: a failed run (say, gnuplot missing)
  // leaves an earlier run's output as it was.
  attnlab::lab::Result r;
  attnlab::io::build_output_directory(out, "--out", [&](const std::filesystem::path& dir) {
    r = attnlab::lab::run(e.name, config, o.seed, progress, {}, ranks);
    attnlab::lab::write_result(r, dir);
  });
  if (!o.json.empty()) attnlab::io::write_file_atomically(o.json, attnlab::lab::to_json(r, true) + "\n");
  for (const auto& note : r.notes) fmt::print("{}\n", note);
  attnlab::cli::print_verdicts(r.verdicts);
  fmt::print("\n{}: {:.1f} s; {} tables in {}/data, {} figures in {}/figures\n", e.name, r.seconds, r.tables.size(), out,
             r.figures.size(), out);
}

}  // namespace

attnlab::cli::Command attnlab::cli::run_command() {
  return {
      "run", "Run one lab experiment: its tables (CSV), figures (PNG) and verdicts", [](CLI::App& sub) {
        sub.require_subcommand(1);
        for (const auto* e : attnlab::lab::experiments()) {
          auto options = std::make_shared<RunOptions>();
          std::string claims;
          for (const auto& c : e->claims) claims += (claims.empty() ? "" : ", ") + c;
          CLI::App* app = sub.add_subcommand(e->name, e->summary + (claims.empty() ? "" : " [" + claims + "]"));
          app->add_option("--out", options->out, "Output directory (default: lab-runs/" + e->name + ")");
          app->add_option("--json", options->json, "Also write the result, tables included, as JSON to this file");
          app->add_option("--set", options->sets, "Set a parameter: key=value (repeatable)");
          attnlab::cli::add_seed_option(*app, "--seed", options->seed, "Seed of the random numbers");
          app->add_flag("--quick", options->quick, "Use the experiment's small, fast configuration");
          auto values = std::make_shared<std::map<std::string, std::string>>();
          for (const auto& p : e->parameters()) {
            if (p.type == "bool") {
              // A bool parameter also works as a flag: `--full` is `--full true`.
              app->add_option_function<std::string>(
                     "--" + p.name,
                     [options, name = p.name](const std::string& v) { options->direct[name] = v.empty() ? "true" : v; },
                     p.help + " (bool, default " + p.default_value + "; alone: true)")
                  ->expected(0, 1)
                  ->group("Parameters");
              continue;
            }
            app->add_option_function<std::string>(
                   "--" + p.name, [options, name = p.name](const std::string& v) { options->direct[name] = v; },
                   p.rule.empty() ? p.help : p.help + " [" + p.rule + "]")
                ->type_name(type_name(p.type))
                ->default_str(p.default_value)
                ->group("Parameters");
          }
          app->callback([e, options] { run_experiment(*e, *options); });
        }
      }};
}
