#pragma once
// Training study for claim C8: does learning slow down or stop without the
// 1/√d_k scale? A small attention model is trained in C++ with analytic
// gradients (attention through attnlab::attention_forward/backward, float32) on
// synthetic tasks generated from a seed, over a sweep of d_k × scale policy ×
// optimiser × seed. Everything here returns plain data; the lab's experiment
// `train` (src/train/train_experiment.cpp) turns it into tables, figures and verdicts.
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
// How q·k is scaled before the softmax.
enum class ScaleMode {
  none,        // 1
  inv_sqrt_d,  // 1/√d_k
  inv_d,       // 1/d_k
  // q and k rows normalised to unit length, scale = exp(s) with s a learned
  // scalar per layer (ScalePolicy::fixed(exp(s)) in the engine); s starts at
  // log √d_k so that the logits' spread at init matches 1/√d_k's.
  qk_norm_temperature,
};
const char* to_string(ScaleMode mode);
ScaleMode parse_scale_mode(const std::string& text);  // "none" | "inv_sqrt_d" | "inv_d" | "qknorm"

// Initialisation of W_q and W_k (everything else is fixed, see docs/training.md).
enum class InitMode {
  unit,   // W ~ N(0, 1/D): components of q and k have variance ≈ 1 (the seeds' assumption)
  small,  // W ~ N(0, 1/(D·d_k)): variance ≈ 1/d_k, so q·k has variance ≈ 1/d_k at init
};
const char* to_string(InitMode mode);
InitMode parse_init_mode(const std::string& text);  // "unit" | "small"

struct ModelConfig {
  int64_t d_model = 32;   // D: embedding, residual and value width
  int64_t d_k = 64;       // width of q and k
  int64_t n_layers = 1;   // 1 or 2 attention layers
  bool layernorm = true;  // pre-LN in every block and before the classifier
  ScaleMode scale = ScaleMode::inv_sqrt_d;
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
  double temperature = 0;      // exp(s) of layer 1 under qk_norm_temperature, else the fixed scale
};

struct RunResult {
  RunConfig config;
  std::vector<CurvePoint> curve;
  int64_t steps_to_threshold = -1;  // first evaluated step with accuracy ≥ threshold; −1 = never
  double final_accuracy = 0, final_loss = 0;
  bool diverged = false;            // loss became NaN/inf: training stopped there
  double seconds = 0;
};

// Trains one model. Single-threaded (EngineConfig{threads = 1}) so that runs
// can be spread over cores. Throws attnlab::Error for invalid configurations.
RunResult train_run(const RunConfig& config);

// ---- the study ---------------------------------------------------------------------
struct StudyConfig {
  std::vector<TaskConfig> tasks{TaskConfig{}};
  std::vector<int64_t> d_ks{16, 64, 256, 1024};
  std::vector<ScaleMode> scales{ScaleMode::none, ScaleMode::inv_sqrt_d, ScaleMode::inv_d,
                                ScaleMode::qk_norm_temperature};
  std::vector<OptimizerKind> optimizers{OptimizerKind::adam, OptimizerKind::sgd};
  std::vector<InitMode> inits{InitMode::unit};
  int64_t seeds = 3;           // seeds first_seed .. first_seed + seeds − 1
  uint64_t first_seed = 1;
  double adam_lr = 0, sgd_lr = 0;  // peak learning rates; 0 = default_lr
  RunConfig base;              // everything else (model width, steps, batch, lr per optimiser via lr = 0);
                               // base.task, base.model.{d_k, scale, init}, base.optimizer and base.seed are overridden
  int threads = 2;             // runs trained in parallel
};

// Quick: the report's default (≤ 30 s on 2 cores). Full: the whole sweep of issue 5.
StudyConfig quick_study();
StudyConfig full_study();

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
StudyResult run_study(const StudyConfig& config,
                      const std::function<void(const StudyProgress&)>& progress = {});

// ---- summaries and the verdict -----------------------------------------------------
struct CellSummary {
  TaskKind task = TaskKind::associative_recall;
  InitMode init = InitMode::unit;
  OptimizerKind optimizer = OptimizerKind::adam;
  int64_t d_k = 0;
  ScaleMode scale = ScaleMode::inv_sqrt_d;
  int64_t runs = 0, reached = 0;      // runs, and runs that reached the threshold
  double median_steps = 0;            // median steps to threshold; runs that never reached it count as
                                      // steps + eval_every (censored), so the median is censored when
                                      // fewer than half the runs reached it
  bool median_censored = false;
  double mean_final_accuracy = 0, min_final_accuracy = 0;
  double mean_entropy_start = 0, mean_entropy_end = 0;
  double mean_jacobian_start = 0, mean_jacobian_end = 0;
  double mean_grad_qk_first = 0;      // ‖∂L/∂(W_q, W_k)‖ at the first evaluation after step 0
  int64_t diverged = 0;
};
std::vector<CellSummary> summarise(const StudyResult& study);

struct Verdict {
  std::string claim = "C8";
  TaskKind task = TaskKind::associative_recall;
  OptimizerKind optimizer = OptimizerKind::adam;
  InitMode init = InitMode::unit;
  std::string status;   // "confirmed" | "refuted" | "inconclusive"
  std::string summary;  // the numbers that decided it, in one paragraph
};
// One verdict per (task, init, optimiser): unscaled against 1/√d_k at the largest d_k of the sweep.
// Rules in docs/training.md ("Verdict rule").
std::vector<Verdict> verdicts(const StudyResult& study);

// CSV tables: runs (one row per run), curves (one row per evaluation point), cells (CellSummary).
std::string runs_csv(const StudyResult& study);
std::string curves_csv(const StudyResult& study);
std::string cells_csv(const std::vector<CellSummary>& cells);

}  // namespace attnlab::train
