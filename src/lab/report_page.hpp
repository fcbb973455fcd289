#pragma once
// The report's page, report/index.html (private to the library). report_page.cpp builds
// it from the experiments' results; story.cpp writes its opening from the measured
// numbers: the argument in five steps, what the measurements add, and the main figure.
//
// The page is a sequence of sections, each one function of report_page.cpp; a new claim
// (src/lab/claims.json) gets its section, its row in the table and its sources with
// no change here.
#include <optional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::lab::page {

struct ClaimEntry {
  ClaimInfo info;
  std::vector<Verdict> verdicts;  // every check any experiment gave on the claim
};

// The claim's overall verdict: claim_verdict (lab/claim_verdict.hpp), the one rule.
Outcome aggregate(const std::vector<Verdict>& verdicts);

// The verdict in plain words ("holds", "does not hold", "depends on d_k", ...).
std::string plain_outcome(const std::vector<Verdict>& verdicts);

// The opening of the page, written from the results (what is missing is left out).
struct Story {
  std::vector<std::string> paragraphs;  // HTML
  std::vector<std::string> additions;   // HTML items of "What the measurements add"
  std::optional<Figure> figure;         // the main figure (figures/story.png)
};
Story story(const std::vector<Result>& results);

std::string build_page(const ReportOptions& options, const std::vector<Result>& results,
                       const std::vector<ClaimEntry>& claims, const Story& story, double seconds);

// Text escaped for HTML.
std::string html(const std::string& text);

// Shorthands for reading a result's tables (story.cpp and report_page.cpp).
const Result* find_result(const std::vector<Result>& results, const std::string& experiment);
const Table* find_table(const std::vector<Result>& results, const std::string& experiment, const std::string& table);

}  // namespace attnlab::lab::page
