// The training study across processes (study_across.hpp): divide, train, gather on rank 0,
// and hand the whole study back to every process (the tuning sweep's rates are needed by all).
#include "lab/study_across.hpp"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "attnlab/run_distributor.hpp"

namespace attnlab::lab {
namespace {

using train::RunResult;

// A run's outcome as doubles (its configuration is known from its index): every field
// by its bits, so the gathered study equals the one-process study exactly.
constexpr size_t kPointFields = 11;
std::string run_bytes(const RunResult& r) {
  std::vector<double> v{static_cast<double>(r.steps_to_threshold), r.final_accuracy, r.final_loss,
                        r.diverged ? 1.0 : 0.0, r.seconds};
  for (const auto& p : r.curve)
    v.insert(v.end(), {static_cast<double>(p.step), p.train_loss, p.eval_loss, p.eval_accuracy, p.entropy,
                       p.jacobian_fro, p.max_prob, p.grad_qk, p.temperature, p.max_logit, 0.0});
  std::string bytes(v.size() * sizeof(double), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

RunResult run_from_bytes(const std::string& bytes, const train::RunConfig& config) {
  if (bytes.size() % sizeof(double) != 0 || bytes.size() / sizeof(double) < 5 ||
      (bytes.size() / sizeof(double) - 5) % kPointFields != 0)
    throw Error(fmt::format("train: a gathered run of {} bytes is malformed", bytes.size()));
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), bytes.size());
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

}  // namespace

train::StudyResult study_across(const train::StudyConfig& config, const RunContext& ctx,
                                const std::function<void(const train::StudyProgress&)>& progress) {
  if (ctx.distributor == nullptr || ctx.distributor->size() == 1) return train::run_study(config, progress);
  const RunDistributor& d = *ctx.distributor;
  const std::vector<train::RunConfig> runs = train::expand(config);
  std::vector<double> costs;
  for (const auto& r : runs) costs.push_back(train::run_cost(r));
  const std::vector<int> owner = assign_runs(costs, d.size());
  std::vector<int64_t> mine;
  for (size_t i = 0; i < runs.size(); ++i)
    if (owner[i] == d.rank()) mine.push_back(static_cast<int64_t>(i));

  ctx.report(fmt::format("{} of the {} runs on this rank", mine.size(), runs.size()));
  // This process's share of the threads (the machine's threads are shared by the processes on it).
  train::StudyConfig share = config;
  share.threads = std::max(1, config.threads / d.size());
  ShareOutcome outcome;
  train::StudyResult study;
  try {
    study = train::run_study(share, progress, &mine);
    std::vector<std::string> parts;
    for (int64_t i : mine) parts.push_back(run_bytes(study.runs[static_cast<size_t>(i)]));
    outcome.payload = pack(parts);
  } catch (const Interrupted&) {
    outcome.interrupted = true;
  } catch (const std::exception& e) {
    outcome.failure = fmt::format("rank {}, training runs: {}", d.rank(), e.what());
  }
  const std::vector<std::string> shares = gather_shares(d, outcome);  // throws on every rank if one failed

  // Rank 0 puts the runs in sweep order and sends the whole study to everyone.
  std::string whole;
  if (d.rank() == 0) {
    std::vector<std::string> by_index(runs.size());
    for (int r = 0; r < d.size(); ++r) {
      const std::vector<std::string> parts = unpack(shares[static_cast<size_t>(r)]);
      size_t next = 0;
      for (size_t i = 0; i < runs.size(); ++i)
        if (owner[i] == r) by_index[i] = parts.at(next++);
    }
    whole = pack(by_index);
  }
  const std::vector<std::string> all = unpack(d.broadcast(whole));
  if (all.size() != runs.size()) throw Error(fmt::format("train: gathered {} runs of {}", all.size(), runs.size()));
  study.config = config;
  study.runs.clear();
  for (size_t i = 0; i < runs.size(); ++i) study.runs.push_back(run_from_bytes(all[i], runs[i]));
  return study;
}

}  // namespace attnlab::lab
