// Experiment `variance` (C1, C2): how the spread of q·k grows with d_k, and what
// dividing by √d_k does to it; plus seed 004's experiment, exactly.
//
// For each input distribution (gaussian, uniform), σ and d_k, `replicates`
// independent pairs Q [seq, d_k], K [seq, d_k] are drawn and S = Q Kᵀ [seq, seq]
// is summarised three ways [seed 001]: over the whole matrix, per row (variance
// over keys, averaged over rows) and per column. Theory: mean 0, variance d_k σ⁴
// (each term q_i k_i has variance σ⁴ and the d_k terms are independent).
#include <fmt/format.h>

#include <cmath>

#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct VarianceConfig {
  std::vector<int64_t> dims{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  std::vector<double> sigmas{0.5, 1.0, 2.0};
  std::vector<std::string> distributions{"gaussian", "uniform"};
  int64_t seq = 128;
  int64_t replicates = 8;
  double scale_exponent = 0.5;      // the "scaled" scores are S / d_k^scale_exponent
  std::string keys = "independent";  // or "same_as_queries" (K = Q: self-similarity breaks C1's assumption)
  int64_t seed004_n = 10000;         // seed 004: Q [n, d], K [d, n]
  int64_t seed004_d = 100;
  int64_t histogram_bins = 120;
  double z_max = 5.0;               // a setting agrees with theory if |measured − theory| ≤ z_max standard errors
  double slope_tolerance = 0.05;    // |fitted exponent − predicted exponent|
  double seed004_tolerance = 0.01;  // |mean| and |std − 1| of seed 004's QKᵀ/√d
  void bind(Params& p) {
    using namespace rules;
    p.add("dims", dims, "head dims d_k", non_empty() & each(positive()));
    p.add("sigmas", sigmas, "standard deviations σ of the components of q and k", each(positive()));
    p.add("distributions", distributions, "input distributions: gaussian, uniform", each(one_of({"gaussian", "uniform"})));
    p.add("seq", seq, "rows of Q and K (S = Q Kᵀ is seq × seq)", at_least(2));
    p.add("replicates", replicates, "independent (Q, K) draws averaged per setting", at_least(2));
    p.add("scale_exponent", scale_exponent, "scaled scores are S / d_k^scale_exponent (0.5 = 1/√d_k; 1.0 = the scale applied twice)");
    p.add("keys", keys, "independent, or same_as_queries (K = Q)", one_of({"independent", "same_as_queries"}));
    p.add("seed004_n", seed004_n, "seed 004's experiment: Q is n × d, K is d × n", positive());
    p.add("seed004_d", seed004_d, "seed 004's experiment: d", positive());
    p.add("histogram_bins", histogram_bins, "bins of seed 004's histogram", positive());
    p.add("z_max", z_max, "agreement: |measured − theory| within z_max standard errors");
    p.add("slope_tolerance", slope_tolerance, "agreement of the fitted power of d_k with the predicted one");
    p.add("seed004_tolerance", seed004_tolerance, "agreement of seed 004's mean with 0 and std with 1");
  }
};

struct Summary {
  double mean = 0, var_whole = 0, var_rows = 0, var_cols = 0;
};

// Q, K: [seq, d] row-major. Summaries of S = Q Kᵀ.
Summary summarise(const std::vector<double>& Q, const std::vector<double>& K, int64_t seq, int64_t d) {
  std::vector<double> S = util::buffer<double>("S = Q Kᵀ", seq, seq);
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j) {
      double s = 0;
      for (int64_t t = 0; t < d; ++t) s += Q[static_cast<size_t>(i * d + t)] * K[static_cast<size_t>(j * d + t)];
      S[static_cast<size_t>(i * seq + j)] = s;
    }
  Summary r;
  r.mean = util::mean(S);
  r.var_whole = util::variance(S);
  std::vector<double> line(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) line[static_cast<size_t>(j)] = S[static_cast<size_t>(i * seq + j)];
    r.var_rows += util::variance(line) / static_cast<double>(seq);
    for (int64_t j = 0; j < seq; ++j) line[static_cast<size_t>(j)] = S[static_cast<size_t>(j * seq + i)];
    r.var_cols += util::variance(line) / static_cast<double>(seq);
  }
  return r;
}

// Seed 004: S = Q K / √d with Q [n, d], K [d, n] (as in the seed). The n×n matrix is never
// stored: column blocks of K stay in cache while every row of Q passes over them.
struct Seed004 {
  double mean = 0, std = 0, raw_std = 0;
  std::vector<double> centres, density, raw_centres, raw_density;
};

constexpr int64_t kBlock = 256;

// out[r*kBlock + c] = Σ_t q[r*d + t] K[t*n + j0 + c] for 4 rows r; width ≤ kBlock.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void block4(const double* q, int64_t d, const double* K,
                                                                      int64_t n, int64_t j0, int64_t width,
                                                                      double* out) {
  for (int64_t x = 0; x < 4 * kBlock; ++x) out[x] = 0;
  for (int64_t t = 0; t < d; ++t) {
    const double a0 = q[t], a1 = q[d + t], a2 = q[2 * d + t], a3 = q[3 * d + t];
    const double* k = K + t * n + j0;
    for (int64_t c = 0; c < width; ++c) {
      out[c] += a0 * k[c];
      out[kBlock + c] += a1 * k[c];
      out[2 * kBlock + c] += a2 * k[c];
      out[3 * kBlock + c] += a3 * k[c];
    }
  }
}

Seed004 measure_seed004(int64_t n, int64_t d, int64_t bins, uint64_t seed, int threads) {
  auto g = util::rng(seed, "variance/seed004");
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t rows = (n + 3) / 4 * 4;  // padded with zero rows, which are not counted
  std::vector<double> Q(static_cast<size_t>(rows * d), 0.0), K(static_cast<size_t>(d * n));
  for (int64_t i = 0; i < n * d; ++i) Q[static_cast<size_t>(i)] = normal(g);
  for (auto& x : K) x = normal(g);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double lim = 5.0, raw_lim = 5.0 * std::sqrt(static_cast<double>(d));
  // One accumulator per block of kBlock columns, summed in block order afterwards:
  // the sums do not depend on how many threads shared the blocks.
  struct Acc {
    double sum = 0, sumsq = 0;
    std::vector<double> hist, raw_hist;
  };
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<Acc> acc(static_cast<size_t>(blocks));
  util::parallel_for(blocks, threads, [&](int64_t b) {
    Acc& a = acc[static_cast<size_t>(b)];
    a.hist.assign(static_cast<size_t>(bins), 0.0);
    a.raw_hist.assign(static_cast<size_t>(bins), 0.0);
    std::vector<double> out(static_cast<size_t>(4 * kBlock));
    const int64_t j0 = b * kBlock, width = std::min(kBlock, n - j0);
    for (int64_t i = 0; i < rows; i += 4) {
      block4(&Q[static_cast<size_t>(i * d)], d, K.data(), n, j0, width, out.data());
      for (int64_t r = 0; r < 4 && i + r < n; ++r) {
        double s = 0, ss = 0;
        for (int64_t c = 0; c < width; ++c) {
          const double raw = out[static_cast<size_t>(r * kBlock + c)], x = raw * inv_sqrt_d;
          s += x;
          ss += x * x;
          const int64_t bin = static_cast<int64_t>(std::floor((x + lim) / (2 * lim) * static_cast<double>(bins)));
          if (bin >= 0 && bin < bins) a.hist[static_cast<size_t>(bin)] += 1;
          const int64_t rbin = static_cast<int64_t>(std::floor((raw + raw_lim) / (2 * raw_lim) * static_cast<double>(bins)));
          if (rbin >= 0 && rbin < bins) a.raw_hist[static_cast<size_t>(rbin)] += 1;
        }
        a.sum += s;
        a.sumsq += ss;
      }
    }
  });
  Seed004 r;
  double sum = 0, sumsq = 0;
  std::vector<double> hist(static_cast<size_t>(bins), 0.0), raw_hist(static_cast<size_t>(bins), 0.0);
  for (const auto& a : acc) {
    sum += a.sum;
    sumsq += a.sumsq;
    for (int64_t b = 0; b < bins; ++b) {
      hist[static_cast<size_t>(b)] += a.hist[static_cast<size_t>(b)];
      raw_hist[static_cast<size_t>(b)] += a.raw_hist[static_cast<size_t>(b)];
    }
  }
  const double count = static_cast<double>(n) * static_cast<double>(n);
  r.mean = sum / count;
  r.std = std::sqrt((sumsq - count * r.mean * r.mean) / (count - 1));
  r.raw_std = r.std * std::sqrt(static_cast<double>(d));
  const double width = 2 * lim / static_cast<double>(bins), raw_width = 2 * raw_lim / static_cast<double>(bins);
  for (int64_t b = 0; b < bins; ++b) {
    r.centres.push_back(-lim + (static_cast<double>(b) + 0.5) * width);
    r.density.push_back(hist[static_cast<size_t>(b)] / (count * width));
    r.raw_centres.push_back(-raw_lim + (static_cast<double>(b) + 0.5) * raw_width);
    r.raw_density.push_back(raw_hist[static_cast<size_t>(b)] / (count * raw_width));
  }
  return r;
}

double normal_pdf(double x, double s) { return std::exp(-0.5 * x * x / (s * s)) / (s * std::sqrt(2 * M_PI)); }

// ---- measure ------------------------------------------------------------------

// Per (distribution, σ): the measured series over d_k, for the figure and the fits.
struct Curve {
  std::string dist;
  double sigma;
  std::vector<double> d, var, var_scaled, ratio_whole, ratio_rows, ratio_cols, rel_se;
};

struct VarianceSweep {
  Table table{"variance_by_dim", {"distribution", "sigma", "d_k", "mean", "var_whole", "var_rows", "var_cols",
                                  "var_whole_se", "theory_var", "var_scaled", "theory_var_scaled", "z_whole",
                                  "z_rows", "z_cols", "z_mean"}};
  std::vector<Curve> curves;
  double worst_z = 0;       // largest |z| of any mean or variance against theory
  std::string worst_where;  // the setting where it occurred
  int settings = 0;         // z-scores compared
};

// Standard errors from theory, not from the spread of a few replicates (whose t-tails would
// make a 5σ test flaky). With A = QᵀQ, B = KᵀK (independent Wishart-like matrices, N = seq rows,
// components of excess kurtosis κ), the whole-matrix variance is tr(AB)/N² and
//   Var/(d σ⁴)² = (4 + 2κ)/(N d) + (2 + (2 + 4κ + κ²)/d)/N²,
// the same to O(1/N²) for the per-row and per-column summaries (row/column means removed);
// the matrix mean has variance d σ⁴/N². Both are divided by the R replicates averaged.
struct StandardErrors {
  double var = 0, mean = 0;
};
StandardErrors standard_errors(const std::string& kind, double theory, int64_t seq, int64_t d, int64_t replicates) {
  const double R = static_cast<double>(replicates);
  const double kappa = kind == "uniform" ? -1.2 : 0.0, N = static_cast<double>(seq), dd = static_cast<double>(d);
  const double rel_var = (4 + 2 * kappa) / (N * dd) + (2 + (2 + 4 * kappa + kappa * kappa) / dd) / (N * N);
  return {theory * std::sqrt(rel_var / R), std::sqrt(theory / (N * N * R))};
}

// For each distribution, σ and d_k: `replicates` draws of Q, K [seq, d_k], S = Q Kᵀ summarised.
VarianceSweep measure_sweep(const VarianceConfig& c, RunContext& ctx) {
  VarianceSweep sweep;
  for (size_t di = 0; di < c.distributions.size(); ++di) {
    for (double sigma : c.sigmas) {
      Curve curve{c.distributions[di], sigma, {}, {}, {}, {}, {}, {}, {}};
      const util::Distribution dist{c.distributions[di], sigma};
      ctx.report(fmt::format("{} σ={} over {} head dims", dist.kind, sigma, c.dims.size()));
      for (int64_t d : c.dims) {
        const double theory = static_cast<double>(d) * std::pow(sigma, 4);
        std::vector<Summary> reps(static_cast<size_t>(c.replicates));
        util::parallel_for(c.replicates, ctx.threads, [&](int64_t r) {
          auto g = util::rng(ctx.seed, fmt::format("variance/{}/{}/{}/{}", dist.kind, sigma, d, r));
          std::vector<double> Q = util::buffer<double>("Q", c.seq, d), K = util::buffer<double>("K", c.seq, d);
          for (auto& x : Q) x = dist(g);
          if (c.keys == "same_as_queries")
            K = Q;
          else
            for (auto& x : K) x = dist(g);
          reps[static_cast<size_t>(r)] = summarise(Q, K, c.seq, d);
        });
        std::vector<double> means, whole, rows, cols;
        for (const auto& s : reps) {
          means.push_back(s.mean);
          whole.push_back(s.var_whole);
          rows.push_back(s.var_rows);
          cols.push_back(s.var_cols);
        }
        const StandardErrors se = standard_errors(dist.kind, theory, c.seq, d, c.replicates);
        auto z = [&](const std::vector<double>& v, double expected, double err) { return (util::mean(v) - expected) / err; };
        const double zw = z(whole, theory, se.var), zr = z(rows, theory, se.var), zc = z(cols, theory, se.var),
                     zm = z(means, 0.0, se.mean);
        for (double zz : {zw, zr, zc, zm}) {
          ++sweep.settings;
          if (std::abs(zz) > sweep.worst_z) {
            sweep.worst_z = std::abs(zz);
            sweep.worst_where = fmt::format("{} σ={} d_k={}", dist.kind, sigma, d);
          }
        }
        const double var = util::mean(whole);
        const double var_scaled = var / std::pow(static_cast<double>(d), 2 * c.scale_exponent);
        sweep.table.add_row({static_cast<double>(di), sigma, static_cast<double>(d), util::mean(means), var,
                             util::mean(rows), util::mean(cols), se.var, theory, var_scaled, std::pow(sigma, 4), zw,
                             zr, zc, zm});
        curve.d.push_back(static_cast<double>(d));
        curve.rel_se.push_back(se.var / theory);
        curve.var.push_back(var);
        curve.var_scaled.push_back(var_scaled);
        curve.ratio_whole.push_back(var / theory);
        curve.ratio_rows.push_back(util::mean(rows) / theory);
        curve.ratio_cols.push_back(util::mean(cols) / theory);
      }
      sweep.curves.push_back(curve);
    }
  }
  return sweep;
}

// Fitted powers of d_k: unscaled (theory 1) and scaled (theory 0), worst over curves.
// A curve's fitted power must be within slope_tolerance, or 4 standard errors of the fit when
// sampling noise is larger (small seq, few replicates).
struct PowerFits {
  double worst_slope = 1, worst_scaled_slope = 0;
  double slope_ref = NAN;  // gaussian σ = 1 (the seeds' case), or the worst if absent
  bool slopes_ok = true, scaled_slopes_ok = true;
  double slope_allowance = 0;
};
PowerFits fit_powers(const VarianceConfig& c, const std::vector<Curve>& curves) {
  PowerFits f;
  f.slope_allowance = c.slope_tolerance;
  for (const auto& cu : curves) {
    const double s = util::loglog_slope(cu.d, cu.var), ss = util::loglog_slope(cu.d, cu.var_scaled);
    const double allowance = std::max(c.slope_tolerance, 4 * util::loglog_slope_se(cu.d, cu.rel_se));
    f.slope_allowance = std::max(f.slope_allowance, allowance);
    f.slopes_ok = f.slopes_ok && std::abs(s - 1) <= allowance;
    f.scaled_slopes_ok = f.scaled_slopes_ok && std::abs(ss) <= allowance;
    if (cu.dist == "gaussian" && cu.sigma == 1.0) f.slope_ref = s;
    if (!(std::abs(s - 1) <= std::abs(f.worst_slope - 1))) f.worst_slope = s;  // NaN counts as worst
    if (!(std::abs(ss) <= std::abs(f.worst_scaled_slope))) f.worst_scaled_slope = ss;
  }
  if (std::isnan(f.slope_ref)) f.slope_ref = f.worst_slope;
  return f;
}

// Seed 004's histogram table: measured densities beside N(0, 1) and N(0, d).
Table seed004_table(const VarianceConfig& c, const Seed004& s4) {
  Table hist("seed004_histogram", {"x_scaled", "density_scaled", "normal_0_1", "x_unscaled", "density_unscaled",
                                   "normal_0_d"});
  for (size_t b = 0; b < s4.centres.size(); ++b)
    hist.add_row({s4.centres[b], s4.density[b], normal_pdf(s4.centres[b], 1.0), s4.raw_centres[b], s4.raw_density[b],
                  normal_pdf(s4.raw_centres[b], std::sqrt(static_cast<double>(c.seed004_d)))});
  return hist;
}

// ---- figures ------------------------------------------------------------------

Figure figure_variance(const VarianceConfig& c, const std::vector<Curve>& curves, const Words& words) {
  Figure fig;
  fig.name = "variance_vs_dk";
  fig.title = "";
  words.fill(fig, "variance");
  Panel left = util::panel(words("variance.panel_unscaled"), "d_k", "variance", true, true);
  Panel mid =
      util::panel(c.scale_exponent == 0.5 ? words("variance.panel_scaled_sqrt")
                                          : words("variance.panel_scaled_power", {{"exponent", c.scale_exponent}}),
                  "d_k", "variance", true, true);
  Panel right = util::panel(words("variance.panel_ratio"), "d_k", "ratio", true, false);
  left.legend_position = "below";
  mid.legend_position = "below";
  right.legend_position = "below";
  std::vector<double> xs = util::to_double(c.dims);
  for (size_t i = 0; i < xs.size(); i += xs.size() > 6 ? 2 : 1) left.x_tics.push_back(xs[i]);
  mid.x_tics = right.x_tics = left.x_tics;
  size_t colour_index = 0;
  for (const auto& cu : curves) {
    if (cu.dist != c.distributions.front()) continue;
    const std::string col = util::colour(colour_index++);
    std::vector<double> th, th_scaled;
    for (double d : cu.d) {
      th.push_back(d * std::pow(cu.sigma, 4));
      th_scaled.push_back(std::pow(cu.sigma, 4));
    }
    left.series.push_back(util::series(fmt::format("σ = {}", cu.sigma), Style::points, cu.d, cu.var, col));
    left.series.push_back(util::series("", Style::theory, cu.d, th, col));
    mid.series.push_back(util::series(fmt::format("{} σ={}", cu.dist, cu.sigma), Style::points, cu.d, cu.var_scaled, col));
    mid.series.push_back(util::series(fmt::format("σ⁴ = {}", std::pow(cu.sigma, 4)), Style::theory, cu.d, th_scaled, col));
  }
  // The spread sampling alone would give: ±2 standard errors of the whole-matrix variance (gaussian).
  for (const auto& cu : curves) {
    if (cu.dist != "gaussian") continue;
    std::vector<double> lo, hi;
    for (double se : cu.rel_se) lo.push_back(1 - 2 * se), hi.push_back(1 + 2 * se);
    right.series.insert(right.series.begin(), util::band("±2 standard errors (gaussian)", cu.d, lo, hi, "#bbbbbb"));
    break;
  }
  colour_index = 0;
  for (const auto& cu : curves) {
    const std::string col = util::colour(colour_index++);
    right.series.push_back(util::series(fmt::format("{} σ={} (whole, rows, cols)", cu.dist, cu.sigma), Style::points, cu.d, cu.ratio_whole, col));
    right.series.push_back(util::series("", Style::points, cu.d, cu.ratio_rows, col));
    right.series.push_back(util::series("", Style::points, cu.d, cu.ratio_cols, col));
  }
  right.series.push_back(util::series("theory: 1", Style::theory, xs, std::vector<double>(xs.size(), 1.0)));
  right.y_min = 0.6;
  right.y_max = 1.6;
  mid.y_max = 1e3;
  fig.panels = {left, mid, right};
  util::stack_panels(fig);
  return fig;
}

Figure figure_seed004(const VarianceConfig& c, const Seed004& s4, const Table& hist, const Words& words) {
  Figure hf;
  hf.name = "seed004_histogram";
  hf.title = "";
  const WordArgs args = {{"n", c.seed004_n},
                         {"d", c.seed004_d},
                         {"mean", s4.mean},
                         {"std", s4.std},
                         {"raw_mean", s4.mean * std::sqrt(static_cast<double>(c.seed004_d))},
                         {"raw_std", s4.raw_std}};
  words.fill(hf, "seed004", args);
  Panel h1 = util::panel(words("seed004.panel_unscaled", args), "score", "density");
  h1.series.push_back(util::series("measured histogram", Style::bars, hist.column("x_unscaled"), hist.column("density_unscaled"), "#56B4E9"));
  h1.series.push_back(util::series(fmt::format("N(0, {}) density", c.seed004_d), Style::theory, hist.column("x_unscaled"), hist.column("normal_0_d"), "#D55E00"));
  Panel h2 = util::panel(words("seed004.panel_scaled", args), "score", "density");
  h2.series.push_back(util::series("measured histogram", Style::bars, hist.column("x_scaled"), hist.column("density_scaled"), "#56B4E9"));
  h2.series.push_back(util::series("N(0, 1) density", Style::theory, hist.column("x_scaled"), hist.column("normal_0_1"), "#D55E00"));
  const double ymax = 1.15 * normal_pdf(0, 1.0);
  h2.y_max = ymax;
  h2.y_min = 0;
  h1.y_min = 0;
  // One horizontal axis for both, so that the two spreads can be compared by eye.
  const double x_lim = 4.5 * std::sqrt(static_cast<double>(c.seed004_d));
  h1.x_min = h2.x_min = -x_lim;
  h1.x_max = h2.x_max = x_lim;
  h1.legend_position = h2.legend_position = "below";
  hf.panels = {h1, h2};
  util::stack_panels(hf);
  return hf;
}

// ---- verdicts -----------------------------------------------------------------

// C1 and C2 both predict 1 (a power of d_k, a standard deviation) and pass or fail outright.
Verdict judged(const char* claim, double measured, double tolerance, bool agrees, const char* figure) {
  Verdict v = make_verdict(claim);
  v.theory = 1.0;
  v.measured = measured;
  v.tolerance = tolerance;
  v.outcome = util::outcome_of(agrees);
  v.figure = figure;
  return v;
}

Verdict verdict_c1(const VarianceConfig& c, const VarianceSweep& sweep, const PowerFits& fits, const Words& words) {
  Verdict c1 = judged("C1", fits.worst_slope, fits.slope_allowance, fits.slopes_ok && sweep.worst_z <= c.z_max,
                      "variance_vs_dk");
  words.fill(c1, "c1",
             {{"worst_slope", fits.worst_slope},
              {"slope_ref", fits.slope_ref},
              {"worst_z", sweep.worst_z},
              {"settings", sweep.settings},
              {"worst_where", sweep.worst_where},
              {"replicates", c.replicates},
              {"seq", c.seq},
              {"z_max", c.z_max},
              {"slope_tolerance", c.slope_tolerance}});
  return c1;
}

Verdict verdict_c2(const VarianceConfig& c, const Seed004& s4, const PowerFits& fits, const Words& words) {
  const bool agrees =
      std::abs(s4.mean) <= c.seed004_tolerance && std::abs(s4.std - 1) <= c.seed004_tolerance && fits.scaled_slopes_ok;
  Verdict c2 = judged("C2", s4.std, c.seed004_tolerance, agrees, "seed004_histogram");
  words.fill(c2, "c2",
             {{"n", c.seed004_n},
              {"d", c.seed004_d},
              {"mean", s4.mean},
              {"mean_pretty", util::pretty(s4.mean, 1)},
              {"std", s4.std},
              {"raw_std", s4.raw_std},
              {"scaled_slope", fits.worst_scaled_slope},
              {"seed004_tolerance", c.seed004_tolerance},
              {"scale_exponent", c.scale_exponent},
              {"slope_tolerance", c.slope_tolerance}});
  return c2;
}

Result run_variance(const VarianceConfig& c, RunContext& ctx) {
  Result result;
  VarianceSweep sweep = measure_sweep(c, ctx);
  const PowerFits fits = fit_powers(c, sweep.curves);
  ctx.report(fmt::format("seed 004: Q {}x{} times K {}x{}", c.seed004_n, c.seed004_d, c.seed004_d, c.seed004_n));
  const Seed004 s4 = measure_seed004(c.seed004_n, c.seed004_d, c.histogram_bins, ctx.seed, ctx.threads);
  const Table hist = seed004_table(c, s4);

  result.tables = {sweep.table, hist};
  const Words words("variance");
  const std::string second =
      c.distributions.size() > 1 ? words("note.second_distribution", {{"name", c.distributions[1]}}) : std::string();
  result.notes.push_back(words("note.distributions", {{"first", c.distributions.front()}, {"second", second}}));
  result.notes.push_back(
      words("note.seed004",
            {{"d", c.seed004_d}, {"n", c.seed004_n}, {"mean", s4.mean}, {"std", s4.std}, {"raw_std", s4.raw_std}}));
  result.figures = {figure_variance(c, sweep.curves, words), figure_seed004(c, s4, hist, words)};
  result.verdicts = {verdict_c1(c, sweep, fits, words), verdict_c2(c, s4, fits, words)};
  return result;
}

}  // namespace

Experiment variance_experiment() {
  return make_experiment<VarianceConfig>("variance", "Spread of q·k against d_k, with and without 1/√d_k; seed 004's histogram", {"C1", "C2"},
    run_variance,
    {{"dims", "1,4,16,64,256"}, {"sigmas", "0.5,1,2"}, {"seq", "48"}, {"replicates", "4"}, {"seed004_n", "1500"}});
}

}  // namespace attnlab::lab
