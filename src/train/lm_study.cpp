// The language-model study's sweep (attnlab/lm_study.hpp): the arms, the presets, the runs in
// sweep order, their costs, and the runs trained on threads.
#include "attnlab/lm_study.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "attnlab/error.hpp"
#include "train/run_pool.hpp"

namespace attnlab::train::lm {

// ---- arms --------------------------------------------------------------------------------

namespace {
constexpr const char* kAlphaPrefix = "alpha";
}

std::string Arm::name() const {
  switch (kind) {
    case Kind::inv_sqrt_d: return "inv_sqrt_d";
    case Kind::none: return "none";
    case Kind::inv_d: return "inv_d";
    case Kind::alpha_sqrt: return fmt::format("{}{:g}", kAlphaPrefix, alpha);
    case Kind::qk_norm: return "qknorm";
  }
  return "?";
}

std::string Arm::label() const {
  switch (kind) {
    case Kind::inv_sqrt_d: return "1/√d_k";
    case Kind::none: return "no scale";
    case Kind::inv_d: return "1/d_k";
    case Kind::alpha_sqrt: return fmt::format("{:g}/√d_k", alpha);
    case Kind::qk_norm: return "qk-norm";
  }
  return "?";
}

Arm Arm::parse(const std::string& text) {
  for (const Arm& a : {inv_sqrt_d(), none(), inv_d(), qk_norm()})
    if (text == a.name()) return a;
  if (text.rfind(kAlphaPrefix, 0) == 0) {
    const std::string number = text.substr(std::string(kAlphaPrefix).size());
    size_t used = 0;
    double alpha = 0;
    try {
      alpha = std::stod(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == number.size() && used > 0 && std::isfinite(alpha) && alpha > 0) return alpha_sqrt(alpha);
  }
  throw Error("arm: '" + text + "' is not inv_sqrt_d, none, inv_d, qknorm or alphaA (A/√d_k, A > 0, e.g. alpha2)");
}

Scaling Arm::at(int64_t d_k) const {
  switch (kind) {
    case Kind::inv_sqrt_d: return ScalePolicy::inv_sqrt_d();
    case Kind::none: return ScalePolicy::none();
    case Kind::inv_d: return ScalePolicy::inv_d();
    case Kind::alpha_sqrt: return ScalePolicy::fixed(alpha / std::sqrt(static_cast<double>(d_k)));
    case Kind::qk_norm: return Scaling::qk_norm_temperature();
  }
  return ScalePolicy::inv_sqrt_d();
}

// ---- presets ------------------------------------------------------------------------------

namespace {

// AdamW on both inits with every arm; SGD on GPT-2's init with the two arms C8 compares.
std::vector<LmGroup> full_groups() {
  const std::vector<Arm> all{Arm::inv_sqrt_d(), Arm::none(), Arm::inv_d(), Arm::alpha_sqrt(2), Arm::alpha_sqrt(4),
                             Arm::qk_norm()};
  return {{LmInit::gpt2, LmOptimizer::adamw, all},
          {LmInit::unit, LmOptimizer::adamw, all},
          {LmInit::gpt2, LmOptimizer::sgd, {Arm::inv_sqrt_d(), Arm::none()}}};
}

}  // namespace

LmStudyConfig full_lm_study() {
  LmStudyConfig s;
  s.groups = full_groups();
  s.d_ks = {16, 64, 256};
  s.seeds = 3;
  s.base.model.context = 64;
  s.base.model.d_model = 64;
  s.base.model.n_layers = 4;
  s.base.model.n_heads = 4;
  s.base.steps = 300;
  s.base.warmup = 30;
  s.base.batch = 16;
  s.base.eval_every = 25;
  s.base.eval_windows = 64;
  s.threads = 2;
  return s;
}

LmStudyConfig reduced_lm_study() {
  LmStudyConfig s = full_lm_study();
  s.groups = {{LmInit::gpt2, LmOptimizer::adamw, {Arm::inv_sqrt_d(), Arm::none()}},
              {LmInit::unit, LmOptimizer::adamw, {Arm::inv_sqrt_d(), Arm::none()}}};
  s.d_ks = {64};
  s.tuned = lm_cached_rates();
  return s;
}

// ---- the sweep ----------------------------------------------------------------------------

namespace {

std::vector<double> rates_of(const LmStudyConfig& c, const LmGroup& g, int64_t d_k, const Arm& arm) {
  const auto& axis = g.optimizer == LmOptimizer::adamw ? c.adamw_lrs : c.sgd_lrs;
  if (!axis.empty()) return axis;
  for (const auto& t : c.tuned)
    if (t.init == g.init && t.optimizer == g.optimizer && t.d_k == d_k && t.arm == arm.name()) return {t.lr};
  return {default_lm_lr(g.optimizer)};
}

// Visits every run of the sweep in order with its group and arm.
template <class F>
void for_each_run(const LmStudyConfig& c, F visit) {
  if (c.groups.empty() || c.d_ks.empty()) throw Error("lm study: every sweep axis needs at least one value");
  if (c.seeds < 1 || c.seeds > 1000) throw Error("lm study: seeds must be in [1, 1000]");
  for (const auto* axis : {&c.adamw_lrs, &c.sgd_lrs})
    for (double lr : *axis)
      if (!(std::isfinite(lr) && lr > 0)) throw Error("lm study: every learning rate of the sweep must be > 0");
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const LmGroup& g = c.groups[gi];
    if (g.arms.empty()) throw Error("lm study: a group has no arms");
    for (int64_t d_k : c.d_ks)
      for (const Arm& arm : g.arms)
        for (double lr : rates_of(c, g, d_k, arm))
          for (int64_t s = 0; s < c.seeds; ++s) {
            LmRunConfig r = c.base;
            r.model.d_k = d_k;
            r.model.scale = arm.at(d_k);
            r.model.init = g.init;
            r.optimizer = g.optimizer;
            r.lr = lr;
            r.seed = c.first_seed + static_cast<uint64_t>(s);
            visit(r, RunPlace{gi, arm});
          }
  }
}

}  // namespace

std::vector<LmRunConfig> expand(const LmStudyConfig& config) {
  std::vector<LmRunConfig> runs;
  for_each_run(config, [&](const LmRunConfig& r, const RunPlace&) { runs.push_back(r); });
  return runs;
}

std::vector<RunPlace> places(const LmStudyConfig& config) {
  std::vector<RunPlace> out;
  for_each_run(config, [&](const LmRunConfig&, const RunPlace& p) { out.push_back(p); });
  return out;
}

double run_cost(const LmRunConfig& r) {
  // Multiply-adds per position: per block the projections (q, k: 2·D·H·d_k; v, o: 2·D²; the
  // MLP: 8·D²) and the scores and weighted sum over T keys (T·H·d_k + T·D); then the tied output.
  const auto& m = r.model;
  const double D = static_cast<double>(m.d_model), T = static_cast<double>(m.context);
  const double qk = static_cast<double>(m.n_heads * m.d_k);
  const double block = 2 * D * qk + 10 * D * D + T * qk + T * D;
  const double per_position = static_cast<double>(m.n_layers) * block + static_cast<double>(m.vocab > 0 ? m.vocab : 64) * D;
  return static_cast<double>(r.steps) * static_cast<double>(r.batch) * T * per_position;
}

LmStudyResult run_lm_study(const LmStudyConfig& config, const Corpus& corpus, const LmTrainer& train,
                           const std::function<void(const LmProgress&)>& progress, const std::vector<int64_t>* only) {
  std::vector<LmRunConfig> all = expand(config);
  const std::vector<RunPlace> where = places(config);
  for (auto& r : all) r.model.vocab = corpus.vocab();  // the model's alphabet is the corpus's
  std::vector<int64_t> picked;
  if (only) {
    picked = *only;
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) picked.push_back(i);
  }
  std::vector<double> costs;
  for (int64_t i : picked) {
    if (i < 0 || i >= static_cast<int64_t>(all.size()))
      throw Error(fmt::format("lm study: run {} of a sweep of {}", i, all.size()));
    costs.push_back(run_cost(all[static_cast<size_t>(i)]));
  }
  LmStudyResult result;
  result.config = config;
  result.runs.resize(all.size());
  const auto start = std::chrono::steady_clock::now();
  run_pool(
      costs, config.threads,
      [&](int64_t u) {
        const auto i = static_cast<size_t>(picked[static_cast<size_t>(u)]);
        result.runs[i] = train(all[i], corpus);
      },
      [&](const PoolProgress& pool) {
        if (!progress) return;
        LmProgress p;
        p.done = pool.done;
        p.total = pool.total;
        p.elapsed_seconds = pool.elapsed_seconds;
        p.eta_seconds = pool.eta_seconds;
        const auto i = static_cast<size_t>(picked[static_cast<size_t>(pool.index)]);
        p.last = &result.runs[i];
        p.arm = where[i].arm;
        progress(p);
      });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace attnlab::train::lm
