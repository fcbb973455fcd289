#pragma once
// The training studies' runs divided among processes (attnlab/run_distributor.hpp): any list of
// runs with costs (across_processes), and the two studies on it, the toy study of
// attnlab/train.hpp and the language-model study of attnlab/lm_study.hpp.
#include <functional>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/lm_study.hpp"
#include "attnlab/train.hpp"

namespace attnlab::lab {

// Runs whose costs are `costs` over ctx.distributor's processes: each process runs the indices
// assign_runs gives it through `run_share` (its indices, in order, and its share of `threads`),
// which returns one byte string per index; every process gets every run's bytes in index
// order. A failure on one process ends every process with an Error naming the rank (Interrupted
// if processes were only interrupted). Requires a distributor.
using RunShare = std::function<std::vector<std::string>(const std::vector<int64_t>& mine, int threads)>;
std::vector<std::string> across_processes(const std::vector<double>& costs, int threads, const RunContext& ctx,
                                          const RunShare& run_share);

// run_study over ctx.distributor's processes: every process gets the whole study, runs in sweep
// order, equal to the one-process study (each run is a function of its configuration alone).
// Without a distributor (or with one process): run_study.
train::StudyResult study_across(const train::StudyConfig& config, const RunContext& ctx,
                                const std::function<void(const train::StudyProgress&)>& progress);

// The same for the language-model study, each run trained by `train` (train_lm_run).
train::lm::LmStudyResult lm_study_across(const train::lm::LmStudyConfig& config, const train::lm::Corpus& corpus,
                                         const train::lm::LmTrainer& train, const RunContext& ctx,
                                         const std::function<void(const train::lm::LmProgress&)>& progress);

}  // namespace attnlab::lab
