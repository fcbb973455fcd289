#pragma once
// A claim's overall verdict from its checks' outcomes: the one rule behind the report's
// badges ("holds", "does not hold", "mixed", ...), so that no failed check can sit under a
// claim that holds and no side check can rescue a claim whose main check fails. Private to
// the lab; docs/lab.md states the rule.
#include <string>
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::lab {

// The main check is the one named by the claim's "main_check" in claims.json (Verdict::check;
// every check of that name when an experiment reports it more than once); the others are side
// checks. Then:
//   no checks                                        → pending       ("not measured")
//   the main check refuted, whatever the side checks → refuted       ("does not hold")
//   the main check not run (only side checks)        → inconclusive  ("mixed")
//   the main check inconclusive or pending           → inconclusive  ("depends on …" / "mixed")
//   the main check confirmed, a side check refuted   → inconclusive  ("mixed")
//   the main check confirmed, no side check refuted  → confirmed     ("holds")
Outcome claim_verdict(const std::vector<Verdict>& checks, const std::string& main_check);
// The same, with the main check the catalogue names for the checks' claim.
Outcome claim_verdict(const std::vector<Verdict>& checks);

}  // namespace attnlab::lab
