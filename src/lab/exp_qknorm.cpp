// Experiment `qknorm` (C17): attention logit growth at high learning rates, and QK-norm
// (Dehghani et al. 2023; Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
// training instabilities", arXiv:2309.14322). In small models trained at high learning rates
// the attention logits grow until attention is one-hot and the loss degrades or diverges;
// normalising q and k removes the growth and widens the range of good learning rates.
//
// The training study's model (attnlab/train.hpp) on associative recall, Adam with the study's
// warm-up and cosine schedule, over a sweep of peak learning rates × {1/√d_k, qk-norm} × seeds.
// qk-norm here is the study's: q and k rows normalised to unit length and multiplied by a
// learned temperature exp(s) that starts at √d_k (Wortsman et al. apply a LayerNorm to q and
// k and keep 1/√d_k: the same bound on the logits, with a gain per component instead of one
// temperature). Per run: the final held-out loss (a diverged run counts as chance, ln C), the
// largest |logit| on the held-out set along training, and the final attention entropy.
//
// The verdict uses Wortsman et al.'s notion of learning-rate sensitivity: per scaling, the band
// of rates whose seed-mean final loss is within ε of that scaling's best, as the span in
// decades of the contiguous run of rates around the best; and their LR sensitivity
// E_lr[min(loss, chance) − best].
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>

#include "attnlab/train.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct QkConfig {
  bool full = false;
  std::vector<double> rates{1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1};
  std::string baseline = "inv_sqrt_d";
  std::string candidate = "qknorm";
  int64_t seeds = 0;     // 0: 3, full 5
  int64_t steps = 0;     // 0: 300, full 1000
  int64_t d_k = 0;       // 0: 64, full 256
  int64_t d_model = 32;
  int64_t layers = 0;    // 0: 1, full 2
  double epsilon = 0.1;  // nats: "within ε of the best loss"
  double growth = 5;     // logit growth: the largest |logit| at the highest rate ≥ this × at the lowest
  void bind(Params& p) {
    using namespace rules;
    p.add("full", full, "the heavy sweep (5 seeds, 1000 steps, d_k 256, two blocks; minutes): see docs/lab.md");
    p.add("rates", rates, "peak learning rates of Adam (at least 6 over 3 decades for the claim)", at_least_items(2) & each(positive()) & increasing());
    p.add("baseline", baseline, "the scaling without normalisation (a scale policy)", util::scaling_rule());
    p.add("candidate", candidate, "the scaling under test: qknorm, or a scale policy", util::scaling_rule());
    p.add("seeds", seeds, "seeds per (scaling, rate) (0: 3, full 5)", at_least(0));
    p.add("steps", steps, "optimiser steps per run (0: 300, full 1000)", at_least(0));
    p.add("d_k", d_k, "head width (0: 64, full 256)", at_least(0));
    p.add("d_model", d_model, "residual width", positive());
    p.add("layers", layers, "attention blocks, 1 or 2 (0: 1, full 2)", in_range(0, 2));
    p.add("epsilon", epsilon, "a rate is good when its mean final loss is within this many nats of the scaling's best", positive());
    p.add("growth", growth, "logit growth: the largest |logit| at the highest rate is at least this × at the lowest", positive());
    p.check({"candidate", "baseline"}, "candidate differs from baseline",
            [this] { return !(train::Scaling::parse(candidate) == train::Scaling::parse(baseline)); });
  }
};

struct Resolved {
  int64_t seeds, steps, d_k, layers;
  train::Scaling base, cand;
};

// The configuration with the presets resolved (0 = the quick or full preset's value).
Resolved resolve(const QkConfig& c) {
  return Resolved{c.seeds ? c.seeds : (c.full ? 5 : 3), c.steps ? c.steps : (c.full ? 1000 : 300),
                  c.d_k ? c.d_k : (c.full ? 256 : 64),  c.layers ? c.layers : (c.full ? 2 : 1),
                  train::Scaling::parse(c.baseline),    train::Scaling::parse(c.candidate)};
}

std::string scaling_label(const train::Scaling& s) { return s.qk_norm ? "qk-norm" : util::policy_label(s.policy); }
std::string scaling_colour(const train::Scaling& s) { return s.qk_norm ? "#CC79A7" : util::policy_colour(s.policy); }

struct Cell {
  double loss = 0;          // seed mean of the final loss (diverged: chance)
  double loss_min = INFINITY, loss_max = -INFINITY;
  double max_logit = 0;     // seed mean of the largest |logit| along training
  double entropy = 0;       // seed mean of the final attention entropy (diverged runs left out)
  int diverged = 0;
};

struct Band {
  size_t best = 0;         // the scaling's own best rate
  bool empty = true;       // its best loss is not within ε of the best of all scalings
  size_t lo = 0, hi = 0;   // the contiguous run of rates around `best` within ε of the best of all scalings
  double decades = -1;     // log10(rate[hi] / rate[lo]); −1 when empty
  double sensitivity = 0;  // Wortsman et al.'s: mean over rates of min(loss, chance) − its own best
};

struct Measured {
  Table runs{"qknorm_runs", {"scaling", "lr", "seed", "final_loss", "diverged", "max_logit", "max_logit_init",
                             "final_entropy", "final_accuracy"}};
  Table curves{"qknorm_curves", {"scaling", "lr", "seed", "step", "eval_loss", "max_logit", "entropy"}};
  std::vector<std::vector<Cell>> cells;  // [scaling: 0 baseline, 1 candidate][rate]
  std::vector<Band> bands;
  double chance = 0;
  double overall_best = 0;               // the best seed-mean loss of either scaling
  double init_logit[2] = {0, 0};         // seed mean of the largest |logit| at init, at the lowest rate
};

// `overall`: the best seed-mean loss of any scaling at any rate.
Band band_of(const std::vector<Cell>& cells, const std::vector<double>& rates, double epsilon, double chance, double overall) {
  Band b;
  for (size_t i = 0; i < cells.size(); ++i)
    if (cells[i].loss < cells[b.best].loss) b.best = i;
  const double own = cells[b.best].loss;
  for (const auto& c : cells) b.sensitivity += (std::min(c.loss, chance) - own) / static_cast<double>(cells.size());
  b.lo = b.hi = b.best;
  b.empty = !(own <= overall + epsilon);
  if (b.empty) return b;
  while (b.lo > 0 && cells[b.lo - 1].loss <= overall + epsilon) --b.lo;
  while (b.hi + 1 < cells.size() && cells[b.hi + 1].loss <= overall + epsilon) ++b.hi;
  b.decades = std::log10(rates[b.hi] / rates[b.lo]);
  return b;
}

Measured measure(const QkConfig& c, const Resolved& r, RunContext& ctx) {
  const train::Scaling scalings[2] = {r.base, r.cand};
  const size_t nr = c.rates.size(), ns = static_cast<size_t>(r.seeds);
  std::vector<train::RunResult> runs(2 * nr * ns);
  train::RunConfig base_config;
  base_config.task.kind = train::TaskKind::associative_recall;
  base_config.model.d_model = c.d_model;
  base_config.model.d_k = r.d_k;
  base_config.model.n_layers = r.layers;
  base_config.steps = r.steps;
  base_config.warmup = std::max<int64_t>(1, r.steps / 10);
  base_config.eval_every = std::max<int64_t>(1, r.steps / 15);
  std::atomic<int64_t> done{0};
  const auto start = std::chrono::steady_clock::now();
  ctx.report(fmt::format("{} runs: {} rates × 2 scalings × {} seeds, {} steps, d_k = {}", runs.size(), nr, ns, r.steps, r.d_k));
  util::parallel_for(static_cast<int64_t>(runs.size()), ctx.threads, [&](int64_t i) {
    const size_t si = static_cast<size_t>(i) / (nr * ns), ri = static_cast<size_t>(i) / ns % nr, seed = static_cast<size_t>(i) % ns;
    train::RunConfig rc = base_config;
    rc.model.scale = scalings[si];
    rc.lr = c.rates[ri];
    rc.seed = ctx.seed * 1000 + seed + 1;
    runs[static_cast<size_t>(i)] = train::train_run(rc);
    const int64_t finished = ++done;
    if (c.full || finished == static_cast<int64_t>(runs.size())) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ctx.report(fmt::format("{}/{} runs, {:.0f} s, about {:.0f} s left", finished, runs.size(), elapsed,
                             elapsed / static_cast<double>(finished) * static_cast<double>(static_cast<int64_t>(runs.size()) - finished)));
    }
  });
  Measured m;
  m.chance = std::log(static_cast<double>(train::n_classes(base_config.task)));
  m.cells.assign(2, std::vector<Cell>(nr));
  for (size_t si = 0; si < 2; ++si)
    for (size_t ri = 0; ri < nr; ++ri) {
      Cell& cell = m.cells[si][ri];
      int finite = 0;
      for (size_t seed = 0; seed < ns; ++seed) {
        const auto& run = runs[(si * nr + ri) * ns + seed];
        const double loss = run.diverged || !std::isfinite(run.final_loss) ? m.chance : run.final_loss;
        double top = 0;
        for (const auto& p : run.curve) {
          if (std::isfinite(p.max_logit)) top = std::max(top, p.max_logit);
          m.curves.add_row({static_cast<double>(si), c.rates[ri], static_cast<double>(seed), static_cast<double>(p.step),
                            p.eval_loss, p.max_logit, p.entropy});
        }
        const double entropy = run.diverged ? NAN : run.curve.back().entropy;
        m.runs.add_row({static_cast<double>(si), c.rates[ri], static_cast<double>(seed), loss, run.diverged ? 1.0 : 0.0, top,
                        run.curve.front().max_logit, entropy, run.final_accuracy});
        cell.loss += loss / static_cast<double>(ns);
        cell.loss_min = std::min(cell.loss_min, loss);
        cell.loss_max = std::max(cell.loss_max, loss);
        cell.max_logit += top / static_cast<double>(ns);
        if (!run.diverged) cell.entropy += entropy, ++finite;
        cell.diverged += run.diverged;
        if (ri == 0) m.init_logit[si] += run.curve.front().max_logit / static_cast<double>(ns);
      }
      cell.entropy = finite ? cell.entropy / finite : NAN;
    }
  double overall = INFINITY;
  for (const auto& row : m.cells)
    for (const auto& cell : row) overall = std::min(overall, cell.loss);
  m.overall_best = overall;
  for (size_t si = 0; si < 2; ++si) m.bands.push_back(band_of(m.cells[si], c.rates, c.epsilon, m.chance, overall));
  return m;
}

// "block" or "blocks", as the model has one attention block or more.
std::string block_noun(const Resolved& r, const Words& words) {
  return words(r.layers > 1 ? "block.many" : "block.one");
}

Figure figure_qknorm(const QkConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const train::Scaling scalings[2] = {r.base, r.cand};
  Figure f;
  f.name = "qknorm_lr_sweep";
  words.fill(f, "figure",
             {{"d_k", r.d_k},
              {"layers", r.layers},
              {"block_noun", block_noun(r, words)},
              {"steps", r.steps},
              {"seeds", r.seeds},
              {"baseline", scaling_label(r.base)},
              {"candidate", scaling_label(r.cand)},
              {"epsilon", c.epsilon},
              {"floor", c.epsilon / 100}});
  // The criterion is a distance to the best loss (ε nats): drawn as that distance on a log axis, where ε and the
  // losses near it are apart, rather than as the loss itself on a linear axis, where ε is a hair's breadth.
  Panel pl = util::panel("final loss above the best", "peak learning rate", "loss − best loss (nats)", true, true);
  const double floor = c.epsilon / 100;  // the best cell itself (0 above the best) is drawn at this floor
  Panel pg = util::panel("largest |logit|", "peak learning rate", "largest |logit|", true, true);
  Panel pe = util::panel("entropy at the end", "peak learning rate", "entropy (nats)", true, false);
  for (size_t si = 0; si < 2; ++si) {
    std::vector<double> loss, lo, hi, logit, entropy;
    for (const auto& cell : m.cells[si]) {
      auto above = [&](double x) { return std::max(x - m.overall_best, floor); };
      loss.push_back(above(cell.loss)), lo.push_back(above(cell.loss_min)), hi.push_back(above(cell.loss_max));
      logit.push_back(cell.max_logit), entropy.push_back(cell.entropy);
    }
    const std::string col = scaling_colour(scalings[si]), label = scaling_label(scalings[si]);
    pl.series.push_back(util::band("", c.rates, lo, hi, col));
    pl.series.push_back(util::series(label, Style::linespoints, c.rates, loss, col));
    pg.series.push_back(util::series(label, Style::linespoints, c.rates, logit, col));
    pe.series.push_back(util::series(label, Style::linespoints, c.rates, entropy, col));
  }
  pl.series.push_back(util::series(fmt::format("ε = {:g} nats: good rates lie below", c.epsilon), Style::theory,
                                   {c.rates.front(), c.rates.back()}, {c.epsilon, c.epsilon}, "#000000"));
  pl.series.push_back(util::series("chance (a diverged run)", Style::theory, {c.rates.front(), c.rates.back()},
                                   {m.chance - m.overall_best, m.chance - m.overall_best}, "#777777"));
  pl.legend_position = "below";
  pl.y_min = floor / 2;
  pl.y_max = 2 * (m.chance - m.overall_best);
  pg.legend_position = "below";
  pe.legend_position = "below";
  pe.y_min = 0;
  f.panels = {pl, pg, pe};
  util::stack_panels(f);
  return f;
}

std::string band_text(const QkConfig& c, const Band& b, const Words& words) {
  if (b.empty) return words("band.none");
  return b.lo == b.hi ? words("band.one", {{"rate", c.rates[b.best]}})
                      : words("band.range", {{"lo", c.rates[b.lo]}, {"hi", c.rates[b.hi]}, {"decades", b.decades}});
}

Verdict verdict_c17(const QkConfig& c, const Resolved& r, const Measured& m, const Words& words) {
  const Band &base = m.bands[0], &cand = m.bands[1];
  const auto& top_base = m.cells[0].back();
  const auto& top_cand = m.cells[1].back();
  Verdict v = make_verdict("C17");
  v.theory = c.epsilon;
  v.measured = cand.decades - base.decades;
  v.tolerance = c.epsilon;
  v.outcome = cand.decades > base.decades + 1e-9   ? Outcome::confirmed
              : cand.decades < base.decades - 1e-9 ? Outcome::refuted
                                                   : Outcome::inconclusive;
  v.figure = "qknorm_lr_sweep";
  const bool grew = top_base.max_logit >= c.growth * m.init_logit[0];
  words.fill(
      v, "c17",
      {{"rates", c.rates.size()},
       {"rate_first", c.rates.front()},
       {"rate_last", c.rates.back()},
       {"seeds", r.seeds},
       {"steps", r.steps},
       {"d_k", r.d_k},
       {"epsilon", c.epsilon},
       {"overall_best", m.overall_best},
       {"baseline", scaling_label(r.base)},
       {"base_band", band_text(c, base, words)},
       {"base_best", c.rates[base.best]},
       {"base_loss", m.cells[0][base.best].loss},
       {"base_sensitivity", base.sensitivity},
       {"candidate", scaling_label(r.cand)},
       {"cand_band", band_text(c, cand, words)},
       {"cand_best", c.rates[cand.best]},
       {"cand_loss", m.cells[1][cand.best].loss},
       {"cand_sensitivity", cand.sensitivity},
       {"top_base_logit", top_base.max_logit},
       {"top_cand_logit", top_cand.max_logit},
       {"init_base", m.init_logit[0]},
       {"init_cand", m.init_logit[1]},
       {"top_base_entropy", top_base.entropy},
       {"top_cand_entropy", top_cand.entropy},
       {"top_base_diverged", top_base.diverged},
       {"top_cand_diverged", top_cand.diverged},
       {"reading", words(v.outcome == Outcome::confirmed ? "c17.reading_confirmed"
                         : v.outcome == Outcome::refuted ? "c17.reading_refuted"
                                                         : "c17.reading_inconclusive")},
       {"growth", words(grew ? "c17.grows" : "c17.does_not_grow")},
       {"diverged",
        top_base.diverged ? words("c17.diverged", {{"top_base_diverged", top_base.diverged}, {"seeds", r.seeds}}) : ""},
       {"scale_note", v.outcome == Outcome::inconclusive ? words("c17.scale_note") : ""}});
  return v;
}

Result run_qknorm(const QkConfig& c, RunContext& ctx) {
  const Resolved r = resolve(c);
  const Measured m = measure(c, r, ctx);
  Result result;
  result.config = {{"seeds", std::to_string(r.seeds)}, {"steps", std::to_string(r.steps)}, {"d_k", std::to_string(r.d_k)},
                   {"layers", std::to_string(r.layers)}};
  const Words words("qknorm");
  result.setup = words("setup", {{"layers", r.layers},
                                 {"block_noun", block_noun(r, words)},
                                 {"d_model", c.d_model},
                                 {"d_k", r.d_k},
                                 {"steps", r.steps},
                                 {"seeds", r.seeds},
                                 {"rate_first", c.rates.front()},
                                 {"rate_last", c.rates.back()}});
  result.tables = {m.runs, m.curves};
  result.notes.push_back(words("note", {{"baseline_name", r.base.name()}, {"candidate_name", r.cand.name()}}));
  result.figures = {figure_qknorm(c, r, m, words)};
  result.verdicts = {verdict_c17(c, r, m, words)};
  return result;
}

}  // namespace

Experiment qknorm_experiment() {
  return make_experiment<QkConfig>(
      "qknorm", "Attention logit growth at high learning rates, and QK-norm (Wortsman et al. 2023): a learning-rate sweep",
      {"C17"}, run_qknorm, {{"rates", "1e-4,1e-3,1e-2,1e-1"}, {"seeds", "2"}, {"steps", "120"}});
}

}  // namespace attnlab::lab
