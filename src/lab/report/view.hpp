#pragma once
// The page's view models (private to the library): report_page.cpp, story.cpp and
// claims_view.cpp turn results into JSON objects of formatted fields, and render() fills the
// templates (src/lab/report/templates/*.mustache, compiled in) with them. Every word a
// reader sees that is not a measured number or a claim's own text is in a template.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "lab/report_page.hpp"

namespace attnlab::lab::page {

// A number as a reader reads it: 2 significant digits by default, powers of ten written
// 1.2·10⁻⁶ rather than 1.2e-06; "—" when not finite.
std::string readable(double x, int digits = 2);

// A figure's fields for figure.mustache (name, size, alt text, caption, lazy loading).
nlohmann::json figure_view(const Figure& f, bool lazy = true);

// The badge shown for a claim's checks: the class is claim_verdict's outcome (its rule:
// lab/claim_verdict.hpp), the words the claim's own ("holds", "mixed", "depends on d_k").
nlohmann::json badge_view(const std::vector<Verdict>& verdicts);

// The claims: one row each for the table, one closed section each with the full evidence.
nlohmann::json claims_view(const ReportOptions& options, const std::vector<Result>& results,
                           const std::vector<ClaimEntry>& claims);
// The articles and papers, linked; every experiment with its settings and files.
nlohmann::json sources_view();
nlohmann::json data_view(const ReportOptions& options, const std::vector<Result>& results);

// templates/<name>.mustache filled with the view; every template is available as a partial
// under its file name ({{> figure.mustache}}). Throws Error on a template that does not parse.
std::string render(const std::string& name, const nlohmann::json& view);

}  // namespace attnlab::lab::page
