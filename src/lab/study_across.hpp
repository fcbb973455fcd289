#pragma once
// The training study's runs divided among processes (attnlab/run_distributor.hpp).
#include <functional>

#include "attnlab/lab.hpp"
#include "attnlab/train.hpp"

namespace attnlab::lab {

// run_study over ctx.distributor's processes: each trains the runs assign_runs gives it (by
// train::run_cost) on its share of config.threads, and every process gets the whole study,
// runs in sweep order, equal to the one-process study (each run is a function of its
// configuration alone). A failure on one process ends every process with an Error naming
// the rank. Without a distributor (or with one process): run_study.
train::StudyResult study_across(const train::StudyConfig& config, const RunContext& ctx,
                                const std::function<void(const train::StudyProgress&)>& progress);

}  // namespace attnlab::lab
