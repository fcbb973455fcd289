// The claims as fields for claims.mustache and claim.mustache: one row each for the compact
// table (verdict badge, one line of evidence) and one closed section each with everything
// else (the sources' words, each check's finding and rule, figures, how it was measured);
// then the sources and the experiments' settings and files for the reference sections.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "lab/claim_verdict.hpp"
#include "lab/report/assets.hpp"
#include "lab/report/view.hpp"

namespace attnlab::lab::page {
namespace {

using nlohmann::json;

std::string capitalised(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

json badge(Outcome outcome, const std::string& words) { return {{"class", to_string(outcome)}, {"words", words}}; }

std::vector<const Verdict*> main_checks(const std::vector<Verdict>& vs) {
  std::vector<const Verdict*> out;
  for (const auto& v : vs)
    if (!v.supplementary) out.push_back(&v);
  if (out.empty())
    for (const auto& v : vs) out.push_back(&v);
  return out;
}

// A verdict's finding for the reader: its plain words, else its measured text.
std::string finding(const Verdict& v) { return v.plain.empty() ? v.measured_text : v.plain; }

// The finding's opening, at most about 30 words: the table's one line of evidence. Whole
// sentences until 12 words are reached (a short first sentence alone says too little).
std::string opening(const std::string& text) {
  auto words_in = [](const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), ' ')) + 1; };
  size_t end = 0;
  do {
    end = text.find(". ", end == 0 ? 0 : end + 2);
  } while (end != std::string::npos && words_in(text.substr(0, end)) < 12);
  const std::string s = end == std::string::npos ? text : text.substr(0, end + 1);
  size_t words = 0, at = 0;
  while (words < 30) {
    at = s.find(' ', at + 1);
    if (at == std::string::npos) return s;
    ++words;
  }
  return s.substr(0, at) + " …";
}

// A later part of a figure cut to a screen's height (util::split_stack): <base>_<k>, k ≥ 2.
bool is_part_of(const std::string& name, const std::string& base) {
  if (name.size() <= base.size() + 1 || name.compare(0, base.size(), base) != 0 || name[base.size()] != '_') return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(base.size()) + 1, name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

json source_link(const std::string& seed) {
  const SourceInfo& s = source(seed);
  return {{"seed", seed}, {"label", s.is_paper() ? s.cite : "article " + seed}};
}

// A claim that comes from the papers after 2017 rather than from the five articles.
bool from_papers(const ClaimInfo& info) {
  for (const auto& seed : info.seeds)
    if (!source(seed).is_paper()) return false;
  return !info.seeds.empty();
}

// [{…, first}] so that a template can separate a list's items with commas.
json listed(std::vector<json> items) {
  json out = json::array();
  for (auto& item : items) {
    item["first"] = out.empty();
    out.push_back(std::move(item));
  }
  return out;
}

json quotes(const ClaimInfo& info) {
  json out = json::array();
  for (const auto& q : info.quotes) {
    const SourceInfo& s = source(q.seed);
    out.push_back({{"lang", q.lang},
                   {"original", q.original},
                   {"english", q.english},
                   {"source", source_link(q.seed)},
                   {"url", s.url}});
  }
  return out;
}

json ranges(const Verdict& v) {
  if (v.ranges.empty()) return false;
  json rows = json::array();
  for (const auto& r : v.ranges) {
    const std::string words = r.outcome == Outcome::confirmed ? "holds"
                              : r.outcome == Outcome::refuted ? "does not hold"
                                                              : "unclear";
    rows.push_back({{"span", r.from == r.to ? readable(r.from, 4) : readable(r.from, 4) + "–" + readable(r.to, 4)},
                    {"badge", badge(r.outcome, capitalised(words))},
                    {"text", r.text}});
  }
  return {{"variable", v.range_variable}, {"rows", rows}};
}

// A check's number with what it is, e.g. " (1.135: largest/smallest over d_k)"; "" when there is none.
std::string in_words(const std::string& unit) { return unit.empty() ? "" : " (" + unit + ")"; }
std::string in_unit(double x, const std::string& unit) {
  return std::isfinite(x) ? " (" + readable(x, 4) + (unit.empty() ? "" : ": " + unit) + ")" : "";
}

// One check: theory, measured, tolerance, rule, its verdict, and the command that reruns it.
json check(const ReportOptions& o, const ClaimInfo& info, const Verdict& v) {
  return {{"heading", v.title != info.title || v.supplementary},
          {"supplementary", v.supplementary},
          {"title", v.title},
          {"theory", v.theory_text + in_unit(v.theory, v.theory_unit.empty() ? v.unit : v.theory_unit)},
          {"measured", v.measured_text + in_unit(v.measured, v.unit)},
          {"tolerance", readable(v.tolerance, 4) + in_words(v.tolerance_unit.empty() ? v.unit : v.tolerance_unit)},
          {"rule", v.method},
          {"badge", badge(v.outcome, to_string(v.outcome))},
          {"experiment", v.experiment},
          {"command", fmt::format("attnlab run {} --seed {}{}", v.experiment, o.seed, o.quick ? " --quick" : "")}};
}

json evidence(const ReportOptions& o, const std::vector<Result>& results, const ClaimEntry& c) {
  json e = json::object();
  json findings = json::array();
  for (const Verdict* v : main_checks(c.verdicts)) findings.push_back({{"text", finding(*v)}, {"ranges", ranges(*v)}});
  e["findings"] = findings;
  json figures = json::array();
  std::set<std::string> shown;
  for (const auto& v : c.verdicts)
    if (!v.figure.empty() && shown.insert(v.figure).second)
      if (const Result* r = find_result(results, v.experiment))
        for (const auto& f : r->figures)
          if (f.name == v.figure || is_part_of(f.name, v.figure)) figures.push_back(figure_view(f));
  e["figures"] = figures;
  json setups = json::array();
  std::set<std::string> seen;
  for (const auto& v : c.verdicts)
    if (const Result* r = find_result(results, v.experiment); r && !r->setup.empty() && seen.insert(r->setup).second)
      setups.push_back(r->setup);
  e["setups"] = setups;
  json also = json::array();
  for (const auto& v : c.verdicts)
    if (v.supplementary) also.push_back({{"title", v.title}, {"badge", badge_view({v})}, {"text", finding(v)}});
  e["also"] = also;
  json checks = json::array();
  for (const auto& v : c.verdicts) checks.push_back(check(o, c.info, v));
  e["checks"] = checks;
  return e;
}

// Which experiments would measure a claim that no experiment of this run measured.
json measuring(const std::string& id) {
  std::vector<json> names;
  for (const Experiment* e : experiments())
    for (const auto& claim : e->claims)
      if (claim == id) names.push_back({{"name", e->name}});
  return listed(std::move(names));
}

json claim(const ReportOptions& o, const std::vector<Result>& results, const ClaimEntry& c) {
  const ClaimInfo& info = c.info;
  json j = {{"id", info.id},
            {"title", info.title},
            {"statement", info.statement},
            {"badge", badge_view(c.verdicts)},
            {"quotes", quotes(info)}};
  if (info.quotes.size() < info.seeds.size() || info.quotes.empty()) {
    std::vector<json> links;
    for (const auto& seed : info.seeds) links.push_back(source_link(seed));
    j["stated_in"] = {{"links", listed(std::move(links))}};
  }
  if (c.verdicts.empty()) {
    const json who = measuring(info.id);
    j["pending"] = {{"measuring", who}, {"any", !who.empty()}};
    j["evidence_line"] = "not measured in this run";
  } else {
    j["evidence"] = evidence(o, results, c);
    j["evidence_line"] = opening(finding(*main_checks(c.verdicts).front()));
  }
  return j;
}

// Every contradiction of a claim, for its row of the compact table (not only inside the closed
// section): each refuted side check, and the parts of a main check's range where it does not hold
// (a refuted main check is the row's own evidence line, under its "does not hold").
json contradictions(const ClaimEntry& c) {
  json out = json::array();
  for (const auto& v : c.verdicts) {
    if (v.supplementary) {
      if (v.outcome == Outcome::refuted) out.push_back({{"what", "(side check) " + v.title + ": " + opening(finding(v))}});
      continue;
    }
    if (v.outcome == Outcome::refuted) continue;
    for (const auto& r : v.ranges)
      if (r.outcome == Outcome::refuted) out.push_back({{"what", opening(r.text)}});
  }
  return out;
}

json source_item(const SourceInfo& s) {
  return {{"seed", s.seed}, {"title", s.title}, {"original_title", s.original_title}, {"url", s.url}, {"note", s.note}};
}

}  // namespace

json badge_view(const std::vector<Verdict>& verdicts) {
  // The claim's verdict (claim_verdict's rule) in the claim's own words ("holds for d_k ≥ 32",
  // "depends on n", "mixed").
  return badge(claim_verdict(verdicts), capitalised(plain_outcome(verdicts)));
}

json claims_view(const ReportOptions& o, const std::vector<Result>& results, const std::vector<ClaimEntry>& claims) {
  json rows = json::array(), articles = json::array(), papers = json::array();
  for (const auto& c : claims) {
    json j = claim(o, results, c);
    rows.push_back({{"id", j["id"]},
                    {"title", j["title"]},
                    {"badge", j["badge"]},
                    {"evidence_line", j["evidence_line"]},
                    {"contradictions", contradictions(c)}});
    (from_papers(c.info) ? papers : articles).push_back(std::move(j));
  }
  static const char* const kWords[] = {"no",       "one",      "two",      "three",   "four",    "five",
                                       "six",      "seven",    "eight",    "nine",    "ten",     "eleven",
                                       "twelve",   "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                                       "eighteen", "nineteen", "twenty"};
  auto words = [](size_t n) { return n < std::size(kWords) ? std::string(kWords[n]) : std::to_string(n); };
  return {{"rows", rows},
          {"articles", articles},
          {"papers", papers},
          {"has_papers", !papers.empty()},
          {"count", words(claims.size())},
          {"article_count", words(articles.size())},
          {"paper_count", words(papers.size())}};
}

json sources_view() {
  json articles = json::array(), papers = json::array();
  for (const auto& s : sources()) (s.is_paper() ? papers : articles).push_back(source_item(s));
  return {{"articles", articles}, {"papers", papers}, {"has_papers", !papers.empty()}};
}

json data_view(const ReportOptions& o, const std::vector<Result>& results) {
  json experiments = json::array(), extra = json::array();
  for (const auto& r : results) {
    json figures = json::array(), tables = json::array(), settings = json::array();
    for (const auto& f : r.figures) figures.push_back(f.name);
    for (const auto& t : r.tables) tables.push_back(t.name);
    for (const auto& [k, v] : r.config) settings.push_back(k + "=" + v);
    experiments.push_back({{"name", r.experiment},
                           {"seconds", fmt::format("{:.1f}", r.seconds)},
                           {"figures", figures},
                           {"tables", tables},
                           {"settings", settings},
                           {"setting_count", r.config.size()}});
    // Figures that no claim shows (e.g. learning curves), so that every figure is on the page.
    for (const auto& f : r.figures) {
      bool attached = false;
      for (const auto& v : r.verdicts) attached = attached || v.figure == f.name || is_part_of(f.name, v.figure);
      if (!attached) extra.push_back(figure_view(f));
    }
  }
  return {{"experiments", experiments},
          {"more_figures", extra},
          {"has_more", !extra.empty()},
          {"plotly_license", assets::kPlotlyLicense.file},
          {"rerun", fmt::format("attnlab report --seed {}{}", o.seed, o.quick ? " --quick" : "")}};
}

}  // namespace attnlab::lab::page
