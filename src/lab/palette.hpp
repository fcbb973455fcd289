#pragma once
// The lab's colours for signed values, the one convention of every figure: a diverging
// palette with negative values blue, zero white and positive values red (ColorBrewer RdBu's
// ends). The static figures (plot_gnuplot.cpp) and the report's interactive heatmap (lab.js,
// through the page's data attributes) both read it from here.
namespace attnlab::lab::palette {

inline constexpr const char* kNegative = "#2166ac";
inline constexpr const char* kZero = "#f7f7f7";
inline constexpr const char* kPositive = "#b2182b";

}  // namespace attnlab::lab::palette
