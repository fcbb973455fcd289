#pragma once
// The training study's full sweep, cached: the cells `attnlab run train --full` wrote
// (docs/training/full_cells.csv, compiled in), so that the default report shows the 800-step and
// small-init results beside its own 300-step study without re-running them, labelled as such.
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/train.hpp"
#include "lab/words.hpp"

namespace attnlab::lab::train_full {

// The full sweep's cells (task, init, optimiser, d_k, scale, rate, seeds reaching the threshold, ...).
const std::vector<train::CellSummary>& cells();

// One figure per init: seeds reaching 90 % within the full budget against d_k, per optimiser and scale.
std::vector<Figure> figures(const Words& words);

// C8 in the full sweep, a side check: the rule at the largest d_k of every setting (refuted where any is),
// with what the 800-step and small-init results refute in words. `live` is this run's study: where its
// unscaled SGD fails at the smallest d_k without a saturated row, the finding says so.
Verdict verdict(const std::vector<train::CellSummary>& live, const Words& words);

}  // namespace attnlab::lab::train_full
