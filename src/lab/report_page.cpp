// report/index.html: the page a reader would send a colleague to explain why attention
// divides by √d_k, shaped as an explainer. The words are in src/lab/report/templates/
// (page.mustache and its partials); this file assembles the view model they read:
//   answer      the title, the answer in two sentences and the main figure (first screen)
//   steps       the argument in five steps, one figure each (story.cpp)
//   claims      a compact table (claim, verdict, one line of evidence), then each claim's full
//               evidence in a closed <details> (report/claims_view.cpp)
//   try it      the interactive figures (assets/lab.js, plotly.js)
//   reference   the sources, the terms, the experiments' settings and files (closed)
#include "lab/report_page.hpp"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "lab/claim_verdict.hpp"
#include "lab/report/assets.hpp"
#include "lab/report/view.hpp"
#include "lab/palette.hpp"

namespace attnlab::lab::page {

std::string readable(double x, int digits) {
  if (!std::isfinite(x)) return "—";
  std::string s = fmt::format("{:.{}g}", x, digits);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  static const char* const kSuperscript[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  const int exponent = std::stoi(s.substr(e + 1));
  std::string power;
  for (char c : std::to_string(std::abs(exponent))) power += kSuperscript[c - '0'];
  const std::string mantissa = s.substr(0, e);
  return (mantissa == "1" ? "" : mantissa + "·") + "10" + (exponent < 0 ? "⁻" : "") + power;
}

nlohmann::json figure_view(const Figure& f, bool lazy) {
  return {{"name", f.name},
          {"width", std::to_string(f.width)},
          {"height", std::to_string(f.height)},
          {"alt", !f.alt.empty()     ? f.alt
                  : !f.title.empty() ? f.title
                                     : f.caption},
          {"caption", f.caption},
          {"lazy", lazy}};
}

const Result* find_result(const std::vector<Result>& results, const std::string& experiment) {
  for (const auto& r : results)
    if (r.experiment == experiment) return &r;
  return nullptr;
}

const Table* find_table(const std::vector<Result>& results, const std::string& experiment, const std::string& table) {
  if (const Result* r = find_result(results, experiment))
    for (const auto& t : r->tables)
      if (t.name == table) return &t;
  return nullptr;
}

std::string plain_outcome(const std::vector<Verdict>& verdicts) {
  const Outcome outcome = claim_verdict(verdicts);  // the one rule: lab/claim_verdict.hpp
  if (outcome == Outcome::pending) return "not measured";
  // Over the range measured: does the outcome change along it? (The main checks; the
  // supplementary ones when there are no others.)
  bool any_main = false;
  for (const auto& v : verdicts) any_main = any_main || !v.supplementary;
  for (const auto& v : verdicts) {
    if ((any_main && v.supplementary) || v.ranges.size() < 2) continue;
    const auto& last = v.ranges.back();
    if (outcome == Outcome::inconclusive) return "depends on " + v.range_variable;
    if (outcome == Outcome::confirmed && last.outcome == Outcome::confirmed)
      return fmt::format("holds for {} ≥ {:.4g}", v.range_variable, last.from);
  }
  switch (outcome) {
    case Outcome::confirmed: return "holds";
    case Outcome::refuted: return "does not hold";
    default: return "mixed";
  }
}

std::string build_page(const ReportOptions& o, const std::vector<Result>& results, const std::vector<ClaimEntry>& claims,
                       const Story& story, double seconds) {
  const std::time_t now = std::time(nullptr);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  nlohmann::json view = story.view;
  view["run"] = {{"seed", std::to_string(o.seed)},
                 {"quick", o.quick},
                 {"stamp", stamp},
                 {"seconds", fmt::format("{:.0f}", seconds)},
                 {"rerun", fmt::format("attnlab report --seed {}{}", o.seed, o.quick ? " --quick" : "")}};
  view["assets"] = {
      {"css", assets::kReportCss.file}, {"plotly", assets::kPlotly.file}, {"lab_js", assets::kLabJs.file}};
  view["palette"] = {
      {"negative", palette::kNegative}, {"zero", palette::kZero}, {"positive", palette::kPositive}};
  view["claims"] = claims_view(o, results, claims);
  view["sources"] = sources_view();
  view["data"] = data_view(o, results);
  return render("page", view);
}

}  // namespace attnlab::lab::page
