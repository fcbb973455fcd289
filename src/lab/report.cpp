// `attnlab report`: runs the experiments and writes one self-contained report
// (index.html, report.json, figures/, data/), atomically.
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <cerrno>
#include <csignal>
#include <unistd.h>

#include "attnlab/atomic_files.hpp"
#include "attnlab/lab.hpp"
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

// An interrupted run (killed, Ctrl-C) may leave its hidden work directories next to OUT:
// ".OUT.tmp-PID" (a half-built report) and, if it died between the two renames,
// ".OUT.old-PID" (the previous report, moved aside). Those of processes no longer alive are
// cleaned up here: the previous report is put back if OUT is missing, the rest removed.
void recover_interrupted(const fs::path& parent, const std::string& stem, const fs::path& out) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {
      const std::string prefix = "." + stem + kind;
      if (name.rfind(prefix, 0) != 0) continue;
      const std::string pid_text = name.substr(prefix.size());
      if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
      if (pid == getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // still running (or not ours to judge)
      std::error_code e2;
      if (std::string(kind) == ".old-" && !fs::exists(out))
        fs::rename(entry.path(), out, e2);
      else
        fs::remove_all(entry.path(), e2);
    }
  }
}

}  // namespace

ReportSummary write_report(const ReportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  if (o.out.empty()) throw Error("report: empty output directory");
  // Before any work: only an output directory attnlab wrote may be replaced.
  io::check_replaceable_directory(o.out, "report: --out");
  if (!plotting_available()) throw Error("report: gnuplot with the pngcairo terminal is not available (install gnuplot-nox)");
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
  const fs::path out = fs::absolute(o.out).lexically_normal();
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::current_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("report: cannot create " + parent.string() + ": " + ec.message());
  const std::string stem = out.filename().string();
  recover_interrupted(parent, stem, out);
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", stem, getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw Error("report: cannot create " + tmp.string() + ": " + ec.message());
  io::mark_output_directory(tmp.string());

  try {
    std::vector<Result> results;
    for (size_t i = 0; i < todo.size(); ++i) {
      const Experiment* e = todo[i];
      say(fmt::format("[{}/{}] {}", i + 1, todo.size(), e->name));
      Config config = o.quick ? e->quick : Config{};
      Result r = run(e->name, config, o.seed, [&](const std::string& m) { say("    " + e->name + ": " + m); });
      write_result(r, tmp);
      say(fmt::format("    {} done in {:.1f} s", e->name, r.seconds));
      results.push_back(std::move(r));
    }
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
    if (story.figure) render_figure(*story.figure, tmp / "figures" / (story.figure->name + ".png"));
    write_assets(tmp);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    nlohmann::json j;
    j["seed"] = o.seed;
    j["quick"] = o.quick;
    j["seconds"] = seconds;
    j["claims"] = nlohmann::json::array();
    ReportSummary summary;
    for (const auto& [info, vs] : per_claim) {
      const Outcome outcome = page::aggregate(vs);
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

    // Swap in: move any earlier report aside, rename the new one into place, then delete the old one.
    const fs::path old = parent / fmt::format(".{}.old-{}", stem, getpid());
    fs::remove_all(old, ec);
    io::check_replaceable_directory(o.out, "report: --out");  // again: the run took a while
    const bool had_old = fs::exists(fs::symlink_status(out));
    if (had_old) {
      fs::rename(out, old, ec);
      if (ec) throw Error("report: cannot move the earlier " + out.string() + " aside: " + ec.message());
    }
    fs::rename(tmp, out, ec);
    if (ec) {
      std::error_code ec2;
      if (had_old) fs::rename(old, out, ec2);
      throw Error("report: cannot rename " + tmp.string() + " to " + out.string() + ": " + ec.message());
    }
    if (had_old) fs::remove_all(old, ec);
    summary.index_html = out / "index.html";
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return summary;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace attnlab::lab
