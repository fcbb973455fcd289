// Every figure of every lab experiment, from its quick run, is readable on a phone: alt text
// that says what it shows, a legend outside the plot area for every panel with several named
// series, and text at least 10 CSS px when the page shows the figure 380 px wide (412 px phone).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

#include "attnlab/lab.hpp"

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
    for (const lab::Panel& p : f.panels) {
      int named = 0;
      for (const auto& s : p.series) named += s.label.empty() ? 0 : 1;
      if (named > 1 && !p.heatmap)
        EXPECT_TRUE(outside_plot(p.legend_position))
            << "panel '" << p.title << "' has " << named << " named series and legend '" << p.legend_position << "'";
    }
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
