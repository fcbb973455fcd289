// Experiment `collapse` (C18): attention entropy collapse and unstable training (Zhai et al.
// 2023, "Stabilizing Transformer Training by Preventing Attention Entropy Collapse",
// arXiv:2303.06296). Pathologically low attention entropy goes with unstable training, and
// the collapse comes first.
//
// The training study's model (one attention block, so one head; 1/√d_k), Adam, at a base
// learning rate and at 2× and 4× it, several seeds, evaluated every few steps: the mean
// attention entropy of the head on the held-out set and the held-out loss along training.
// Per run, the first evaluation where the loss stands more than `spike` nats above its best
// so far, once the run has learned the task (a loss spike: training that breaks, not training
// that never starts), and the first where the entropy falls below `collapse` nats (a collapse).
// Two checks, both of the claim: in the runs that spike, did the collapse come at or before the
// spike? And is collapse rare in the runs that do not spike (does low entropy single out the
// unstable runs)? On associative recall the solution itself is one-hot attention, so a stable
// run's entropy also falls towards 0: then the second check, and so the claim, is inconclusive.
#include <fmt/format.h>

#include <atomic>
#include <cmath>

#include "attnlab/train.hpp"
#include "lab/claims_data.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/parallel.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

struct CollapseConfig {
  double base_rate = 0.025;
  std::vector<double> multipliers{1, 2, 4};
  int64_t seeds = 6;
  int64_t steps = 300;
  int64_t d_k = 64;
  int64_t d_model = 32;
  int64_t eval_every = 10;
  int64_t eval_examples = 128;
  double spike = 0.5;      // nats above the best loss so far
  double collapse = 0.05;  // nats of mean attention entropy
  double precede_fraction = 0.75;  // confirmed when at least this share of the spiking runs collapsed first
  double learned = 0.9;    // a spike counts once the run has reached this held-out accuracy (it trained, then broke)
  void bind(Params& p) {
    using namespace rules;
    p.add("base_rate", base_rate, "the 1× peak learning rate of Adam", positive());
    p.add("multipliers", multipliers, "multiples of base_rate to train at", non_empty() & each(positive()));
    p.add("seeds", seeds, "seeds per rate", positive());
    p.add("steps", steps, "optimiser steps per run", positive());
    p.add("d_k", d_k, "head width", positive());
    p.add("d_model", d_model, "residual width", positive());
    p.add("eval_every", eval_every, "steps between evaluations of entropy and loss", positive());
    p.add("eval_examples", eval_examples, "held-out examples per evaluation", positive());
    p.add("spike", spike, "a loss spike: the held-out loss this many nats above its best so far", positive());
    p.add("collapse", collapse, "an entropy collapse: the mean attention entropy below this many nats", positive());
    p.add("precede_fraction", precede_fraction, "confirmed when at least this share of the spiking runs collapsed at or before the spike", above(0.5) & at_most(1));
    p.add("learned", learned, "a loss spike counts only after the run reached this held-out accuracy (0: from the start)",
          in_range(0, 1));
  }
};

struct RunEvents {
  int64_t spike_step = -1, collapse_step = -1;  // −1: never
  bool learned = false;  // reached c.learned held-out accuracy at some evaluation
};

// Instability is a run that trained and then broke: a loss spike counts only once the run has
// learned (a run that stalls from the start is a failure to train, not an unstable one).
RunEvents events(const CollapseConfig& c, const train::RunResult& r) {
  RunEvents e;
  double best = INFINITY;
  for (const auto& p : r.curve) {
    const double loss = std::isfinite(p.eval_loss) ? p.eval_loss : INFINITY;
    if (e.spike_step < 0 && e.learned && loss > best + c.spike) e.spike_step = p.step;
    best = std::min(best, loss);
    e.learned = e.learned || p.eval_accuracy >= c.learned;
    if (e.collapse_step < 0 && std::isfinite(p.entropy) && p.entropy < c.collapse) e.collapse_step = p.step;
  }
  if (e.spike_step < 0 && r.diverged && e.learned) e.spike_step = r.curve.empty() ? 0 : r.curve.back().step + c.eval_every;
  return e;
}

struct Measured {
  Table curves{"collapse_curves", {"multiplier", "seed", "step", "eval_loss", "entropy", "max_logit"}};
  Table runs{"collapse_runs", {"multiplier", "seed", "spike_step", "collapse_step", "final_loss", "learned"}};
  std::vector<train::RunResult> results;  // [multiplier][seed]
  std::vector<RunEvents> events;
};

Measured measure(const CollapseConfig& c, RunContext& ctx) {
  const size_t nm = c.multipliers.size(), ns = static_cast<size_t>(c.seeds);
  Measured m;
  m.results.resize(nm * ns);
  ctx.report(fmt::format("{} runs: rates {:g} × {{{}}}, {} seeds, {} steps", nm * ns, c.base_rate,
                         fmt::join(c.multipliers, ", "), ns, c.steps));
  util::parallel_for(static_cast<int64_t>(nm * ns), ctx.threads, [&](int64_t i) {
    const size_t mi = static_cast<size_t>(i) / ns, seed = static_cast<size_t>(i) % ns;
    train::RunConfig r;
    r.task.kind = train::TaskKind::associative_recall;
    r.model.d_model = c.d_model;
    r.model.d_k = c.d_k;
    r.lr = c.base_rate * c.multipliers[mi];
    r.steps = c.steps;
    r.warmup = std::max<int64_t>(1, c.steps / 10);
    r.eval_every = c.eval_every;
    r.eval_examples = c.eval_examples;
    r.seed = ctx.seed * 1000 + seed + 1;
    m.results[static_cast<size_t>(i)] = train::train_run(r);
  });
  for (size_t i = 0; i < m.results.size(); ++i) {
    const double mult = c.multipliers[i / ns], seed = static_cast<double>(i % ns);
    const auto& r = m.results[i];
    m.events.push_back(events(c, r));
    for (const auto& p : r.curve) m.curves.add_row({mult, seed, static_cast<double>(p.step), p.eval_loss, p.entropy, p.max_logit});
    m.runs.add_row({mult, seed, static_cast<double>(m.events.back().spike_step),
                    static_cast<double>(m.events.back().collapse_step), r.diverged ? NAN : r.final_loss,
                    m.events.back().learned ? 1.0 : 0.0});
  }
  return m;
}

Figure figure_collapse(const CollapseConfig& c, const Measured& m, const Words& words) {
  const size_t ns = static_cast<size_t>(c.seeds);
  Figure f;
  f.name = "entropy_collapse";
  words.fill(f, "figure",
             {{"base_rate", c.base_rate},
              {"multipliers", fmt::format("{}", fmt::join(c.multipliers, ", "))},
              {"seeds", c.seeds},
              {"d_k", c.d_k},
              {"collapse", c.collapse},
              {"spike", c.spike}});
  Panel pe = util::panel("attention entropy", "step", "entropy (nats)", false, true);
  Panel pl = util::panel("held-out loss", "step", "loss (nats)", false, true);
  for (size_t i = 0; i < m.results.size(); ++i) {
    std::vector<double> x, e, l;
    for (const auto& p : m.results[i].curve) {
      x.push_back(static_cast<double>(p.step));
      e.push_back(std::max(p.entropy, 1e-5));  // the log axis: 0 drawn at 10⁻⁵
      l.push_back(std::max(p.eval_loss, 1e-4));
    }
    const size_t mi = i / ns;
    const std::string label = i % ns == 0 ? fmt::format("{:g}×", c.multipliers[mi]) : "";
    pe.series.push_back(util::series(label, Style::lines, x, e, util::colour(mi)));
    pl.series.push_back(util::series(label, Style::lines, x, l, util::colour(mi)));
  }
  pe.series.push_back(util::series("", Style::theory, {0, static_cast<double>(c.steps)}, {c.collapse, c.collapse}, "#000000"));
  pe.legend_position = "below";
  pl.legend_position = "below";
  f.panels = {pe, pl};
  util::stack_panels(f);
  return f;
}

struct Counts {
  int spiked = 0, collapsed_first = 0, spike_first = 0;  // among spiking runs
  int spiked_collapsed = 0;                               // spiking runs that collapsed at any time
  int stable = 0, stable_collapsed = 0;                   // among runs without a spike
  int never_learned = 0;                                  // runs that never reached c.learned (failed, not unstable)
  double lead = 0;                                        // mean steps from collapse to spike, where it came first
};

Counts count(const Measured& m) {
  Counts k;
  for (const auto& e : m.events) {
    k.never_learned += !e.learned;
    if (e.spike_step >= 0) {
      ++k.spiked;
      k.spiked_collapsed += e.collapse_step >= 0;
      if (e.collapse_step >= 0 && e.collapse_step <= e.spike_step) ++k.collapsed_first, k.lead += static_cast<double>(e.spike_step - e.collapse_step);
      else ++k.spike_first;
    } else {
      ++k.stable;
      k.stable_collapsed += e.collapse_step >= 0;
    }
  }
  if (k.collapsed_first) k.lead /= k.collapsed_first;
  return k;
}

Verdict verdict_precedes(const CollapseConfig& c, const Counts& k, const Words& words) {
  Verdict v = make_verdict("C18");
  v.theory = 1;
  v.measured = k.spiked ? static_cast<double>(k.collapsed_first) / k.spiked : NAN;
  v.tolerance = c.precede_fraction;
  const double share = k.spiked ? static_cast<double>(k.collapsed_first) / k.spiked : 0;
  v.outcome = k.spiked == 0                 ? Outcome::inconclusive
              : share >= c.precede_fraction ? Outcome::confirmed
              : k.collapsed_first <= claim_threshold("C18", "refuted_preceding_share") * k.spiked
                  ? Outcome::refuted
                  : Outcome::inconclusive;
  v.figure = "entropy_collapse";
  const int runs = k.spiked + k.stable;
  const std::string failed =
      k.never_learned ? words("precedes.failed", {{"never_learned", k.never_learned}, {"runs", runs}}) : std::string();
  words.fill(v, "precedes",
             {{"spiked", k.spiked},
              {"runs", runs},
              {"learned", c.learned},
              {"spike", c.spike},
              {"collapse", c.collapse},
              {"collapsed_first", k.collapsed_first},
              {"lead", k.lead},
              {"spike_first", k.spike_first},
              {"never_learned", k.never_learned},
              {"precede_fraction", c.precede_fraction},
              {"eval_every", c.eval_every}});
  v.plain =
      k.spiked == 0
          ? words(
                "precedes.plain_no_spike",
                {{"max_multiplier", *std::max_element(c.multipliers.begin(), c.multipliers.end())}, {"failed", failed}})
          : words(
                "precedes.plain_spiked",
                {{"spiked", k.spiked},
                 {"runs", runs},
                 {"collapsed_first", k.collapsed_first},
                 {"collapse", c.collapse},
                 {"lead", k.lead},
                 {"spike_came_first",
                  k.spike_first ? words("precedes.spike_came_first", {{"spike_first", k.spike_first}}) : std::string()},
                 {"failed", failed}});
  return v;
}

// "Pathologically low entropy goes with unstable training": collapse must be what sets the unstable runs apart.
// When the stable runs collapse as well, low entropy marks nothing (inconclusive: on a task whose solution is
// one-hot attention, "pathological" cannot be told from "learnt"); when they collapse more often than the
// spiking ones, the association runs the other way (refuted).
Verdict verdict_association(const CollapseConfig& c, const Counts& k, const Words& words) {
  Verdict v = make_verdict("C18");
  v.check = "association";
  v.title = words("association.title");
  v.statement = words("association.statement");
  const double at_most = claim_threshold("C18", "stable_collapsed_share");
  v.theory = at_most;
  const double stable_share = k.stable ? static_cast<double>(k.stable_collapsed) / k.stable : NAN;
  const double spiked_share = k.spiked ? static_cast<double>(k.spiked_collapsed) / k.spiked : NAN;
  v.measured = stable_share;
  v.tolerance = at_most;
  v.outcome = k.stable == 0 || k.spiked == 0             ? Outcome::inconclusive
              : k.stable_collapsed <= at_most * k.stable ? Outcome::confirmed
              : stable_share > spiked_share              ? Outcome::refuted
                                                         : Outcome::inconclusive;
  v.figure = "entropy_collapse";
  const WordArgs args = {{"stable_collapsed", k.stable_collapsed},
                         {"stable", k.stable},
                         {"collapse", c.collapse},
                         {"spiked_collapsed", k.spiked_collapsed},
                         {"spiked", k.spiked}};
  words.fill(v, "association", args);
  v.plain = words(k.stable == 0                     ? "association.plain_all_spiked"
                  : v.outcome == Outcome::confirmed ? "association.plain_confirmed"
                                                    : "association.plain_not_singled_out",
                  args);
  return v;
}

Result run_collapse(const CollapseConfig& c, RunContext& ctx) {
  const Measured m = measure(c, ctx);
  const Counts k = count(m);
  Result r;
  const Words words("collapse");
  r.setup = words("setup", {{"d_model", c.d_model},
                            {"d_k", c.d_k},
                            {"steps", c.steps},
                            {"base_rate", c.base_rate},
                            {"multipliers", fmt::format("{}", fmt::join(c.multipliers, ", "))},
                            {"seeds", c.seeds},
                            {"eval_examples", c.eval_examples},
                            {"eval_every", c.eval_every}});
  r.tables = {m.runs, m.curves};
  r.notes.push_back(words("note"));
  r.figures = {figure_collapse(c, m, words)};
  r.verdicts = {verdict_precedes(c, k, words), verdict_association(c, k, words)};
  return r;
}

}  // namespace

Experiment collapse_experiment() {
  return make_experiment<CollapseConfig>(
      "collapse", "Attention entropy collapse and unstable training (Zhai et al. 2023): does the collapse precede the loss spike?",
      {"C18"}, run_collapse, {{"seeds", "3"}});
}

}  // namespace attnlab::lab
