#pragma once
// C7's verdicts (explosion or vanishing?) from the ratios the `gradflow` experiment measures:
// without/with the scale, per d_k, for the typical row (median over rows) of the softmax
// Jacobian ‖J‖_F, of the query's gradient ‖dQ_i‖ and of the key's ‖dK_j‖. The claim is judged on
// the Jacobian, what article 003 argues about (∂softmax/∂x → 0); the two gradients, which carry
// the chain rule's extra √d_k without the scale (dQ = dS·K, not dS·K/√d_k), are checks beside it.
// Each is judged at every d_k measured (below 1: the scale prevents a vanishing there), so the
// answer is that of the range measured; the Jacobian turns well inside any sweep that reaches
// the head sizes models use, so it does not move with where the sweep stops.
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {

struct TypicalRowRatios {
  std::vector<int64_t> dims;                    // d_k measured, increasing
  std::vector<double> jacobian, query, key;     // [d_k] without / with the scale
  std::vector<double> total_query;              // [d_k] ‖dQ‖_F over all rows, without / with
  int64_t model_lo = 64, model_hi = 256;        // the head sizes models use
  std::string base, remedy;                     // the two policies' labels
  std::string figure;                           // the figure the verdicts point to
};

// The claim's verdict (on the Jacobian), then the query's and the key's (supplementary), in the
// words of the experiment that measured the ratios (its keys c7.*).
std::vector<Verdict> c7_verdicts(const TypicalRowRatios& r, const Words& words);

}  // namespace attnlab::lab
