#pragma once
// Hostile-input classes for docs/robustness.md. Each case runs one call and
// reports what attnlab did: the exact error message, or the defined result.
#include <functional>
#include <string>
#include <vector>

namespace attnlab::robustness {

struct Case {
  std::string input_class;  // e.g. "mismatched heads"
  std::string example;      // the concrete input tried
  std::function<std::string()> run;  // returns "error: <message>" or "result: <what came back>"
};

std::vector<Case> api_cases();
std::vector<Case> cli_cases();  // runs the attnlab binary

}  // namespace attnlab::robustness
