#pragma once
// The report's page, report/index.html (private to the library), rendered from the
// templates in src/lab/report/templates/ with a view model built from the results:
// story.cpp gives the answer and the argument in five steps with their figures,
// report/claims_view.cpp the claims table and each claim's evidence. A new claim
// (src/lab/claims.json) gets its row, its section and its sources with no change here.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::lab::page {

struct ClaimEntry {
  ClaimInfo info;
  std::vector<Verdict> verdicts;  // every check any experiment gave on the claim
};

// The claim's verdict (claim_verdict, lab/claim_verdict.hpp) in plain words ("holds", "does not hold", "depends on
// d_k", ...).
std::string plain_outcome(const std::vector<Verdict>& verdicts);

// The opening of the page, from the results (what is missing is left out): the fields
// story.mustache reads, and the figures it shows (drawn by write_report into figures/).
struct Story {
  nlohmann::json view;
  std::vector<Figure> figures;  // one per step, and the main figure
};
Story story(const std::vector<Result>& results);
// The first screen's answer from the language-model study (lm_story.cpp): the fields
// answer.mustache reads under "lm", its figure added to `figures`; nullopt without the study.
std::optional<nlohmann::json> lm_answer(const std::vector<Result>& results, std::vector<Figure>& figures);

std::string build_page(const ReportOptions& options, const std::vector<Result>& results,
                       const std::vector<ClaimEntry>& claims, const Story& story, double seconds);

// Shorthands for reading a result's tables (story.cpp and report_page.cpp).
const Result* find_result(const std::vector<Result>& results, const std::string& experiment);
const Table* find_table(const std::vector<Result>& results, const std::string& experiment, const std::string& table);

}  // namespace attnlab::lab::page
