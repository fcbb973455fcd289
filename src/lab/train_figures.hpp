#pragma once
// The figures of experiment `train` (src/lab/exp_train.cpp), drawn from a finished study and
// its cell summaries: learning curves, steps to threshold, attention along training, and the
// mechanism figure C8's verdicts point to. Titles and captions come from the words "train".
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/train.hpp"
#include "lab/words.hpp"

namespace attnlab::lab::train_figures {

// A scaling as the training figures name and colour it (qk-norm black, the policies their own colours).
std::string policy_label(const train::Scaling& s);
std::string policy_colour(const train::Scaling& s);

struct Group {  // one (task, init, optimiser)
  train::TaskKind task;
  train::InitMode init;
  train::OptimizerKind opt;
  std::string tag() const;
};

// Held-out accuracy along training, one panel per d_k, mean and min..max over seeds per policy.
Figure learning_curves(const train::StudyResult& s, const Group& g, const Words& words);

// Median steps to the threshold against d_k, one panel per group; runs that never reach it count at the budget.
Figure steps_to_threshold(const train::StudyResult& s, const std::vector<Group>& groups,
                          const std::vector<train::CellSummary>& cells, const Words& words);

// Attention entropy and mean ‖J‖_F along training at the largest d_k: the mechanism.
Figure attention_diagnostics(const train::StudyResult& s, train::TaskKind task, train::InitMode init,
                             const Words& words);

// The mechanism beside the outcome, against d_k, for one optimiser: how concentrated the
// attention is at initialisation, how large the gradient reaching W_q and W_k is in the first
// steps, and how far each policy got (C8's own figure, one per optimiser so that each stays a
// screen tall). mechanism_name: its name, for the verdict that points to it.
std::string mechanism_name(train::TaskKind task, train::InitMode init, train::OptimizerKind opt);
Figure mechanism(const train::StudyResult& s, const std::vector<train::CellSummary>& cells, train::TaskKind task,
                 train::InitMode init, train::OptimizerKind opt, const Words& words);

}  // namespace attnlab::lab::train_figures
