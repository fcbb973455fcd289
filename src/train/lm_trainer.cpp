// One language-model run (attnlab/lm.hpp): the float GPT trained with AdamW or SGD on random
// windows of the corpus, evaluated on a fixed set of validation windows.
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/lm.hpp"
#include "lab/interrupt.hpp"
#include "train/gpt.hpp"
#include "train/optimizer.hpp"
#include "train/run_setup.hpp"

namespace attnlab::train::lm {

const char* to_string(LmOptimizer o) { return o == LmOptimizer::adamw ? "adamw" : "sgd"; }

LmOptimizer parse_lm_optimizer(const std::string& text) {
  for (LmOptimizer o : {LmOptimizer::adamw, LmOptimizer::sgd})
    if (text == to_string(o)) return o;
  throw Error("optimizer: unknown optimiser '" + text + "' (expected adamw or sgd)");
}

void validate(const LmRunConfig& c) {
  validate(c.model);
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("lm run: " + what);
  };
  need(c.steps >= 1 && c.steps <= 10'000'000, "steps must be in [1, 1e7], got " + std::to_string(c.steps));
  need(c.warmup >= 0 && c.warmup <= c.steps, "warmup must be in [0, steps], got " + std::to_string(c.warmup));
  need(c.batch >= 1 && c.batch <= 65536, "batch must be in [1, 65536], got " + std::to_string(c.batch));
  need(c.eval_every >= 1, "eval_every must be >= 1, got " + std::to_string(c.eval_every));
  need(c.eval_windows >= 1 && c.eval_windows <= 65536,
       "eval_windows must be in [1, 65536], got " + std::to_string(c.eval_windows));
  need(std::isfinite(c.lr) && c.lr > 0, "lr must be finite and > 0");
  need(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay must be finite and >= 0");
  need(std::isfinite(c.grad_clip) && c.grad_clip >= 0, "grad_clip must be finite and >= 0 (0 = none)");
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSpikeBpc = 0.5;  // a validation loss this far above the best so far is a spike
constexpr double kBeta2 = 0.95;    // GPT-2/nanoGPT's AdamW

// `count` windows of T + 1 tokens starting at `starts`.
void fill_windows(const std::vector<uint8_t>& text, const std::vector<int64_t>& starts, int64_t T, LmBatch& batch) {
  batch.batch = static_cast<int64_t>(starts.size());
  batch.seq = T;
  batch.tokens.resize(starts.size() * static_cast<size_t>(T));
  batch.targets.resize(batch.tokens.size());
  for (size_t b = 0; b < starts.size(); ++b)
    for (int64_t t = 0; t < T; ++t) {
      const auto i = static_cast<size_t>(starts[b] + t);
      batch.tokens[b * static_cast<size_t>(T) + static_cast<size_t>(t)] = text[i];
      batch.targets[b * static_cast<size_t>(T) + static_cast<size_t>(t)] = text[i + 1];
    }
}

// The validation windows: evenly spaced over the validation text, the same for every run.
LmBatch validation_batch(const Corpus& corpus, int64_t windows, int64_t T) {
  const int64_t last = static_cast<int64_t>(corpus.validation.size()) - T - 1;  // last valid start
  std::vector<int64_t> starts(static_cast<size_t>(windows));
  for (int64_t i = 0; i < windows; ++i) starts[static_cast<size_t>(i)] = windows == 1 ? 0 : last * i / (windows - 1);
  LmBatch b;
  fill_windows(corpus.validation, starts, T, b);
  return b;
}

// Step `step`'s training windows: uniform starts from the run's seed and the step alone.
void training_batch(const Corpus& corpus, const LmRunConfig& c, int64_t step, std::vector<int64_t>& starts,
                    LmBatch& batch) {
  std::mt19937_64 rng(mix(mix(c.seed) ^ mix(static_cast<uint64_t>(step) + 1)));
  std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(corpus.train.size()) - c.model.context - 1);
  starts.resize(static_cast<size_t>(c.batch));
  for (auto& s : starts) s = pick(rng);
  fill_windows(corpus.train, starts, c.model.context, batch);
}

double squared_norm(const Param<float>& p) {
  double s = 0;
  for (float g : p.grad) s += static_cast<double>(g) * g;
  return s;
}

}  // namespace

LmRunResult train_lm_run(const LmRunConfig& config, const Corpus& corpus) {
  validate(config);
  const int64_t T = config.model.context;
  if (config.model.vocab != corpus.vocab())
    throw Error("lm run: model.vocab (" + std::to_string(config.model.vocab) + ") must be the corpus's alphabet size (" +
                std::to_string(corpus.vocab()) + ")");
  for (const auto* part : {&corpus.train, &corpus.validation})
    if (static_cast<int64_t>(part->size()) <= T)
      throw Error("lm run: the corpus '" + corpus.name + "' has a part of " + std::to_string(part->size()) +
                  " characters, too short for windows of context + 1 = " + std::to_string(T + 1));
  const auto start = std::chrono::steady_clock::now();
  LmRunResult r;
  r.config = config;
  Gpt<float> model(config.model);
  model.init(mix(config.seed));
  OptimizerSettings settings;
  settings.beta2 = kBeta2;
  settings.weight_decay = config.weight_decay;
  const auto params = model.params();
  Optimizer opt(config.optimizer == LmOptimizer::adamw ? OptimizerKind::adam : OptimizerKind::sgd, params, settings,
                model.decayed());
  const LmBatch eval = validation_batch(corpus, config.eval_windows, T);
  LmBatch batch;
  std::vector<int64_t> starts;

  double loss_sum = 0, best = std::numeric_limits<double>::infinity();
  int64_t loss_count = 0;
  double gq = kNaN, gk = kNaN;
  std::vector<AttentionSummary> summary;
  // Evaluates and records the point; false if the validation loss is not finite.
  auto record = [&](int64_t step) {
    LmCurvePoint p;
    p.step = step;
    p.train_bpc = loss_count > 0 ? loss_sum / static_cast<double>(loss_count) / std::numbers::ln2 : kNaN;
    summary.clear();  // a diverged model returns before filling it: no stale values then
    p.val_bpc = model.forward(eval, &summary) / std::numbers::ln2;
    for (const auto& s : summary) {
      p.entropy.push_back(s.entropy);
      p.max_prob.push_back(s.max_prob);
    }
    p.grad_norm_q = gq;
    p.grad_norm_k = gk;
    r.curve.push_back(p);
    loss_sum = 0;
    loss_count = 0;
    if (!std::isfinite(p.val_bpc)) return false;
    if (p.val_bpc > best + kSpikeBpc) ++r.loss_spikes;
    best = std::min(best, p.val_bpc);
    return true;
  };

  bool finite = record(0);
  for (int64_t step = 0; finite && step < config.steps; ++step) {
    lab::util::throw_if_stop_requested();  // Ctrl-C (lab/interrupt.hpp)
    training_batch(corpus, config, step, starts, batch);
    model.zero_grad();
    const double loss = model.forward(batch);
    if (!std::isfinite(loss)) {
      finite = false;
      break;
    }
    model.backward();
    double gq2 = 0, gk2 = 0, all2 = 0;
    for (auto& b : model.blocks) {
      gq2 += squared_norm(b.attn.w_q);
      gk2 += squared_norm(b.attn.w_k);
    }
    for (const auto* p : params) all2 += squared_norm(*p);
    gq = std::sqrt(gq2);  // before clipping: the gradient the loss gives
    gk = std::sqrt(gk2);
    const double norm = std::sqrt(all2);
    if (!std::isfinite(norm)) {
      finite = false;
      break;
    }
    if (config.grad_clip > 0 && norm > config.grad_clip) {  // PyTorch's clip_grad_norm_
      const auto c = static_cast<float>(config.grad_clip / (norm + 1e-6));
      for (auto* p : params)
        for (float& g : p->grad) g *= c;
    }
    loss_sum += loss;
    ++loss_count;
    opt.step(learning_rate(config.lr, step, config.steps, config.warmup));
    const int64_t done = step + 1;
    if (done % config.eval_every == 0 || done == config.steps) finite = record(done);
  }
  r.diverged = !finite;
  r.final_val_bpc = r.diverged ? kNaN : r.curve.back().val_bpc;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace attnlab::train::lm
