#pragma once
// The figures of experiment `lm` (src/lab/exp_lm.cpp), from a finished language-model study
// and its cells: validation loss while training, final loss against d_k, attention per layer
// and the gradients reaching W_q and W_k. Titles and captions come from the words "lm"; every
// learning figure's caption gives the budget, the optimiser, the seeds and what the band is.
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/lm_study.hpp"
#include "lab/words.hpp"

namespace attnlab::lab::lm_figures {

// The name of a group's learning-curve figure at one d_k (at the largest, the figure its C8
// verdict points to).
std::string curves_name(const train::lm::LmGroup& group, int64_t d_k);

// One colour per arm on every figure (the scale policies' colours where the arm is one).
std::string arm_colour(const train::lm::Arm& arm);

// Every figure of the study, in the order the report shows them.
std::vector<Figure> all(const train::lm::LmStudyResult& study, const std::vector<train::lm::LmCell>& cells,
                        double bigram, const Words& words);

}  // namespace attnlab::lab::lm_figures
