// attnlab report: every part is written (the page, its assets, data and figures), a claim
// no experiment ran for stays pending, and a failed run leaves the earlier report intact.
// The page in a browser is checked by report_browser.py (ctest report.browser).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnlab/lab.hpp"
#include "lab/report/view.hpp"  // the page's badge and templates (src/lab/report)

namespace lab = attnlab::lab;
namespace fs = std::filesystem;

namespace {

struct FailingConfig {
  int64_t unused = 0;
  void bind(lab::Params& p) { p.add("unused", unused, "nothing"); }
};
const bool failing_registered = (lab::register_experiment(lab::make_experiment<FailingConfig>(
                                      "test_failing", "always fails", {"C3"},
                                      [](const FailingConfig&, lab::RunContext&) -> lab::Result {
                                        throw attnlab::Error("deliberate failure");
                                      })),
                                  true);

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("attnlab-report-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}




}  // namespace

TEST(Report, WritesEveryPartWithPendingClaims) {
  if (!lab::plotting_available()) GTEST_SKIP() << "gnuplot with the pngcairo terminal is not installed";
  const auto out = scratch("partial");
  lab::ReportOptions o;
  o.out = out;
  o.quick = true;
  o.seed = 3;
  o.only = {"saturation", "classifier"};
  const auto s = lab::write_report(o);
  EXPECT_TRUE(fs::exists(out / "index.html"));
  EXPECT_TRUE(fs::exists(out / "figures" / "saturation_curves.png"));
  EXPECT_TRUE(fs::exists(out / "data" / "classifier.csv"));
  const auto j = nlohmann::json::parse(read(out / "report.json"));
  EXPECT_EQ(j["seed"], 3);
  ASSERT_EQ(j["claims"].size(), lab::claims().size());
  std::map<std::string, std::string> verdict;
  for (const auto& c : j["claims"]) verdict[c["id"]] = c["verdict"];
  EXPECT_EQ(verdict["C3"], "confirmed");
  EXPECT_EQ(verdict["C10"], "confirmed");
  EXPECT_EQ(verdict["C8"], "pending");
  EXPECT_EQ(verdict["C1"], "pending");
  // A pending claim's reason comes from the registry (which experiment would measure it), not from its id.
  const std::string page = read(out / "index.html");
  EXPECT_NE(page.find("measures C8 (<code>lm</code>, <code>train</code> would; it was not run)"), std::string::npos);
  EXPECT_EQ(page.find("page-check"), std::string::npos) << "the browser test's hook belongs in the test";
  for (const auto& c : j["claims"])
    if (c["id"] == "C3") EXPECT_EQ(c["figure"], "figures/saturation_curves.png");
  // The page works offline: its script, style and plotting library (with its licence) are beside it.
  EXPECT_NE(page.find("<meta name=\"viewport\""), std::string::npos);
  for (const char* asset : {"plotly-cartesian.min.js", "LICENSE-plotly.js.txt", "lab.js", "report.css"}) {
    EXPECT_TRUE(fs::exists(out / "assets" / asset)) << asset;
    EXPECT_NE(page.find(std::string("assets/") + asset), std::string::npos) << asset;
  }
  EXPECT_GT(fs::file_size(out / "assets" / "plotly-cartesian.min.js"), 1'000'000u);
  EXPECT_EQ(read(out / "assets" / "plotly-cartesian.min.js").rfind("/**\n* plotly.js (cartesian - minified)", 0), 0u);
  EXPECT_NE(read(out / "assets" / "LICENSE-plotly.js.txt").find("MIT License"), std::string::npos);
  // Figures are drawn at twice their size on the page, and their size is set there.
  EXPECT_NE(page.find("src=\"figures/saturation_curves.png\" width=\"640\" height=\""), std::string::npos);
  EXPECT_NE(page.find("loading=\"lazy\""), std::string::npos);
  // The articles are linked, the claims quoted in both languages.
  EXPECT_NE(page.find("https://www.zhihu.com/question/339723385"), std::string::npos);
  EXPECT_NE(page.find("lang=\"zh\""), std::string::npos);
  // The papers of C13 onwards are listed and linked too, and their claims come under their own heading.
  EXPECT_NE(page.find("https://arxiv.org/abs/2501.19399"), std::string::npos);
  EXPECT_NE(page.find("id=\"after-2017\""), std::string::npos);
  EXPECT_LT(page.find("id=\"C12\""), page.find("id=\"after-2017\""));
  EXPECT_LT(page.find("id=\"after-2017\""), page.find("id=\"C13\""));
  // No project jargon on the page: parameter names and the project's own word for the articles.
  for (const char* jargon : {"inv_sqrt_d", "ssmax:", "seed 00", "Seed 00", "issue's", "(issue"})
    EXPECT_EQ(page.find(jargon), std::string::npos) << jargon;
  ASSERT_EQ(s.claims.size(), lab::claims().size());
  fs::remove_all(out.parent_path());
}

// The page's badge follows its legend from the checks alone: a failed check, counted in the
// verdict or set beside it, never sits under "holds".
TEST(Report, BadgeFollowsItsChecks) {
  auto check = [](lab::Outcome outcome, bool supplementary) {
    lab::Verdict v = lab::make_verdict("C1");
    v.outcome = outcome;
    v.supplementary = supplementary;
    return v;
  };
  using lab::Outcome;
  // The badge's class is claim_verdict's (tested case by case in test_claim_verdict.cpp): a
  // failed check, even a supplementary one, never sits under "holds".
  EXPECT_EQ(lab::page::badge_view({})["class"], "pending");
  EXPECT_EQ(lab::page::badge_view({check(Outcome::confirmed, false), check(Outcome::confirmed, true)})["class"],
            "confirmed");
  EXPECT_EQ(lab::page::badge_view({check(Outcome::confirmed, false), check(Outcome::refuted, false)})["class"],
            "inconclusive");
  EXPECT_EQ(lab::page::badge_view({check(Outcome::refuted, false), check(Outcome::refuted, true)})["class"], "refuted");
  const auto mixed = lab::page::badge_view({check(Outcome::confirmed, false), check(Outcome::refuted, true)});
  EXPECT_EQ(mixed["class"], "inconclusive");
  EXPECT_EQ(mixed["words"], "Mixed");
}

// The templates escape every field: the view holds plain text, the markup is in the templates.
TEST(Report, TemplatesEscapeTheirFields) {
  const std::string html = lab::page::render("badge", {{"badge", {{"class", "confirmed"}, {"words", "<b>&\""}}}});
  EXPECT_NE(html.find("&lt;b&gt;&amp;&quot;"), std::string::npos) << html;
  EXPECT_NE(html.find("class=\"verdict confirmed\""), std::string::npos) << html;
  EXPECT_THROW(lab::page::render("no_such_template", nlohmann::json::object()), attnlab::Error);
}

TEST(Report, FailedRunLeavesTheEarlierReportIntact) {
  if (!lab::plotting_available()) GTEST_SKIP() << "gnuplot with the pngcairo terminal is not installed";
  const auto out = scratch("atomic");
  lab::ReportOptions o;
  o.out = out;
  o.quick = true;
  o.only = {"classifier"};
  lab::write_report(o);
  const std::string before = read(out / "index.html");
  ASSERT_FALSE(before.empty());
  o.only = {"saturation", "test_failing"};
  EXPECT_THROW(lab::write_report(o), attnlab::Error);
  EXPECT_EQ(read(out / "index.html"), before);
  EXPECT_TRUE(fs::exists(out / "data" / "classifier.csv"));
  EXPECT_FALSE(fs::exists(out / "data" / "saturation_curve.csv"));
  for (const auto& entry : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  o.only = {"no_such_experiment"};
  EXPECT_THROW(lab::write_report(o), attnlab::Error);
  EXPECT_EQ(read(out / "index.html"), before);
  fs::remove_all(out.parent_path());
}

TEST(Report, RecoversFromAnInterruptedRun) {
  if (!lab::plotting_available()) GTEST_SKIP() << "gnuplot with the pngcairo terminal is not installed";
  const auto out = scratch("interrupted");
  // A run killed between its two renames: the previous report sits aside, OUT is missing,
  // and a half-built directory is left. PID 2^22 + 1 is above Linux's pid_max: never alive.
  const auto old = out.parent_path() / ".interrupted.old-4194305";
  const auto tmp = out.parent_path() / ".interrupted.tmp-4194305";
  fs::create_directories(old);
  fs::create_directories(tmp / "figures");
  std::ofstream(old / "marker") << "previous report";
  lab::ReportOptions o;
  o.out = out;
  o.quick = true;
  o.only = {"test_failing"};
  EXPECT_THROW(lab::write_report(o), attnlab::Error);
  EXPECT_TRUE(fs::exists(out / "marker"));  // the previous report is back in place
  EXPECT_FALSE(fs::exists(old));
  EXPECT_FALSE(fs::exists(tmp));
  fs::remove_all(out.parent_path());
}

// A report may replace only what it wrote: a file the user put deep inside an earlier
// report (data/sub/thesis.tex), or a directory of theirs that merely looks like a report
// (J/package.json), is never deleted; the report is refused, naming it.
TEST(Report, NeverDeletesAFileItDidNotWrite) {
  if (!lab::plotting_available()) GTEST_SKIP() << "gnuplot with the pngcairo terminal is not installed";
  const auto out = scratch("users-file");
  lab::ReportOptions o;
  o.out = out;
  o.quick = true;
  o.only = {"classifier"};
  lab::write_report(o);
  fs::create_directories(out / "data" / "sub");
  std::ofstream(out / "data" / "sub" / "thesis.tex") << "my thesis";
  try {
    lab::write_report(o);
    ADD_FAILURE() << "the report replaced a directory holding data/sub/thesis.tex";
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data/sub"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(out / "data" / "sub" / "thesis.tex"), "my thesis");
  const auto j = scratch("looks-like-a-report");
  fs::create_directories(j);
  std::ofstream(j / "package.json") << "{}";
  o.out = j;
  EXPECT_THROW(lab::write_report(o), attnlab::Error);
  EXPECT_EQ(read(j / "package.json"), "{}");
  fs::remove_all(out.parent_path());
}
