// The training studies across processes (study_across.hpp): divide by cost, train, gather on
// rank 0, and hand every run back to every process (the tuning sweep's rates are needed by all).
#include "lab/study_across.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/format.h>

#include "attnlab/run_distributor.hpp"

namespace attnlab::lab {
namespace {

// Doubles as bytes and back, by their bits, so that a gathered study equals the one-process
// study exactly.
std::string to_bytes(const std::vector<double>& v) {
  std::string bytes(v.size() * sizeof(double), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}
std::vector<double> from_bytes(const std::string& bytes, const char* what) {
  if (bytes.size() % sizeof(double) != 0) throw Error(fmt::format("{}: a gathered run of {} bytes is malformed", what, bytes.size()));
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// ---- the toy study's runs ------------------------------------------------------------------

using train::RunResult;

constexpr size_t kPointFields = 11;
std::string run_bytes(const RunResult& r) {
  std::vector<double> v{static_cast<double>(r.steps_to_threshold), r.final_accuracy, r.final_loss,
                        r.diverged ? 1.0 : 0.0, r.seconds};
  for (const auto& p : r.curve)
    v.insert(v.end(), {static_cast<double>(p.step), p.train_loss, p.eval_loss, p.eval_accuracy, p.entropy,
                       p.jacobian_fro, p.max_prob, p.grad_qk, p.temperature, p.max_logit, 0.0});
  return to_bytes(v);
}

RunResult run_from_bytes(const std::string& bytes, const train::RunConfig& config) {
  const std::vector<double> v = from_bytes(bytes, "train");
  if (v.size() < 5 || (v.size() - 5) % kPointFields != 0)
    throw Error(fmt::format("train: a gathered run of {} bytes is malformed", bytes.size()));
  RunResult r;
  r.config = config;
  r.steps_to_threshold = static_cast<int64_t>(v[0]);
  r.final_accuracy = v[1];
  r.final_loss = v[2];
  r.diverged = v[3] != 0;
  r.seconds = v[4];
  for (size_t at = 5; at < v.size(); at += kPointFields) {
    train::CurvePoint p;
    p.step = static_cast<int64_t>(v[at]);
    p.train_loss = v[at + 1];
    p.eval_loss = v[at + 2];
    p.eval_accuracy = v[at + 3];
    p.entropy = v[at + 4];
    p.jacobian_fro = v[at + 5];
    p.max_prob = v[at + 6];
    p.grad_qk = v[at + 7];
    p.temperature = v[at + 8];
    p.max_logit = v[at + 9];
    r.curve.push_back(p);
  }
  return r;
}

// ---- the language model's runs -------------------------------------------------------------

using train::lm::LmRunResult;

// final, diverged, spikes, seconds, layers; then per point: step, train, val, ‖∂W_q‖, ‖∂W_k‖,
// and the layers' entropies and largest weights.
std::string lm_run_bytes(const LmRunResult& r) {
  const size_t layers = r.curve.empty() ? 0 : r.curve.front().entropy.size();
  std::vector<double> v{r.final_val_bpc, r.diverged ? 1.0 : 0.0, static_cast<double>(r.loss_spikes), r.seconds,
                        static_cast<double>(layers)};
  for (const auto& p : r.curve) {
    if (p.entropy.size() != layers || p.max_prob.size() != layers)
      throw Error("lm: a run's curve points differ in their number of layers");
    v.insert(v.end(), {static_cast<double>(p.step), p.train_bpc, p.val_bpc, p.grad_norm_q, p.grad_norm_k});
    v.insert(v.end(), p.entropy.begin(), p.entropy.end());
    v.insert(v.end(), p.max_prob.begin(), p.max_prob.end());
  }
  return to_bytes(v);
}

LmRunResult lm_run_from_bytes(const std::string& bytes, const train::lm::LmRunConfig& config) {
  const std::vector<double> v = from_bytes(bytes, "lm");
  const size_t layers = v.size() >= 5 ? static_cast<size_t>(v[4]) : 0, point = 5 + 2 * layers;
  if (v.size() < 5 || (v.size() - 5) % point != 0)
    throw Error(fmt::format("lm: a gathered run of {} bytes is malformed", bytes.size()));
  LmRunResult r;
  r.config = config;
  r.final_val_bpc = v[0];
  r.diverged = v[1] != 0;
  r.loss_spikes = static_cast<int64_t>(v[2]);
  r.seconds = v[3];
  for (size_t at = 5; at < v.size(); at += point) {
    train::lm::LmCurvePoint p;
    p.step = static_cast<int64_t>(v[at]);
    p.train_bpc = v[at + 1];
    p.val_bpc = v[at + 2];
    p.grad_norm_q = v[at + 3];
    p.grad_norm_k = v[at + 4];
    const auto first = v.begin() + static_cast<std::ptrdiff_t>(at + 5);
    p.entropy.assign(first, first + static_cast<std::ptrdiff_t>(layers));
    p.max_prob.assign(first + static_cast<std::ptrdiff_t>(layers), first + static_cast<std::ptrdiff_t>(2 * layers));
    r.curve.push_back(std::move(p));
  }
  return r;
}

}  // namespace

std::vector<std::string> across_processes(const std::vector<double>& costs, int threads, const RunContext& ctx,
                                          const RunShare& run_share) {
  const RunDistributor& d = *ctx.distributor;
  const std::vector<int> owner = assign_runs(costs, d.size());
  std::vector<int64_t> mine;
  for (size_t i = 0; i < costs.size(); ++i)
    if (owner[i] == d.rank()) mine.push_back(static_cast<int64_t>(i));
  ctx.report(fmt::format("{} of the {} runs on this rank", mine.size(), costs.size()));
  ShareOutcome outcome;
  try {
    // This process's share of the threads (the machine's threads are shared by the processes on it).
    outcome.payload = pack(run_share(mine, std::max(1, threads / d.size())));
  } catch (const Interrupted&) {
    outcome.interrupted = true;
  } catch (const std::exception& e) {
    outcome.failure = fmt::format("rank {}, training runs: {}", d.rank(), e.what());
  }
  const std::vector<std::string> shares = gather_shares(d, outcome);  // throws on every rank if one failed
  // Rank 0 puts the runs in index order and sends them to everyone.
  std::string whole;
  if (d.rank() == 0) {
    std::vector<std::string> by_index(costs.size());
    for (int r = 0; r < d.size(); ++r) {
      const std::vector<std::string> parts = unpack(shares[static_cast<size_t>(r)]);
      size_t next = 0;
      for (size_t i = 0; i < costs.size(); ++i)
        if (owner[i] == r) by_index[i] = parts.at(next++);
    }
    whole = pack(by_index);
  }
  std::vector<std::string> all = unpack(d.broadcast(whole));
  if (all.size() != costs.size()) throw Error(fmt::format("gathered {} runs of {}", all.size(), costs.size()));
  return all;
}

train::StudyResult study_across(const train::StudyConfig& config, const RunContext& ctx,
                                const std::function<void(const train::StudyProgress&)>& progress) {
  if (ctx.distributor == nullptr || ctx.distributor->size() == 1) return train::run_study(config, progress);
  const std::vector<train::RunConfig> runs = train::expand(config);
  std::vector<double> costs;
  for (const auto& r : runs) costs.push_back(train::run_cost(r));
  const auto all = across_processes(costs, config.threads, ctx, [&](const std::vector<int64_t>& mine, int threads) {
    train::StudyConfig share = config;
    share.threads = threads;
    const train::StudyResult study = train::run_study(share, progress, &mine);
    std::vector<std::string> parts;
    for (int64_t i : mine) parts.push_back(run_bytes(study.runs[static_cast<size_t>(i)]));
    return parts;
  });
  train::StudyResult study;
  study.config = config;
  for (size_t i = 0; i < runs.size(); ++i) study.runs.push_back(run_from_bytes(all[i], runs[i]));
  return study;
}

train::lm::LmStudyResult lm_study_across(const train::lm::LmStudyConfig& config, const train::lm::Corpus& corpus,
                                         const train::lm::LmTrainer& train, const RunContext& ctx,
                                         const std::function<void(const train::lm::LmProgress&)>& progress) {
  if (ctx.distributor == nullptr || ctx.distributor->size() == 1)
    return train::lm::run_lm_study(config, corpus, train, progress);
  const auto start = std::chrono::steady_clock::now();
  std::vector<train::lm::LmRunConfig> runs = train::lm::expand(config);
  std::vector<double> costs;
  for (auto& r : runs) {
    r.model.vocab = corpus.vocab();
    costs.push_back(train::lm::run_cost(r));
  }
  const auto all = across_processes(costs, config.threads, ctx, [&](const std::vector<int64_t>& mine, int threads) {
    train::lm::LmStudyConfig share = config;
    share.threads = threads;
    const auto study = train::lm::run_lm_study(share, corpus, train, progress, &mine);
    std::vector<std::string> parts;
    for (int64_t i : mine) parts.push_back(lm_run_bytes(study.runs[static_cast<size_t>(i)]));
    return parts;
  });
  train::lm::LmStudyResult study;
  study.config = config;
  for (size_t i = 0; i < runs.size(); ++i) study.runs.push_back(lm_run_from_bytes(all[i], runs[i]));
  study.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return study;
}

}  // namespace attnlab::lab
