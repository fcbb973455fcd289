#pragma once
// The report's static files, compiled into the program (assets.S.in): written by
// write_report to OUT/assets/, so that the page works offline from file://.
#include <string_view>

extern "C" {
extern const char attnlab_asset_plotly_js_begin[], attnlab_asset_plotly_js_end[];
extern const char attnlab_asset_plotly_license_begin[], attnlab_asset_plotly_license_end[];
extern const char attnlab_asset_lab_js_begin[], attnlab_asset_lab_js_end[];
extern const char attnlab_asset_report_css_begin[], attnlab_asset_report_css_end[];
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

}  // namespace attnlab::lab::assets
