#pragma once
// Training study for claim C8: does learning slow down or stop without the
// 1/√d_k scale? A small attention model is trained in C++ with analytic
// gradients (attention through attnlab::attention_forward/backward, float32) on
// synthetic tasks generated from a seed, over a sweep of d_k × scale policy ×
// optimiser × seed. Everything here returns plain data and the lab's verdicts
// (attnlab/lab.hpp) on C8; the lab's experiment `train` (src/lab/exp_train.cpp)
// turns the data into tables and figures.
//
// The model (docs/training.md):
//   tokens x[B, N] → h_i = E[x_i] + F[x_{i−1}]            (token-shift embedding, [B·N, D])
//   per layer:  a = LN(h) (optional);  q = a W_q, k = a W_k  [B·N, d_k];  v = a W_v [B·N, D]
//               o = softmax(q kᵀ · scale) v;   h ← h + o W_o
//   logits = LN_f(h_last) W_c + b_c   [B, C];   loss = mean softmax cross-entropy
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/scale.hpp"

namespace attnlab::train {

// ---- tasks -------------------------------------------------------------------
enum class TaskKind {
  // k₁ v₁ k₂ v₂ … k_P v_P q: keys and values from disjoint vocabularies, keys
  // distinct; the answer is the value that followed key q.
  associative_recall,
  // t₁ … t_N−1 with one marker somewhere and a query token last; the answer is
  // the token right after the marker.
  copy_after_marker,
};
const char* to_string(TaskKind task);
TaskKind parse_task(const std::string& text);  // "recall" | "copy"; throws attnlab::Error

struct TaskConfig {
  TaskKind kind = TaskKind::associative_recall;
  int64_t n_pairs = 4;      // recall: sequence length 2·n_pairs + 1
  int64_t n_keys = 16;      // recall: key vocabulary (≥ n_pairs)
  int64_t n_values = 16;    // recall: value vocabulary; also the number of answer classes
  int64_t seq_len = 16;     // copy: sequence length (≥ 3)
  int64_t n_content = 16;   // copy: content vocabulary; also the number of answer classes
};

// One batch: tokens [batch, seq] row-major, targets [batch] in [0, n_classes).
struct Batch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

int64_t vocab_size(const TaskConfig& task);   // token ids are in [0, vocab_size)
int64_t n_classes(const TaskConfig& task);
int64_t sequence_length(const TaskConfig& task);
void validate(const TaskConfig& task);        // throws attnlab::Error naming the bad field
// Deterministic in (task, batch, seed): the same arguments give the same batch.
Batch make_batch(const TaskConfig& task, int64_t batch, uint64_t seed);

// ---- model -------------------------------------------------------------------
// How q·k is scaled before the softmax: one of the library's scale policies
// (attnlab/scale.hpp; the engine applies it per row, so the log-n policies work
// too), or qk-norm: q and k rows normalised to unit length and scaled by exp(s),
// s a learned scalar per layer that starts at log √d_k so that the logits'
// spread at init matches 1/√d_k's. qk-norm changes the model (a normalisation
// and a parameter), not only the factor, which is why it is not a ScalePolicy.
// `additive` replaces the dot product by Bahdanau's score e_ij = aᵀ tanh(q_i + k_j)
// (a ∈ R^d_k learned, N(0, 1/d_k) at init; no scale): Vaswani et al.'s other candidate.
struct Scaling {
  ScalePolicy policy;    // ignored under qk_norm and additive
  bool qk_norm = false;
  bool additive = false;
  // Under additive: a ~ N(0, 1) instead of N(0, 1/d_k). The usual init builds a 1/√d_k into the score
  // aᵀtanh(q + k) (its spread stays of order 1); with a ~ N(0, 1) the spread grows as √d_k, like an
  // unscaled dot product's (C20's arm without the hidden scale).
  bool additive_unit_a = false;

  Scaling(ScalePolicy p = {}) : policy(p) {}  // NOLINT: a policy is a scaling
  static Scaling qk_norm_temperature();
  static Scaling additive_score(bool unit_a = false);
  std::string name() const;                        // policy.name(), "qknorm", "additive" or "additive_unit"
  // "qknorm", "additive", "additive_unit" or what ScalePolicy::parse reads; throws attnlab::Error
  static Scaling parse(const std::string& text);
  friend bool operator==(const Scaling& a, const Scaling& b);
};

// Initialisation of W_q and W_k (everything else is fixed, see docs/training.md).
enum class InitMode {
  unit,   // W ~ N(0, 1/D): components of q and k have variance ≈ 1 (the seeds' assumption)
  small,  // W ~ N(0, 1/(D·d_k)): variance ≈ 1/d_k, so q·k has variance ≈ 1/d_k at init
  // W ~ N(0, 1/(D·√d_k)): W_q, W_k d_k^(−1/4) smaller than unit's, so unscaled q·k has the spread
  // of unit's q·k/√d_k. Drawn from the same normals as unit, so that with the same seed the
  // unscaled logits at init equal unit's scaled ones (Su Jianlin, kexue.fm/archives/8620).
  quarter,
};
const char* to_string(InitMode mode);
InitMode parse_init_mode(const std::string& text);  // "unit" | "small" | "quarter"

struct ModelConfig {
  int64_t d_model = 32;   // D: embedding, residual and value width
  int64_t d_k = 64;       // width of q and k
  int64_t n_layers = 1;   // 1 or 2 attention layers
  bool layernorm = true;  // pre-LN in every block and before the classifier
  Scaling scale = ScalePolicy::inv_sqrt_d();
  InitMode init = InitMode::unit;
};

// ---- optimisers -----------------------------------------------------------------
enum class OptimizerKind { adam, sgd };  // Adam(β₁ .9, β₂ .999, ε 1e−8); SGD with momentum .9
const char* to_string(OptimizerKind kind);
OptimizerKind parse_optimizer(const std::string& text);  // "adam" | "sgd"

// Learning rate at step t (0-based) of T: linear warm-up over `warmup` steps,
// then cosine decay to 10 % of the peak. Shared by every run of a sweep cell.
double learning_rate(double peak, int64_t step, int64_t total_steps, int64_t warmup);

// ---- one run -------------------------------------------------------------------------
struct RunConfig {
  TaskConfig task;
  ModelConfig model;
  OptimizerKind optimizer = OptimizerKind::adam;
  double lr = 0;               // peak learning rate; 0 = the optimiser's default (default_lr)
  // Multiplies the learning rate of W_q and W_k only (every layer's): 1 = one rate for every parameter.
  // C19's matched arm sets it so that a smaller init of W_q, W_k moves the logits as the scale does.
  double qk_lr_scale = 1;
  int64_t steps = 600;
  int64_t warmup = 30;
  int64_t batch = 32;
  int64_t eval_every = 25;     // evaluate on a held-out set every this many steps (and at the end)
  int64_t eval_examples = 256;
  double threshold = 0.9;      // steps-to-threshold uses the held-out accuracy
  uint64_t seed = 1;           // init and training data; the held-out set depends only on the task
};
double default_lr(OptimizerKind kind);  // Adam 3e−3, SGD 0.03 (see docs/training.md)

struct CurvePoint {
  int64_t step = 0;            // optimiser steps taken before this evaluation
  double train_loss = 0;       // mean training loss over the steps since the last point (NaN at step 0)
  double eval_loss = 0, eval_accuracy = 0;
  double entropy = 0;          // mean attention entropy over all rows of all layers (nats)
  double jacobian_fro = 0;     // mean over rows of ‖diag(p) − p pᵀ‖_F
  double max_prob = 0;         // mean largest attention probability
  double grad_qk = 0;          // ‖(∂L/∂W_q, ∂L/∂W_k)‖ of the last training step (all layers); NaN at step 0
  double temperature = 0;      // exp(s) of layer 1 under qk-norm, else the policy's scale for a full row
  double max_logit = 0;        // largest |S| = |scale·q·k| of the last attention layer on the held-out set
};

struct RunResult {
  RunConfig config;
  std::vector<CurvePoint> curve;
  int64_t steps_to_threshold = -1;  // first evaluated step with accuracy ≥ threshold; −1 = never
  double final_accuracy = 0, final_loss = 0;
  bool diverged = false;            // loss became NaN/inf: training stopped there
  double seconds = 0;

  // The first evaluation after training started (∂L/∂W is not defined at step 0);
  // nullptr if the run stopped before it.
  const CurvePoint* first_trained_point() const { return curve.size() > 1 ? &curve[1] : nullptr; }
};

// Trains one model on the calling thread (the engine with ComputeConfig{threads = 1}),
// so that runs can be spread over cores. Throws attnlab::Error for invalid configurations.
RunResult train_run(const RunConfig& config);

// ---- coordinate check (μP, Tensor Programs V) -------------------------------------------
// The attention logits S = scale·q·k of the model's last attention layer on a fixed probe
// batch (the held-out set), at initialisation and after each of the first `steps` optimiser
// steps at the constant learning rate config.lr (default_lr if 0; no warm-up, no decay):
// how their size, and the size of their change, depend on width (μP's "coordinate check").
struct LogitTrace {
  std::vector<double> rms;     // [steps + 1] root mean square of S over the probe's rows and keys
  std::vector<double> change;  // [steps + 1] RMS of S_t − S_0 (change[0] = 0)
  bool diverged = false;       // the loss became non-finite: the trace stops there
};
LogitTrace trace_logits(const RunConfig& config, int64_t steps);  // throws attnlab::Error for a bad config

// ---- the study ---------------------------------------------------------------------

// A peak learning rate chosen for one cell of a sweep (task, init, optimiser, d_k, scaling).
struct TunedRate {
  TaskKind task = TaskKind::associative_recall;
  InitMode init = InitMode::unit;
  OptimizerKind optimizer = OptimizerKind::adam;
  int64_t d_k = 0;
  std::string scale;  // Scaling::name()
  double lr = 0;
};

struct StudyConfig {
  std::vector<TaskConfig> tasks{TaskConfig{}};
  std::vector<int64_t> d_ks{16, 64, 256, 1024};
  std::vector<Scaling> scales{ScalePolicy::none(), ScalePolicy::inv_sqrt_d(), ScalePolicy::inv_d(),
                              Scaling::qk_norm_temperature()};
  std::vector<OptimizerKind> optimizers{OptimizerKind::adam, OptimizerKind::sgd};
  std::vector<InitMode> inits{InitMode::unit};
  int64_t seeds = 3;           // seeds first_seed .. first_seed + seeds − 1
  uint64_t first_seed = 1;
  // A run's peak learning rate: its cell's entry in `tuned` if there is one, else adam_lr /
  // sgd_lr if > 0, else default_lr. A non-empty adam_lrs / sgd_lrs makes the rate a sweep
  // axis instead (every cell at every rate of the list: the tuning sweep of tune_rates()).
  double adam_lr = 0, sgd_lr = 0;
  std::vector<double> adam_lrs, sgd_lrs;
  std::vector<TunedRate> tuned;
  RunConfig base;              // everything else (model width, steps, batch, lr per optimiser via lr = 0);
                               // base.task, base.model.{d_k, scale, init}, base.optimizer and base.seed are overridden
  int threads = 2;             // runs trained in parallel (OpenMP threads); the results do not depend on it
};

// Quick: the report's default (about 10 s on 2 cores), at the rates the full sweep chose
// (cached_rates()). Full: d_k 16…1024, both inits, 5 seeds, each cell at the best rate of
// a tuning sweep on 3 other seeds (docs/training.md).
StudyConfig quick_study();
StudyConfig full_study();

// The learning-rate grids of the full sweep's tuning, per optimiser.
std::vector<double> tuning_grid(OptimizerKind kind);
// The rates the full sweep chose (docs/training.md, "Learning rates"), for the quick study.
const std::vector<TunedRate>& cached_rates();

struct StudyProgress {
  int64_t done = 0, total = 0;
  double elapsed_seconds = 0, eta_seconds = 0;  // ETA weighted by each run's estimated cost
  const RunResult* last = nullptr;
};

struct StudyResult {
  StudyConfig config;
  std::vector<RunResult> runs;  // in sweep order: task, init, optimiser, d_k, scale, seed
  double seconds = 0;
};

// The runs of the sweep, in sweep order, not yet trained.
std::vector<RunConfig> expand(const StudyConfig& config);
// Trains the runs on config.threads OpenMP threads, one run per thread at a time.
// Each run is a function of its configuration alone, so the result is the same for
// any thread count and machine. The dense products call OpenBLAS from each of those
// threads; OpenBLAS's own thread count is process-wide and left to the program (the
// attnlab command line sets it to 1 at start-up, tools/attnlab/main.cpp): it changes
// the speed only, since OpenBLAS splits a product over rows and columns, never over
// the summed dimension. `progress` is called after each run, from the thread that
// trained it, one call at a time.
// `only` (sweep indices; nullptr: all): train only those runs, the others left empty (a
// share of the sweep for one of several processes, src/lab/study_across.cpp).
StudyResult run_study(const StudyConfig& config,
                      const std::function<void(const StudyProgress&)>& progress = {},
                      const std::vector<int64_t>* only = nullptr);
// A run's expected cost relative to the others' (for the ETA and for dividing a sweep).
double run_cost(const RunConfig& run);

// ---- summaries and the verdict -----------------------------------------------------
struct CellSummary {
  TaskKind task = TaskKind::associative_recall;
  InitMode init = InitMode::unit;
  OptimizerKind optimizer = OptimizerKind::adam;
  int64_t d_k = 0;
  Scaling scale;
  double lr = 0;                      // the peak learning rate of its runs
  int64_t runs = 0, reached = 0;      // runs, and runs that reached the threshold
  double median_steps = 0;            // median steps to threshold; runs that never reached it count as
                                      // steps + eval_every (censored), so the median is censored when
                                      // fewer than half the runs reached it
  bool median_censored = false;
  double mean_final_accuracy = 0, min_final_accuracy = 0;
  double mean_entropy_start = 0, mean_entropy_end = 0;
  double mean_jacobian_start = 0, mean_jacobian_end = 0;
  double mean_max_prob_start = 0, mean_max_prob_end = 0;
  double mean_grad_qk_first = 0;      // ‖∂L/∂(W_q, W_k)‖ at the first evaluation after step 0
  int64_t diverged = 0;
};
std::vector<CellSummary> summarise(const StudyResult& study);

// The tuning sweep for `config`: the same cells, each at every rate of tuning_grid(), on
// `seeds` seeds from `first_seed` (other seeds than the evaluation's, so that the rate is
// not chosen on the runs that judge it).
StudyConfig tuning_study(const StudyConfig& config, int64_t seeds, uint64_t first_seed);

// Each cell's best rate among the rates a tuning study tried: one that learns the task and
// keeps it (mean final accuracy >= threshold) before one that does not, then the most runs
// reaching the threshold, the fewest median steps to it (censored), the higher mean final
// accuracy, the smaller rate. (Fewest steps alone picks rates that reach the threshold
// fast and then collapse: SGD with 1/sqrt(d_k) at 0.1.)
std::vector<TunedRate> best_rates(const std::vector<CellSummary>& tuning_cells, double threshold);

// Why a cell failed or trained slowly, measured beside the outcome (docs/training.md, "Mechanism").
enum class Diagnosis {
  learns,                   // reached the threshold in most seeds, within 1.5x the 1/sqrt(d_k) cell's median steps
  saturated_at_init,        // the attention was one-hot before training (mean max p at init >= 0.9)
  saturates_in_training,    // started spread out but ended one-hot (mean max p at the end >= 0.99)
  small_gradient,           // ||dL/dW_q, W_k|| in the first steps < 0.1x the 1/sqrt(d_k) cell's
  other,                    // slow or failing for none of the reasons above
};
const char* to_string(Diagnosis d);
// `baseline` is the 1/sqrt(d_k) cell of the same task, init, optimiser and d_k.
Diagnosis diagnose(const CellSummary& cell, const CellSummary& baseline);

// C8's verdicts, one per (task, init, optimiser): unscaled against 1/√d_k at the
// largest d_k of the sweep. Rules in docs/training.md ("Verdict rule"). Those of
// the sweep's first task and init are the headline; the others are supplementary.
// `figure` is left empty: the figures are the experiment's.
std::vector<lab::Verdict> verdicts(const StudyResult& study);
// C8's rule on one comparison, unscaled (`none`) against 1/√d_k (`sqrt`), without its words.
lab::Outcome c8_outcome(const CellSummary& none, const CellSummary& sqrt);

}  // namespace attnlab::train
