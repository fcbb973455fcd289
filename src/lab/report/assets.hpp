#pragma once
// The report's static files, compiled into the program (assets.S.in): written by
// write_report to OUT/assets/, so that the page works offline from file://.
#include <string_view>

extern "C" {
extern const char attnlab_asset_plotly_js_begin[], attnlab_asset_plotly_js_end[];
extern const char attnlab_asset_plotly_license_begin[], attnlab_asset_plotly_license_end[];
extern const char attnlab_asset_lab_js_begin[], attnlab_asset_lab_js_end[];
extern const char attnlab_asset_report_css_begin[], attnlab_asset_report_css_end[];
extern const char attnlab_asset_template_page_begin[], attnlab_asset_template_page_end[];
extern const char attnlab_asset_template_answer_begin[], attnlab_asset_template_answer_end[];
extern const char attnlab_asset_template_steps_begin[], attnlab_asset_template_steps_end[];
extern const char attnlab_asset_template_claims_begin[], attnlab_asset_template_claims_end[];
extern const char attnlab_asset_template_claim_begin[], attnlab_asset_template_claim_end[];
extern const char attnlab_asset_template_figure_begin[], attnlab_asset_template_figure_end[];
extern const char attnlab_asset_template_badge_begin[], attnlab_asset_template_badge_end[];
extern const char attnlab_asset_template_try_begin[], attnlab_asset_template_try_end[];
extern const char attnlab_asset_template_reference_begin[], attnlab_asset_template_reference_end[];
extern const char attnlab_asset_template_source_begin[], attnlab_asset_template_source_end[];
}

namespace attnlab::lab::assets {

struct Asset {
  const char* file;        // its name under OUT/assets/
  std::string_view bytes;
};

inline std::string_view span(const char* begin, const char* end) {
  return {begin, static_cast<size_t>(end - begin)};
}

// plotly.js, cartesian bundle (third_party/plotly.js-cartesian-dist-min, MIT), and its licence;
// the page's own script (the interactive figures) and style sheet (src/lab/report/).
inline const Asset kPlotly{"plotly-cartesian.min.js", span(attnlab_asset_plotly_js_begin, attnlab_asset_plotly_js_end)};
inline const Asset kPlotlyLicense{"LICENSE-plotly.js.txt",
                                  span(attnlab_asset_plotly_license_begin, attnlab_asset_plotly_license_end)};
inline const Asset kLabJs{"lab.js", span(attnlab_asset_lab_js_begin, attnlab_asset_lab_js_end)};
inline const Asset kReportCss{"report.css", span(attnlab_asset_report_css_begin, attnlab_asset_report_css_end)};

inline const Asset* const kAll[] = {&kPlotly, &kPlotlyLicense, &kLabJs, &kReportCss};

// The page's templates (src/lab/report/templates/*.mustache), by file name; rendered by
// lab/report/render.cpp, never written to the output directory.
inline const Asset kTemplates[] = {
    {"page.mustache", span(attnlab_asset_template_page_begin, attnlab_asset_template_page_end)},
    {"answer.mustache", span(attnlab_asset_template_answer_begin, attnlab_asset_template_answer_end)},
    {"steps.mustache", span(attnlab_asset_template_steps_begin, attnlab_asset_template_steps_end)},
    {"claims.mustache", span(attnlab_asset_template_claims_begin, attnlab_asset_template_claims_end)},
    {"claim.mustache", span(attnlab_asset_template_claim_begin, attnlab_asset_template_claim_end)},
    {"figure.mustache", span(attnlab_asset_template_figure_begin, attnlab_asset_template_figure_end)},
    {"badge.mustache", span(attnlab_asset_template_badge_begin, attnlab_asset_template_badge_end)},
    {"try.mustache", span(attnlab_asset_template_try_begin, attnlab_asset_template_try_end)},
    {"reference.mustache", span(attnlab_asset_template_reference_begin, attnlab_asset_template_reference_end)},
    {"source.mustache", span(attnlab_asset_template_source_begin, attnlab_asset_template_source_end)},
};

}  // namespace attnlab::lab::assets
