// Every figure of every lab experiment, from its quick run, is readable on a phone: alt text
// that says what it shows, a legend outside the plot area for every panel with several named
// series, and text at least 10 CSS px when the page shows the figure 380 px wide (412 px phone).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

#include "attnlab/lab.hpp"
#include "core/address_sanitizer.hpp"
#include "lab/lab_util.hpp"

namespace lab = attnlab::lab;
namespace fs = std::filesystem;

namespace {

constexpr double kPhoneFigurePx = 380;   // a 412 px phone shows a figure this wide (page margins taken off)
constexpr double kMinTextPx = 10;        // smallest text a reader reads there without zooming
constexpr double kPxPerPoint = 4.0 / 3;  // pngcairo draws a font's point as 4/3 px

const char* const kLabExperiments[] = {"additive", "classifier", "collapse",   "entropy",  "fading",  "gradflow",
                                       "heads",    "hedge",      "invariance", "jacobian", "lm",      "mup",     "qknorm",
                                       "reparam",  "saturation", "softcap",    "train",    "variance"};

bool outside_plot(const std::string& position) {
  for (const char* word : {"below", "above", "outside", "margin"})
    if (position.find(word) != std::string::npos) return true;
  return false;
}

class FigureCase : public ::testing::TestWithParam<const char*> {};

TEST_P(FigureCase, ReadableOnAPhone) {
#ifdef ATTNLAB_ASAN
  // A check of the figures' layout, which the sanitizers add nothing to (167 s there); every
  // experiment's quick run and figures are written under them by report.browser.
  GTEST_SKIP() << "release suite only (the figures' layout; report.browser runs the code sanitized)";
#endif
  const lab::Experiment* e = lab::find_experiment(GetParam());
  ASSERT_NE(e, nullptr) << GetParam();
  const lab::Result r = lab::run(e->name, e->quick, 1);
  ASSERT_FALSE(r.figures.empty());
  const fs::path dir = fs::temp_directory_path() / ("attnlab-test-figures-" + e->name);
  fs::create_directories(dir);
  for (const lab::Figure& f : r.figures) {
    SCOPED_TRACE(f.name);
    // Alt text in words: present, and not the title or the caption again.
    EXPECT_GE(f.alt.size(), 40u) << "alt text missing or too short: '" << f.alt << "'";
    EXPECT_NE(f.alt, f.title);
    EXPECT_NE(f.alt, f.caption);
    // One idea per row: a phone shows the figure's columns side by side at 380 px.
    EXPECT_EQ(f.layout_cols, 1);
    // No figure taller than a screen (a stacked figure is cut into parts: util::split_stack).
    EXPECT_LE(f.height, lab::util::kScreenPx) << f.panels.size() << " panels";
    // A panel's legend sits outside its plot, or is off where another panel of the figure shows it.
    bool any_legend = false, any_named = false;
    for (const lab::Panel& p : f.panels) {
      int named = 0;
      for (const auto& s : p.series) named += s.label.empty() ? 0 : 1;
      any_named = any_named || (named > 1 && !p.heatmap);
      any_legend = any_legend || p.legend_position != "off";
      if (named > 1 && !p.heatmap && p.legend_position != "off")
        EXPECT_TRUE(outside_plot(p.legend_position))
            << "panel '" << p.title << "' has " << named << " named series and legend '" << p.legend_position << "'";
    }
    if (any_named) EXPECT_TRUE(any_legend) << "no panel shows the legend";
    if (!lab::plotting_available()) continue;
    // Every font size gnuplot is told, at the figure's width shown 380 px wide.
    const fs::path png = dir / (f.name + ".png");
    lab::render_figure(f, png);
    std::ifstream in(dir / (f.name + ".gp"));
    const std::string script{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::regex size(R"(font "[^",]*,([0-9.]+)\")");
    int fonts = 0;
    for (auto it = std::sregex_iterator(script.begin(), script.end(), size); it != std::sregex_iterator(); ++it) {
      const double points = std::stod((*it)[1]);
      EXPECT_GE(points * kPxPerPoint * kPhoneFigurePx / f.width, kMinTextPx)
          << points << " pt in a figure " << f.width << " px wide";
      ++fonts;
    }
    EXPECT_GT(fonts, 0) << "no font size in the script";
    // d_k is drawn as the page writes it, d with a subscript k, never with its underscore.
    EXPECT_EQ(script.find("d_k"), std::string::npos) << "a label shows d_k's underscore";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

INSTANTIATE_TEST_SUITE_P(Lab, FigureCase, ::testing::ValuesIn(kLabExperiments),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
