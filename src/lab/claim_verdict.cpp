#include "lab/claim_verdict.hpp"

namespace attnlab::lab {

Outcome claim_verdict(const std::vector<Verdict>& checks) {
  if (checks.empty()) return Outcome::pending;
  bool any_main = false;
  for (const auto& v : checks) any_main = any_main || !v.supplementary;
  int refuted = 0, confirmed = 0, open = 0;  // among the main checks
  bool beside_refuted = false;               // a supplementary check failed
  for (const auto& v : checks) {
    if (any_main && v.supplementary) {
      beside_refuted = beside_refuted || v.outcome == Outcome::refuted;
      continue;
    }
    refuted += v.outcome == Outcome::refuted;
    confirmed += v.outcome == Outcome::confirmed;
    open += v.outcome == Outcome::inconclusive || v.outcome == Outcome::pending;
  }
  if (refuted > 0) return confirmed > 0 ? Outcome::inconclusive : Outcome::refuted;
  if (open > 0 || beside_refuted) return Outcome::inconclusive;
  return Outcome::confirmed;
}

}  // namespace attnlab::lab
