#pragma once
// The verdict thresholds of the claims catalogue (src/lab/claims.json, "thresholds" of a
// claim): the numbers a verdict rule compares against, kept beside the claim they decide
// rather than in the experiment's code. Private to the lab.
#include <string>

namespace attnlab::lab {

// The value of claim_id's threshold `name`; throws Error naming the claim and the threshold
// (and the thresholds it does have) when the catalogue has none by that name.
double claim_threshold(const std::string& claim_id, const std::string& name);

}  // namespace attnlab::lab
