#pragma once
// The study's results as CSV text with names (task, init, optimizer and scale
// spelled out), for the tests and for looking at a study by hand. The lab's
// experiment writes its own tables (coded numbers, src/lab/exp_train.cpp); these
// are not part of the study's interface.
#include <string>
#include <vector>

#include "attnlab/train.hpp"

namespace attnlab::train {

std::string runs_csv(const StudyResult& study);                // one row per run
std::string curves_csv(const StudyResult& study);              // one row per evaluation point
std::string cells_csv(const std::vector<CellSummary>& cells);  // one row per CellSummary

}  // namespace attnlab::train
