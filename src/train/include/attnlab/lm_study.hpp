#pragma once
// The language-model study (docs/lm.md): the GPTs of attnlab/lm.hpp trained on real text with
// each way of scaling q·k (the arms), at several head sizes d_k, under two initialisations,
// with AdamW and (on fewer arms) SGD; each arm at its own best peak learning rate from a
// sweep on tuning seeds, judged on other seeds. Plain data: the runs, the cells' summaries
// and C8's verdicts. The lab's experiment `lm` (src/lab/exp_lm.cpp) writes the tables and
// figures, and divides the runs among processes (src/lab/study_across.cpp).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/lm.hpp"

namespace attnlab::train::lm {

// One way of scaling the scores, written independently of d_k; at(d_k) is the model's Scaling.
struct Arm {
  enum class Kind { inv_sqrt_d, none, inv_d, alpha_sqrt, qk_norm };
  Kind kind = Kind::inv_sqrt_d;
  double alpha = 1;  // alpha_sqrt: the scale α/√d_k (Su Jianlin, kexue.fm/archives/9812, argues α > 1)

  static Arm inv_sqrt_d() { return {}; }
  static Arm none() { return {Kind::none, 1}; }
  static Arm inv_d() { return {Kind::inv_d, 1}; }
  static Arm alpha_sqrt(double alpha) { return {Kind::alpha_sqrt, alpha}; }
  static Arm qk_norm() { return {Kind::qk_norm, 1}; }
  // "inv_sqrt_d", "none", "inv_d", "alpha2" (α/√d_k with α = 2), "qknorm"; parse reads them back.
  std::string name() const;
  std::string label() const;  // as a reader sees it: "1/√d_k", "no scale", "1/d_k", "2/√d_k", "qk-norm"
  static Arm parse(const std::string& text);  // throws attnlab::Error naming the text
  Scaling at(int64_t d_k) const;              // α/√d_k is ScalePolicy::fixed(α/√d_k)
  friend bool operator==(const Arm&, const Arm&) = default;
};

// An optimiser on one initialisation with its arms: AdamW on every init and arm, SGD beside
// it on fewer (the study's groups).
struct LmGroup {
  LmInit init = LmInit::gpt2;
  LmOptimizer optimizer = LmOptimizer::adamw;
  std::vector<Arm> arms;
};

// A peak learning rate chosen for one cell (group, d_k, arm).
struct LmTunedRate {
  LmInit init = LmInit::gpt2;
  LmOptimizer optimizer = LmOptimizer::adamw;
  int64_t d_k = 0;
  std::string arm;  // Arm::name()
  double lr = 0;
};

struct LmStudyConfig {
  std::vector<LmGroup> groups;
  std::vector<int64_t> d_ks{16, 64, 256};
  int64_t seeds = 3;        // seeds first_seed … first_seed + seeds − 1
  uint64_t first_seed = 1;
  // A run's peak rate: the sweep axis of its optimiser if non-empty (every cell at every rate:
  // the tuning study), else its cell's entry in `tuned`, else default_lm_lr.
  std::vector<double> adamw_lrs, sgd_lrs;
  std::vector<LmTunedRate> tuned;
  LmRunConfig base;         // model size, budget, evaluation; model.{d_k, scale, init}, optimizer, lr, seed set per run
  int threads = 2;          // runs trained at once (OpenMP threads); the results do not depend on it
};

double default_lm_lr(LmOptimizer optimizer);                  // AdamW 3e-3, SGD 0.1
std::vector<double> lm_tuning_grid(LmOptimizer optimizer);    // the rates the tuning sweep tries

// The presets (docs/lm.md): reduced is what the report runs (d_k 64 only, none against
// 1/√d_k, at the rates the tuning chose, lm_cached_rates); full is the whole study, whose
// rates the experiment tunes first on other seeds.
LmStudyConfig reduced_lm_study();
LmStudyConfig full_lm_study();
const std::vector<LmTunedRate>& lm_cached_rates();

// The tuning study of `config`: the same cells at every rate of lm_tuning_grid, on `seeds`
// seeds from `first_seed` (other seeds than the evaluation's).
LmStudyConfig lm_tuning_study(const LmStudyConfig& config, int64_t seeds, uint64_t first_seed);

// The runs in sweep order (group, d_k, arm, rate, seed), not yet trained. Throws attnlab::Error
// for an empty axis, a bad seed count or rate.
std::vector<LmRunConfig> expand(const LmStudyConfig& config);
// Which arm and group a run of expand() belongs to: the same order.
struct RunPlace {
  size_t group = 0;
  Arm arm;
};
std::vector<RunPlace> places(const LmStudyConfig& config);

// A run's expected cost relative to the others' (its multiply-adds per step times its steps),
// for the ETA and for dividing a study among processes.
double run_cost(const LmRunConfig& run);

struct LmProgress {
  int64_t done = 0, total = 0;
  double elapsed_seconds = 0, eta_seconds = 0;
  const LmRunResult* last = nullptr;
  Arm arm;  // the last run's arm (its scale alone cannot tell 4/√d_k at d_k = 16 from no scale)
};
using LmTrainer = std::function<LmRunResult(const LmRunConfig&, const Corpus&)>;

struct LmStudyResult {
  LmStudyConfig config;
  std::vector<LmRunResult> runs;  // in sweep order
  double seconds = 0;
};
// Trains the runs (all, or the sweep indices in `only`, the others left empty) on
// config.threads threads, one run per thread at a time: each run is a function of its
// configuration and the corpus, so the result is the same for any thread count. `train`
// is train_lm_run but for tests.
LmStudyResult run_lm_study(const LmStudyConfig& config, const Corpus& corpus, const LmTrainer& train,
                           const std::function<void(const LmProgress&)>& progress = {},
                           const std::vector<int64_t>* only = nullptr);

// ---- what the runs show ----------------------------------------------------------------

// A model that ignores the context can at best predict the next character from the current
// one: the bigram model of the training split (add-one smoothing), scored on the validation
// split, in bits per character. A run "learns" when it ends below it without diverging.
double bigram_bpc(const Corpus& corpus);

// A run's steps to a validation loss: the first evaluation at or below `bpc`; −1 if none.
int64_t steps_to(const LmRunResult& run, double bpc);

// One cell (group, d_k, arm, rate) pooled over its seeds. Final losses of diverged runs count
// as +∞ (worse than any), so a median over a majority of diverged runs is +∞.
struct LmCell {
  size_t group = 0;
  LmInit init = LmInit::gpt2;
  LmOptimizer optimizer = LmOptimizer::adamw;
  int64_t d_k = 0;
  Arm arm;
  double lr = 0;
  int64_t runs = 0, learnt = 0, diverged = 0, spiked = 0;  // spiked: runs with at least one loss spike
  double median_final = 0, min_final = 0, max_final = 0;   // final validation bpc over seeds
  // Steps to `threshold` (the 1/√d_k cell's median final bpc + lm_threshold_margin_bpc, at the
  // same group and d_k): median and range over seeds, runs that never reach it counted as the
  // budget + one evaluation; NaN without a 1/√d_k cell.
  double threshold = lab::kNaN, median_steps = lab::kNaN, min_steps = lab::kNaN, max_steps = lab::kNaN;
  bool steps_censored = false;  // half the runs or more never reached the threshold
  // Means over seeds and layers: attention entropy (nats) and largest weight at initialisation
  // and at the end; total ‖∂L/∂W_q‖, ‖∂L/∂W_k‖ at the first evaluation after step 0.
  double entropy_init = lab::kNaN, entropy_end = lab::kNaN, max_prob_init = lab::kNaN, max_prob_end = lab::kNaN;
  double grad_q_first = lab::kNaN, grad_k_first = lab::kNaN;
};
// The cells in sweep order; `bigram` is bigram_bpc of the study's corpus.
std::vector<LmCell> summarise(const LmStudyResult& study, double bigram);

// Each cell's best rate in a tuning study: the lowest median final validation bpc (diverged
// runs +∞), then the smaller rate.
std::vector<LmTunedRate> best_rates(const std::vector<LmCell>& tuning_cells);

// ---- C8's rule (src/lab/claims.json, thresholds lm_*; docs/lm.md) -------------------------
enum class Comparison {
  baseline_fails,  // too few 1/√d_k runs learn: nothing can be said
  too_few_seeds,
  slower,          // fewer runs learn, or the threshold takes ≥ lm_slower_steps_ratio × as long, or the
                   // final loss is worse by > lm_final_margin_bpc with the seeds' ranges apart
  as_fast,         // as many runs learn, steps ≤ lm_as_fast_steps_ratio ×, final loss within the margin
  within_margin,   // neither
};
const char* to_string(Comparison c);
// The arm's cell against the 1/√d_k cell of the same group and d_k.
Comparison compare(const LmCell& arm, const LmCell& baseline);

// C8's verdicts: one per group (in the groups' order), none against 1/√d_k at the largest d_k of the study, with the
// outcome at every d_k as its ranges. `bigram` as for summarise. `figure` is left empty.
std::vector<lab::Verdict> verdicts(const LmStudyResult& study, double bigram);

}  // namespace attnlab::train::lm
