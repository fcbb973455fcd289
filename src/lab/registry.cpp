// The experiment registry, tables, outcomes, and lab::run.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <new>
#include <stdexcept>

#include "attnlab/lab.hpp"
#include "lab/experiments.hpp"
#include "lab/interrupt.hpp"

namespace attnlab::lab {
namespace {
// The lab's own experiments, listed explicitly, then any a program registered
// (the tests add toy ones). Built on first use.
std::vector<Experiment>& registry() {
  static std::vector<Experiment> experiments{additive_experiment(), classifier_experiment(), collapse_experiment(), entropy_experiment(), fading_experiment(), gradflow_experiment(), heads_experiment(), hedge_experiment(), invariance_experiment(), jacobian_experiment(), lm_experiment(), mup_experiment(), qknorm_experiment(), reparam_experiment(), saturation_experiment(), softcap_experiment(), train_experiment(), variance_experiment()};
  return experiments;
}
// An allocation the experiment made without naming it (std::bad_alloc; std::length_error for
// a size past what a vector holds) as an OutOfMemory error naming what can be changed: the
// parameters the run was given, and the limits it met (the address space `ulimit -v`
// allows, the memory the system has available).
std::string parameters_given(const Config& config) {
  std::string given;
  for (const auto& [key, value] : config) given += fmt::format("{}{}={}", given.empty() ? "" : ", ", key, value);
  return given.empty() ? "its default parameters" : "the parameters " + given;
}

OutOfMemory out_of_memory(const std::string& name, const Config& config, const char* what) {
  std::string limits;
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    limits = fmt::format("this process may address {:.3g} GiB (ulimit -v); ", static_cast<double>(as.rlim_cur) / (1 << 30));
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key >> kib && key != "MemAvailable:") meminfo.ignore(64, '\n');
  if (key == "MemAvailable:") limits += fmt::format("the system has {:.3g} GiB available; ", static_cast<double>(kib) / (1 << 20));
  return OutOfMemory(fmt::format("{}: out of memory ({}) with {}; {}lower the sizes (`attnlab run {} --help` lists "
                                 "the parameters)",
                                 name, what, parameters_given(config), limits, name));
}

}  // namespace

void register_experiment(Experiment experiment) {
  for (const auto& e : registry())
    if (e.name == experiment.name) throw Error("lab: experiment '" + experiment.name + "' registered twice");
  registry().push_back(std::move(experiment));
}

std::vector<const Experiment*> experiments() {
  std::vector<const Experiment*> out;
  for (const auto& e : registry()) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const Experiment* a, const Experiment* b) { return a->name < b->name; });
  return out;
}

const Experiment* find_experiment(const std::string& name) {
  for (const auto& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

Result run(const std::string& name, const Config& config, uint64_t seed,
           const std::function<void(const std::string&)>& progress, const std::function<bool()>& interrupt, const RunDistributor* distributor) {
  const Experiment* e = find_experiment(name);
  if (e == nullptr) {
    std::string known;
    for (const auto* x : experiments()) known += (known.empty() ? "" : ", ") + x->name;
    throw Error(fmt::format("unknown experiment '{}' (known: {})", name, known));
  }
  RunContext ctx;
  ctx.seed = seed;
  ctx.progress = progress;
  ctx.interrupt = interrupt;
  ctx.distributor = distributor;
  util::RunStop stop(&ctx.interrupt);
  const util::RunStopScope scope(&stop);
  const auto start = std::chrono::steady_clock::now();
  Result r;
  try {
    r = e->run(config, ctx);
  } catch (const Interrupted&) {
    throw;
  } catch (const OutOfMemory& err) {  // stays one (Python: MemoryError); it names its size, the parameters are added
    throw OutOfMemory(fmt::format("{}: {} (with {})", name, err.what(), parameters_given(config)));
  } catch (const Error& err) {
    throw Error(fmt::format("{}: {}", name, err.what()));
  } catch (const std::bad_alloc&) {
    throw out_of_memory(name, config, "an allocation failed");
  } catch (const std::length_error& err) {
    throw out_of_memory(name, config, err.what());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.experiment = name;
  r.seed = seed;
  for (auto& v : r.verdicts) v.experiment = name;
  return r;
}

// ---- tables -----------------------------------------------------------------

Table::Table(std::string name_, std::vector<std::string> names)
    : name(std::move(name_)), column_names(std::move(names)), columns(column_names.size()) {}

void Table::add_row(const std::vector<double>& row) {
  if (row.size() != column_names.size())
    throw Error(fmt::format("table {}: row of {} values, {} columns", name, row.size(), column_names.size()));
  if (columns.size() != column_names.size()) columns.resize(column_names.size());
  for (size_t c = 0; c < row.size(); ++c) columns[c].push_back(row[c]);
}

const std::vector<double>& Table::column(const std::string& col) const {
  for (size_t c = 0; c < column_names.size(); ++c)
    if (column_names[c] == col) return columns.at(c);
  throw Error(fmt::format("table {}: no column '{}'", name, col));
}

// ---- outcomes ---------------------------------------------------------------

const char* to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::confirmed: return "confirmed";
    case Outcome::refuted: return "refuted";
    case Outcome::inconclusive: return "inconclusive";
    case Outcome::pending: return "pending";
  }
  return "inconclusive";
}

Outcome parse_outcome(const std::string& text) {
  for (Outcome o : {Outcome::confirmed, Outcome::refuted, Outcome::inconclusive, Outcome::pending})
    if (text == to_string(o)) return o;
  throw Error("unknown verdict '" + text + "' (confirmed, refuted, inconclusive, pending)");
}

Verdict make_verdict(const std::string& claim_id) {
  const ClaimInfo& c = claim(claim_id);
  Verdict v;
  v.claim = c.id;
  v.title = c.title;
  v.statement = c.statement;
  v.seeds = c.seeds;
  return v;
}

}  // namespace attnlab::lab
