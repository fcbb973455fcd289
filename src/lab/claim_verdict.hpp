#pragma once
// A claim's overall verdict from its checks' outcomes: the one rule behind the report's
// badges ("holds", "does not hold", "mixed", ...), so that no failed check can sit under a
// claim that holds. Private to the lab; docs/lab.md states the rule.
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::lab {

// The main checks are the claim's non-supplementary checks (all of them when every check is
// supplementary). Then:
//   no checks                                          → pending       ("not measured")
//   some main check refuted, none confirmed            → refuted       ("does not hold")
//   some main check refuted and some confirmed         → inconclusive  ("mixed")
//   no main check refuted, some inconclusive/pending   → inconclusive  ("depends on …" / "mixed")
//   every main check confirmed, a supplementary refuted → inconclusive  ("mixed")
//   every check confirmed or inconclusive, main all confirmed → confirmed ("holds")
Outcome claim_verdict(const std::vector<Verdict>& checks);

}  // namespace attnlab::lab
