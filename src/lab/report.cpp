// `attnlab report`: runs the experiments and writes one self-contained report
// (index.html, report.json, figures/, data/), atomically.
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <set>
#include <sstream>
#include <cerrno>
#include <csignal>
#include <unistd.h>

#include "attnlab/atomic_files.hpp"
#include "attnlab/lab.hpp"
#include "lab/json_io.hpp"

namespace attnlab::lab {
namespace fs = std::filesystem;
namespace {

std::string html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string number(double x) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : std::string("—"); }

// The claim's overall verdict: any refutation wins, then any doubt; supplementary checks
// count only when nothing else measured the claim.
Outcome aggregate(const std::vector<Verdict>& all) {
  std::vector<Verdict> vs;
  for (const auto& v : all)
    if (!v.supplementary) vs.push_back(v);
  if (vs.empty()) vs = all;
  if (vs.empty()) return Outcome::pending;
  bool inconclusive = false;
  for (const auto& v : vs) {
    if (v.outcome == Outcome::refuted) return Outcome::refuted;
    if (v.outcome == Outcome::inconclusive || v.outcome == Outcome::pending) inconclusive = true;
  }
  return inconclusive ? Outcome::inconclusive : Outcome::confirmed;
}

// What theory predicts or what was measured, for every check on a claim: each check's own
// words (else its number), passed through `escape` and joined by `separator`.
enum class Side { theory, measured };
std::string joined_texts(const std::vector<Verdict>& vs, Side side, const std::string& separator,
                         std::string (*escape)(const std::string&)) {
  std::string out;
  for (const auto& v : vs) {
    const std::string& text = side == Side::theory ? v.theory_text : v.measured_text;
    const double value = side == Side::theory ? v.theory : v.measured;
    out += (out.empty() ? "" : separator) + escape(text.empty() ? number(value) : text);
  }
  return out;
}
std::string verbatim(const std::string& s) { return s; }

// Why a claim has no verdict: the registered experiments that would measure it (not run
// in this report), or none yet.
std::string pending_reason(const ClaimInfo& info) {
  std::string measuring;
  for (const Experiment* e : experiments())
    for (const auto& id : e->claims)
      if (id == info.id) measuring += (measuring.empty() ? "" : ", ") + ("<code>" + html(e->name) + "</code>");
  if (measuring.empty()) return "No experiment in this build measures " + info.id + " yet";
  return "No experiment run for this report measures " + info.id + " (" + measuring + " would; it was not run)";
}

const Figure* find_figure(const std::vector<Result>& results, const std::string& experiment, const std::string& name) {
  for (const auto& r : results)
    if (r.experiment == experiment)
      for (const auto& f : r.figures)
        if (f.name == name) return &f;
  return nullptr;
}

const char* kStyle = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; max-width: 1240px; margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8em 0; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.35em 0.6em; text-align: left; vertical-align: top; font-size: 0.93em; }
th { background: #f3f3f3; }
.verdict { display: inline-block; padding: 0.1em 0.6em; border-radius: 0.8em; font-weight: bold; color: white; font-size: 0.9em; }
.confirmed { background: #1a7f37; } .refuted { background: #cf222e; } .inconclusive { background: #bf8700; } .pending { background: #6e7781; }
section.claim { border-top: 2px solid #ddd; margin-top: 2.2em; padding-top: 0.6em; }
section.claim h2 { margin-bottom: 0.2em; }
.statement { font-size: 1.05em; }
.seeds, .method, .caption { color: #555; font-size: 0.92em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
code { background: #f3f3f3; padding: 0 0.25em; }
)";

using ClaimVerdicts = std::vector<std::pair<ClaimInfo, std::vector<Verdict>>>;

// How to reproduce a check: `attnlab run EXPERIMENT --seed N [--quick]`.
std::string rerun_command(const ReportOptions& o, const std::string& experiment) {
  return "attnlab run " + html(experiment) + " --seed " + std::to_string(o.seed) + (o.quick ? " --quick" : "");
}

std::string page_head() {
  return std::string("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n") +
         "<title>attnlab report: why attention divides by √d_k</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
}

// The title, what the page is, and one row per claim: verdict, theory, measured.
std::string summary_section(const ReportOptions& o, const ClaimVerdicts& per_claim, double seconds) {
  std::ostringstream h;
  const std::time_t now = std::time(nullptr);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  h << "<h1>Why attention divides by √d<sub>k</sub>: every claim, measured</h1>\n";
  h << "<p class=\"sub\">attnlab report, seed " << o.seed << (o.quick ? ", quick configuration" : "") << ", generated "
    << stamp << " in " << fmt::format("{:.1f}", seconds) << " s. Each claim of the source articles (seeds 000–004, "
    << "numbered in CLAIMS.md) is set against a measurement: the number theory predicts, the number measured, and a "
    << "verdict computed from them.</p>\n";
  h << "<table class=\"summary\">\n<tr><th>id</th><th>claim</th><th>verdict</th><th>theory</th><th>measured</th></tr>\n";
  for (const auto& [info, vs] : per_claim) {
    const Outcome out = aggregate(vs);
    std::string theory = joined_texts(vs, Side::theory, "<br>", html),
                measured = joined_texts(vs, Side::measured, "<br>", html);
    if (vs.empty()) theory = measured = "—";
    h << "<tr><td><a href=\"#" << info.id << "\">" << info.id << "</a></td><td>" << html(info.title) << "</td><td><span class=\"verdict "
      << to_string(out) << "\">" << to_string(out) << "</span></td><td>" << theory << "</td><td>" << measured << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

std::string figure_html(const std::string& name, const Figure* f) {
  std::string h = "<figure><img src=\"figures/" + html(name) + ".png\" alt=\"" + html(f ? f->title : name) + "\">";
  if (f && !f->caption.empty()) h += "<figcaption class=\"caption\">" + html(f->caption) + "</figcaption>";
  return h + "</figure>\n";
}

// One check on a claim: theory, measured, tolerance, how judged, its verdict.
std::string check_table(const ReportOptions& o, const ClaimInfo& info, const Verdict& v) {
  std::ostringstream h;
  h << "<table>\n";
  if (v.title != info.title || v.supplementary)
    h << "<tr><th colspan=\"2\">" << (v.supplementary ? "Supplementary check (not counted in the claim's verdict): " : "")
      << html(v.title) << "</th></tr>\n";
  h << "<tr><th style=\"width:9em\">theory</th><td>" << html(v.theory_text) << (std::isfinite(v.theory) ? " (" + number(v.theory) + ")" : "") << "</td></tr>\n";
  h << "<tr><th>measured</th><td>" << html(v.measured_text) << (std::isfinite(v.measured) ? " (" + number(v.measured) + ")" : "") << "</td></tr>\n";
  h << "<tr><th>tolerance</th><td>" << number(v.tolerance) << "</td></tr>\n";
  h << "<tr><th>how judged</th><td class=\"method\">" << html(v.method) << "</td></tr>\n";
  h << "<tr><th>verdict</th><td><span class=\"verdict " << to_string(v.outcome) << "\">" << to_string(v.outcome)
    << "</span> &nbsp;experiment <code>" << html(v.experiment) << "</code> (<code>" << rerun_command(o, v.experiment)
    << "</code>)</td></tr>\n";
  h << "</table>\n";
  return h.str();
}

// A claim: statement, sources, each figure its checks name (once), and each check.
std::string claim_section(const ReportOptions& o, const std::vector<Result>& results, const ClaimInfo& info,
                          const std::vector<Verdict>& vs) {
  std::ostringstream h;
  const Outcome out = aggregate(vs);
  h << "<section class=\"claim\" id=\"" << info.id << "\">\n<h2>" << info.id << ". " << html(info.title)
    << " <span class=\"verdict " << to_string(out) << "\">" << to_string(out) << "</span></h2>\n";
  h << "<p class=\"statement\">" << html(info.statement) << "</p>\n<p class=\"seeds\">Source: ";
  for (size_t i = 0; i < info.seeds.size(); ++i) h << (i ? ", " : "") << "seed " << info.seeds[i];
  h << "</p>\n";
  if (vs.empty()) h << "<p>" << pending_reason(info) << ": the verdict is <b>pending</b>.</p>\n";
  std::set<std::string> shown_figures;
  for (const auto& v : vs) {
    if (!v.figure.empty() && !shown_figures.count(v.figure)) {
      shown_figures.insert(v.figure);
      h << figure_html(v.figure, find_figure(results, v.experiment, v.figure));
    }
    h << check_table(o, info, v);
  }
  h << "</section>\n";
  return h.str();
}

// Every experiment's time, figures, data and configuration; the figures no check names.
std::string experiments_section(const ReportOptions& o, const std::vector<Result>& results) {
  std::ostringstream h;
  h << "<section class=\"experiments\"><h2>Experiments, figures and data</h2>\n<table>\n<tr><th>experiment</th><th>time</th><th>figures</th><th>data (CSV)</th><th>configuration</th></tr>\n";
  for (const auto& r : results) {
    h << "<tr><td><code>" << html(r.experiment) << "</code></td><td>" << fmt::format("{:.1f} s", r.seconds) << "</td><td>";
    for (const auto& f : r.figures) h << "<a href=\"figures/" << html(f.name) << ".png\">" << html(f.name) << "</a><br>";
    h << "</td><td>";
    for (const auto& t : r.tables) h << "<a href=\"data/" << html(t.name) << ".csv\">" << html(t.name) << ".csv</a><br>";
    h << "</td><td style=\"font-size:0.8em\">";
    for (const auto& [k, v] : r.config) h << html(k) << "=" << html(v) << " ";
    h << "</td></tr>\n";
  }
  h << "</table>\n";
  for (const auto& r : results)
    for (const auto& f : r.figures) {
      bool attached = false;
      for (const auto& v : r.verdicts) attached = attached || v.figure == f.name;
      if (attached) continue;
      h << "<figure><img src=\"figures/" << html(f.name) << ".png\" alt=\"" << html(f.title) << "\"><figcaption class=\"caption\">"
        << html(f.caption) << "</figcaption></figure>\n";
    }
  h << "<p class=\"method\">Each figure's gnuplot script is kept beside it (<code>figures/*.gp</code>); "
    << "<code>report.json</code> holds every verdict. Reproduce with <code>attnlab report --seed " << o.seed
    << (o.quick ? " --quick" : "") << "</code>.</p>\n</section>\n";
  return h.str();
}

std::string build_html(const ReportOptions& o, const std::vector<Result>& results, const ClaimVerdicts& per_claim,
                       double seconds) {
  std::string page = page_head() + summary_section(o, per_claim, seconds);
  for (const auto& [info, vs] : per_claim) page += claim_section(o, results, info, vs);
  return page + experiments_section(o, results) + "</body>\n</html>\n";
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
    std::vector<std::pair<ClaimInfo, std::vector<Verdict>>> per_claim;
    for (const auto& c : claims()) {
      std::vector<Verdict> vs;
      for (const auto& r : results)
        for (const auto& v : r.verdicts)
          if (v.claim == c.id) vs.push_back(v);
      per_claim.emplace_back(c, vs);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    nlohmann::json j;
    j["seed"] = o.seed;
    j["quick"] = o.quick;
    j["seconds"] = seconds;
    j["claims"] = nlohmann::json::array();
    ReportSummary summary;
    for (const auto& [info, vs] : per_claim) {
      const Outcome outcome = aggregate(vs);
      nlohmann::json cj{{"id", info.id}, {"title", info.title}, {"statement", info.statement}, {"seeds", info.seeds},
                        {"verdict", to_string(outcome)}};
      const std::string theory = joined_texts(vs, Side::theory, " | ", verbatim),
                        measured = joined_texts(vs, Side::measured, " | ", verbatim);
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
      j["experiments"].push_back({{"name", r.experiment}, {"seconds", r.seconds}, {"config", r.config}, {"notes", r.notes}});
    write_text_file(tmp / "report.json", j.dump(2) + "\n");
    write_text_file(tmp / "index.html", build_html(o, results, per_claim, seconds));

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
