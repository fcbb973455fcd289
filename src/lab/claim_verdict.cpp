#include "lab/claim_verdict.hpp"

namespace attnlab::lab {

Outcome claim_verdict(const std::vector<Verdict>& checks, const std::string& main_check) {
  if (checks.empty()) return Outcome::pending;
  int main = 0, refuted = 0, confirmed = 0;  // among the main checks
  bool side_refuted = false;
  for (const auto& v : checks) {
    if (v.check != main_check) {
      side_refuted = side_refuted || v.outcome == Outcome::refuted;
      continue;
    }
    ++main;
    refuted += v.outcome == Outcome::refuted;
    confirmed += v.outcome == Outcome::confirmed;
  }
  if (refuted > 0) return Outcome::refuted;
  if (main == 0 || confirmed < main || side_refuted) return Outcome::inconclusive;
  return Outcome::confirmed;
}

Outcome claim_verdict(const std::vector<Verdict>& checks) {
  if (checks.empty()) return Outcome::pending;
  return claim_verdict(checks, claim(checks.front().claim).main_check);
}

}  // namespace attnlab::lab
