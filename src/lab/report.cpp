// `attnlab report`: runs the experiments and writes one self-contained report
// (index.html, report.json, figures/, data/), atomically.
#include <chrono>
#include <ctime>
#include <fstream>
#include <fmt/format.h>
#include <cerrno>
#include <csignal>
#include <unistd.h>

#include "attnlab/output_directory.hpp"
#include "attnlab/lab.hpp"
#include "attnlab/run_distributor.hpp"
#include "lab/claim_verdict.hpp"
#include "lab/json_io.hpp"
#include "lab/report/assets.hpp"
#include "lab/report_page.hpp"

namespace attnlab::lab {
namespace fs = std::filesystem;
namespace {

std::string number(double x) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : std::string("—"); }

// What theory predicts or what was measured, for every check on a claim, joined by " | "
// (report.json and the summary the command line prints).
enum class Side { theory, measured };
std::string joined_texts(const std::vector<Verdict>& vs, Side side) {
  std::string out;
  for (const auto& v : vs) {
    const std::string& text = side == Side::theory ? v.theory_text : v.measured_text;
    const double value = side == Side::theory ? v.theory : v.measured;
    out += (out.empty() ? "" : " | ") + (text.empty() ? number(value) : text);
  }
  return out;
}

// The page's script, style sheet and plotting library (with its licence), into OUT/assets/.
void write_assets(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "assets", ec);
  if (ec) throw Error("report: cannot create " + (dir / "assets").string() + ": " + ec.message());
  for (const assets::Asset* a : assets::kAll) write_text_file(dir / "assets" / a->file, std::string(a->bytes));
}

// Each experiment's expected cost: its seconds in the report already at --out when that
// report was run with the same --quick (rank 0 reads it), else the mean of the known ones
// (1 when none is known). Only the balance depends on it, never a result.
std::vector<double> expected_seconds(const RunDistributor& d, const ReportOptions& o,
                                     const std::vector<const Experiment*>& todo) {
  std::string known;
  if (d.rank() == 0) {
    std::ifstream in(o.out / "report.json");
    const nlohmann::json earlier = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    nlohmann::json seconds = nlohmann::json::object();
    if (earlier.is_object() && earlier.value("quick", !o.quick) == o.quick && earlier.contains("experiments"))
      for (const auto& e : earlier["experiments"])
        if (e.is_object() && e.value("name", nlohmann::json()).is_string() && e.value("seconds", nlohmann::json()).is_number())
          seconds[e["name"].get<std::string>()] = e["seconds"];
    known = seconds.dump();
  }
  if (d.size() > 1) known = d.broadcast(known);
  const nlohmann::json seconds = nlohmann::json::parse(known, nullptr, false);
  std::vector<double> costs(todo.size(), kNaN);
  double sum = 0;
  int count = 0;
  for (size_t i = 0; i < todo.size(); ++i)
    if (seconds.is_object() && seconds.contains(todo[i]->name)) {
      costs[i] = seconds[todo[i]->name].get<double>();
      sum += costs[i];
      ++count;
    }
  for (double& c : costs)
    if (std::isnan(c)) c = count > 0 ? sum / count : 1.0;
  return costs;
}

}  // namespace

ReportSummary write_report(const ReportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  const RunDistributor& d = o.distributor ? *o.distributor : one_process();
  std::vector<const Experiment*> todo;
  if (o.only.empty()) {
    todo = experiments();
  } else {
    for (const auto& name : o.only) {
      const Experiment* e = find_experiment(name);
      if (!e) throw Error("report: unknown experiment '" + name + "'");
      todo.push_back(e);
    }
  }
  // Before any work, on rank 0 (every rank learns the outcome): only an output directory
  // attnlab wrote may be replaced, and rank 0 alone draws the figures.
  std::string checks;
  if (d.rank() == 0) try {
      io::check_replaceable_directory(o.out, "report: --out");
      if (!plotting_available())
        throw Error("report: gnuplot with the pngcairo terminal is not available (install gnuplot-nox)");
    } catch (const Error& e) {
      checks = e.what();
    }
  if (d.size() > 1) checks = d.broadcast(checks);
  if (!checks.empty()) throw Error(checks);

  // Each experiment runs on one rank (assign_runs, by the seconds rank 0's previous report took).
  const std::vector<int> owner = assign_runs(expected_seconds(d, o, todo), d.size());
  std::vector<Result> results(todo.size());
  // This rank's experiments, then (with several ranks) every rank's results on rank 0.
  auto run_and_gather = [&] {
    ShareOutcome mine;
    std::vector<std::string> mine_bytes;
    for (size_t i = 0; i < todo.size(); ++i) {
      if (owner[i] != d.rank()) continue;
      const Experiment* e = todo[i];
      say(fmt::format("[{}/{}] {}", i + 1, todo.size(), e->name));
      Config config = o.quick ? e->quick : Config{};
      try {
        results[i] = run(e->name, config, o.seed, [&](const std::string& m) { say("    " + e->name + ": " + m); });
      } catch (const std::exception& err) {
        if (d.size() == 1) throw;
        mine.interrupted = dynamic_cast<const Interrupted*>(&err) != nullptr;
        if (!mine.interrupted) mine.failure = fmt::format("rank {}, experiment {}: {}", d.rank(), e->name, err.what());
        break;
      }
      say(fmt::format("    {} done in {:.1f} s", e->name, results[i].seconds));
      if (d.size() > 1) mine_bytes.push_back(result_to_bytes(results[i]));
    }
    if (d.size() == 1) return;
    mine.payload = pack(mine_bytes);
    const std::vector<std::string> shares = gather_shares(d, mine);  // throws on every rank if one failed
    for (size_t r = 1; r < shares.size(); ++r) {  // rank 0: each rank's results are in its index order
      const std::vector<std::string> parts = unpack(shares[r]);
      size_t next = 0;
      for (size_t i = 0; i < todo.size(); ++i)
        if (owner[i] == static_cast<int>(r)) results[i] = result_from_bytes(parts.at(next++));
    }
  };
  if (d.rank() != 0) {
    run_and_gather();
    return {};
  }
  ReportSummary summary;
  io::build_output_directory(o.out, "report: --out", [&](const fs::path& tmp) {
    run_and_gather();
    for (const auto& r : results) write_result(r, tmp);
    // One entry per claim of the catalogue, with every verdict any experiment gave on it.
    std::vector<page::ClaimEntry> per_claim;
    for (const auto& c : claims()) {
      std::vector<Verdict> vs;
      for (const auto& r : results)
        for (const auto& v : r.verdicts)
          if (v.claim == c.id) vs.push_back(v);
      per_claim.push_back({c, vs});
    }
    const page::Story story = page::story(results);
    for (const Figure& f : story.figures) render_figure(f, tmp / "figures" / (f.name + ".png"));
    write_assets(tmp);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    nlohmann::json j;
    j["seed"] = o.seed;
    j["quick"] = o.quick;
    j["seconds"] = seconds;
    j["claims"] = nlohmann::json::array();
    for (const auto& [info, vs] : per_claim) {
      const Outcome outcome = claim_verdict(vs);
      nlohmann::json cj{{"id", info.id},       {"title", info.title}, {"statement", info.statement},
                        {"seeds", info.seeds}, {"verdict", to_string(outcome)}, {"in_words", page::plain_outcome(vs)}};
      const std::string theory = joined_texts(vs, Side::theory), measured = joined_texts(vs, Side::measured);
      cj["theory"] = vs.empty() ? nlohmann::json(nullptr) : nlohmann::json(theory);
      cj["measured"] = vs.empty() ? nlohmann::json(nullptr) : nlohmann::json(measured);
      cj["figure"] = nlohmann::json(nullptr);
      for (const auto& v : vs)
        if (!v.figure.empty()) {
          cj["figure"] = "figures/" + v.figure + ".png";
          break;
        }
      cj["checks"] = nlohmann::json::array();
      for (const auto& v : vs) cj["checks"].push_back(verdict_json(v));
      j["claims"].push_back(cj);
      Verdict agg = make_verdict(info.id);
      agg.outcome = outcome;
      agg.theory_text = theory;
      agg.measured_text = measured;
      summary.claims.push_back(agg);
    }
    j["experiments"] = nlohmann::json::array();
    for (const auto& r : results)
      j["experiments"].push_back(
          {{"name", r.experiment}, {"seconds", r.seconds}, {"config", r.config}, {"setup", r.setup}, {"notes", r.notes}});
    write_text_file(tmp / "report.json", j.dump(2) + "\n");
    write_text_file(tmp / "index.html", page::build_page(o, results, per_claim, story, seconds));
  });
  summary.index_html = io::output_directory_path(o.out, "report: --out") / "index.html";
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace attnlab::lab
