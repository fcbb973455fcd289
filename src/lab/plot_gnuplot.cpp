// Figures as data → PNG, drawn by gnuplot (Debian gnuplot-nox, pngcairo terminal)
// from a generated script that is kept beside the PNG (<name>.gp) so that a reader
// can re-draw or restyle any figure.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "attnlab/lab.hpp"
#include "lab/json_io.hpp"
#include "lab/palette.hpp"

extern char** environ;

namespace attnlab::lab {
namespace fs = std::filesystem;
namespace {

// Colour-blind-safe (Okabe–Ito) colours for series without an explicit colour.
const char* const kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};

std::string quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    q += c;
  }
  return q + "\"";
}

// Text drawn on a figure: d_k written as the page writes it, d with a subscript k (gnuplot's
// labels are noenhanced, so "d_k" would show its underscore).
std::string label(std::string s) {
  for (size_t at = s.find("d_k"); at != std::string::npos; at = s.find("d_k", at)) s.replace(at, 3, "d\u2096");
  return quote(s);
}

std::string num(double x) { return fmt::format("{:.10g}", x); }

// Text size, in points, for a figure `width` CSS px wide. pngcairo draws 1 pt as 4/3 px; a phone (412 px)
// shows the figure 380 px wide, so the text is pt·(4/3)·380/width CSS px there: ≥ 10 px needs pt ≥ 7.5·width/380.
int text_pt(int width) { return std::max(13, static_cast<int>(std::ceil(7.5 * width / 380.0))); }

// Dash patterns for the line colours of one panel, in order: two lines that coincide still both show.
const char* const kDashes[] = {"1", "(10,4)", "(3,3)", "(12,4,3,4)"};

bool usable(double v, bool log_axis) { return std::isfinite(v) && (!log_axis || v > 0); }

// Runs gnuplot on a script; stderr goes to err_file. Returns the exit status.
int run_gnuplot(const fs::path& script, const fs::path& err_file) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::string prog = "gnuplot", arg = script.string();
  char* argv[] = {prog.data(), arg.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void write_panel(std::ostream& g, const Panel& p, int panel_index, double panel_px, int pt) {
  g << "reset session\n" << "set encoding utf8\n";
  g << "set title " << label(p.title) << " noenhanced font \"," << pt + 1 << "\"\n";
  // A legend under the plot: gnuplot leaves it touching the x label, so the label moves up half a line.
  const bool key_below =
      p.legend_position.find("below") != std::string::npos || p.legend_position.find("bmargin") != std::string::npos;
  g << "set xlabel " << label(p.x_label) << " noenhanced" << (key_below ? " offset 0,0.5" : "") << "\n";
  g << "set ylabel " << label(p.y_label) << " noenhanced\n";
  g << "set grid lc rgb \"#dddddd\"\n";
  auto range = [&](const char* axis, const std::optional<double>& lo, const std::optional<double>& hi) {
    if (lo || hi) g << "set " << axis << "range [" << (lo ? num(*lo) : "*") << ":" << (hi ? num(*hi) : "*") << "]\n";
  };

  if (p.heatmap) {
    const Heatmap& h = *p.heatmap;
    double m = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (double v : h.values)
      if (std::isfinite(v)) {
        m = std::max(m, std::abs(v));
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    if (h.symmetric_range) {
      if (h.color_limit > 0) m = h.color_limit;
      if (m == 0) m = 1;
      g << "set cbrange [" << num(-m) << ":" << num(m) << "]\n";
      g << "set palette defined (0 \"" << palette::kNegative << "\", 0.5 \"" << palette::kZero << "\", 1 \""
        << palette::kPositive << "\")\n";
    } else {
      if (h.color_limit > 0) lo = 0, hi = h.color_limit;
      if (!(hi > lo)) hi = lo + 1;
      g << "set cbrange [" << num(lo) << ":" << num(hi) << "]\n";
      g << "set palette defined (0 \"#440154\", 0.25 \"#3b528b\", 0.5 \"#21918c\", 0.75 \"#5ec962\", 1 \"#fde725\")\n";
    }
    g << "set format cb \"%g\"\n";
    g << "set cblabel " << label(h.colorbar_label) << " noenhanced\n";
    g << "set xrange [-0.5:" << num(static_cast<double>(h.cols) - 0.5) << "]\n";
    g << "set yrange [" << num(static_cast<double>(h.rows) - 0.5) << ":-0.5]\n";  // row 0 at the top
    g << "set size ratio -1\nunset grid\nunset key\n";
    if (h.cols <= 16) g << "set xtics 1\n";
    if (h.rows <= 16) g << "set ytics 1\n";
    g << "$H" << panel_index << " << EOD\n";
    for (int64_t r = 0; r < h.rows; ++r) {
      for (int64_t c = 0; c < h.cols; ++c) {
        const double v = h.values.at(static_cast<size_t>(r * h.cols + c));
        g << (c ? " " : "") << (std::isfinite(v) ? num(v) : "NaN");
      }
      g << "\n";
    }
    g << "EOD\n";
    g << "plot $H" << panel_index << " matrix with image";
    if (h.annotate)
      g << ", $H" << panel_index << " matrix using 1:2:(sprintf(\"%.2g\",$3)) with labels font \"," << pt
        << "\" tc rgb \"#000000\"";
    g << "\n";
    return;
  }

  // Powers of ten as tic labels only when the axis spans at least two decades
  // (otherwise gnuplot puts tics between powers and the label would lie).
  auto decades = [&](bool x_axis) {
    double lo = INFINITY, hi = 0;
    for (const auto& se : p.series) {
      const auto& a = x_axis ? se.x : (se.style == Style::band ? se.y_high : se.y);
      for (double v : a)
        if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
      if (!x_axis && se.style == Style::band)
        for (double v : se.y_low)
          if (std::isfinite(v) && v > 0) lo = std::min(lo, v);
    }
    return hi > 0 ? std::log10(hi / lo) : 0.0;
  };
  if (p.log_x) g << "set logscale x\n" << (decades(true) >= 2 ? "set format x \"10^{%T}\"\n" : "");
  if (p.log_y) g << "set logscale y\n" << (decades(false) >= 2 ? "set format y \"10^{%T}\"\n" : "");
  // On a log x axis gnuplot widens the range to whole decades, which wastes space;
  // fit it to the data with a small margin instead (unless the caller set it).
  std::optional<double> x_lo = p.x_min, x_hi = p.x_max;
  if (p.log_x && !x_lo && !x_hi) {
    double lo = INFINITY, hi = 0;
    for (const auto& se : p.series)
      for (double v : se.x)
        if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    if (hi > 0) {
      const double margin = std::pow(hi / lo, 0.03) * 1.05;
      x_lo = lo / margin;
      x_hi = hi * margin;
    }
  }
  // Explicit tic labels, thinned so that neighbouring labels never touch: a label is kept
  // when it is at least the width of the two half-labels (a digit is ~0.64 em, ≈ 0.86·pt px)
  // plus a gap away from the last one kept, on an axis of about panel_px − 8.5·pt pixels.
  auto tics = [&](const char* axis, std::vector<double> at, bool log_axis, std::optional<double> lo,
                  std::optional<double> hi, double axis_px) {
    if (at.empty()) return;
    const double a = lo.value_or(at.front()), b = hi.value_or(at.back());
    auto position = [&](double v) {
      if (log_axis) return (std::log(v) - std::log(a)) / (std::log(b) - std::log(a)) * axis_px;
      return (v - a) / (b - a) * axis_px;
    };
    auto width = [&](double v) {
      return 0.43 * pt * static_cast<double>(fmt::format("{:g}", v).size());
    };  // half a label, px
    auto apart = [&](double u, double v) { return std::abs(position(v) - position(u)) >= width(u) + width(v) + 12; };
    std::vector<double> kept;
    for (double v : at)
      if (kept.empty() || b <= a || apart(kept.back(), v)) kept.push_back(v);
    // The last tic (the largest value measured) stays, in place of the kept ones too close to it.
    if (kept.back() != at.back() && b > a) {
      while (!kept.empty() && !apart(kept.back(), at.back())) kept.pop_back();
      kept.push_back(at.back());
    }
    g << "set " << axis << "tics (";
    for (size_t i = 0; i < kept.size(); ++i) g << (i ? ", " : "") << quote(fmt::format("{:g}", kept[i])) << " " << num(kept[i]);
    g << ")\n";
  };
  tics("x", p.x_tics, p.log_x, x_lo, x_hi, std::max(80.0, panel_px - 8.5 * pt));
  tics("y", p.y_tics, p.log_y, p.y_min, p.y_max, 1e9);  // vertical: labels stack, no thinning
  range("x", x_lo, x_hi);
  range("y", p.y_min, p.y_max);
  if (p.legend_position == "off")
    g << "unset key\n";
  else
    g << "set key " << p.legend_position << " noenhanced " << (key_below ? "nobox reverse Left" : "box opaque")
      << " samplen 2 spacing 1.1 font \"," << pt << "\"\n";

  // Each series becomes a datablock, then one plot command draws them all.
  std::vector<std::string> clauses;
  int auto_colour = 0, marker = 0;
  // Lines of one colour (e.g. one per seed) share a dash pattern and a width; each later colour is
  // drawn thinner, so that a line drawn over an earlier one leaves the earlier one showing at its edges.
  std::map<std::string, size_t> order_of_colour;
  auto line = [&](const std::string& colour) {
    const size_t k = order_of_colour.emplace(colour, order_of_colour.size()).first->second;
    return fmt::format("lw {} dt {}", std::max(1.2, 2.8 - 0.5 * static_cast<double>(k)), kDashes[k % 4]);
  };
  bool any_bars = false;
  // Marked series get a different marker shape each (circle, square, triangle, diamond, …),
  // so that two series that coincide still both show.
  static const int kMarkers[] = {7, 5, 9, 13, 11, 15};
  for (size_t s = 0; s < p.series.size(); ++s) {
    const Series& se = p.series[s];
    const std::string block = fmt::format("$D{}_{}", panel_index, s);
    std::ostringstream data;
    size_t points = 0;
    for (size_t i = 0; i < se.x.size(); ++i) {
      if (!usable(se.x[i], p.log_x)) continue;
      if (se.style == Style::band) {
        if (i >= se.y_low.size() || i >= se.y_high.size()) continue;
        if (!usable(se.y_low[i], p.log_y) || !usable(se.y_high[i], p.log_y)) continue;
        data << num(se.x[i]) << " " << num(se.y_low[i]) << " " << num(se.y_high[i]) << "\n";
      } else {
        if (i >= se.y.size() || !usable(se.y[i], p.log_y)) continue;
        data << num(se.x[i]) << " " << num(se.y[i]) << "\n";
      }
      ++points;
    }
    if (points == 0) continue;
    g << block << " << EOD\n" << data.str() << "EOD\n";
    std::string colour = se.color;
    if (colour.empty()) colour = se.style == Style::theory ? "#000000" : kColours[auto_colour++ % 8];
    const std::string title = se.label.empty() ? "notitle" : "title " + label(se.label) + " noenhanced";
    const std::string lc = " lc rgb " + quote(colour);
    std::string how;
    switch (se.style) {
      case Style::points: how = fmt::format("using 1:2 with points pt {} ps 1.1", kMarkers[marker++ % 6]) + lc; break;
      case Style::lines:
        how = fmt::format("using 1:2 with lines {}", line(colour)) + lc;
        break;
      case Style::linespoints:
        how = fmt::format("using 1:2 with linespoints {} pt {} ps 1.0", line(colour), kMarkers[marker++ % 6]) + lc;
        break;
      case Style::theory: how = "using 1:2 with lines lw 2.5 dt (8,5)" + lc; break;
      case Style::bars:
        how = "using 1:2 with boxes fs solid 0.55 border lc rgb \"#555555\" fc rgb " + quote(colour);
        any_bars = true;
        break;
      case Style::band: how = "using 1:2:3 with filledcurves fs transparent solid 0.25 noborder" + lc; break;
      case Style::steps: how = "using 1:2 with histeps lw 2" + lc; break;
    }
    clauses.push_back(block + " " + how + " " + title);
  }
  if (any_bars) g << "set boxwidth 0.9 relative\nset style fill solid 0.55\n";
  if (clauses.empty()) {
    g << "set label 1 \"no data\" at graph 0.5, 0.5 center\nunset key\nplot 1/0 notitle\n";
    return;
  }
  g << "plot ";
  for (size_t i = 0; i < clauses.size(); ++i) g << (i ? ", \\\n     " : "") << clauses[i];
  g << "\n";
}

}  // namespace

bool plotting_available() {
  static const bool available = [] {
    const fs::path dir = fs::temp_directory_path() / fmt::format("attnlab-gnuplot-probe-{}", getpid());
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return false;
    {
      std::ofstream s(dir / "probe.gp");
      s << "set terminal pngcairo size 50,50\nset output " << quote((dir / "probe.png").string()) << "\nplot x\n";
    }
    const bool ok = run_gnuplot(dir / "probe.gp", dir / "probe.err") == 0 && fs::exists(dir / "probe.png");
    fs::remove_all(dir, ec);
    return ok;
  }();
  return available;
}

void render_figure(const Figure& figure, const fs::path& png) {
  if (figure.panels.empty()) throw Error("figure " + figure.name + ": no panels");
  if (figure.layout_rows * figure.layout_cols < static_cast<int>(figure.panels.size()))
    throw Error(fmt::format("figure {}: {} panels do not fit a {}x{} layout", figure.name, figure.panels.size(),
                            figure.layout_rows, figure.layout_cols));
  fs::path script = png;
  script.replace_extension(".gp");
  std::ostringstream g;
  g << "# Generated by attnlab: figure '" << figure.name << "'. Re-draw with: gnuplot " << script.filename().string()
    << "\n";
  // Drawn at twice the figure's size (its size in CSS pixels on the page) with every font,
  // line and point scaled by 2: sharp on high-density screens, and the text keeps its size
  // at the size shown (the page sets the image's width and height to the figure's).
  const int pt = text_pt(figure.width);
  g << "set terminal pngcairo size " << 2 * figure.width << "," << 2 * figure.height << " enhanced font \"DejaVu Sans,"
    << pt << "\" fontscale 2 linewidth 2 pointscale 2 background rgb \"white\"\n";
  g << "set output " << quote(png.filename().string()) << "\n";
  g << "set encoding utf8\n";
  const bool multi = figure.panels.size() > 1 || !figure.title.empty();
  if (multi) {
    g << "set multiplot layout " << figure.layout_rows << "," << figure.layout_cols;
    if (!figure.title.empty()) g << " title " << label(figure.title) << " noenhanced font \"," << pt + 2 << "\"";
    g << "\n";
  }
  for (size_t i = 0; i < figure.panels.size(); ++i) {
    write_panel(g, figure.panels[i], static_cast<int>(i), static_cast<double>(figure.width) / figure.layout_cols, pt);
  }
  if (multi) g << "unset multiplot\n";
  g << "set output\n";
  write_text_file(script, g.str());

  // gnuplot resolves `set output` relative to its working directory: run it in the PNG's folder.
  const fs::path dir = png.has_parent_path() ? png.parent_path() : fs::path(".");
  const fs::path err = dir / (png.stem().string() + ".gnuplot.log");
  const fs::path cwd = fs::current_path();
  std::error_code ec;
  fs::remove(png, ec);
  // posix_spawn has no portable chdir; use an absolute output path instead.
  std::string text = g.str();
  const std::string rel = "set output " + quote(png.filename().string());
  text.replace(text.find(rel), rel.size(), "set output " + quote(fs::absolute(png).string()));
  const fs::path run_script = dir / (png.stem().string() + ".run.gp");
  write_text_file(run_script, text);
  const int rc = run_gnuplot(run_script, err);
  fs::remove(run_script, ec);
  std::string message;
  {
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    message = ss.str();
  }
  fs::remove(err, ec);
  (void)cwd;
  if (rc != 0 || !fs::exists(png) || fs::file_size(png) == 0) {
    if (rc == -1) throw Error("figure " + figure.name + ": cannot run gnuplot (is gnuplot-nox installed?)");
    throw Error(fmt::format("figure {}: gnuplot failed (status {}): {}", figure.name, rc, message));
  }
}

}  // namespace attnlab::lab
