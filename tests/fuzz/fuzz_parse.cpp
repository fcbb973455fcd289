// libFuzzer target: the text parsers behind the command line and configs.
// Property: a parse either succeeds with a value that round-trips, or throws
// attnlab::Error. Nothing else (no crash, no other exception). Experiment parameters
// (the lab's --set key=value and Python keywords) must also come out within the bound
// every integer parameter has, in the type they are used in (issue 18: 2^32 + 1 was
// truncated to 1 after its check), and thread counts within [0, kMaxThreads].
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/lab.hpp"
#include "attnlab/scale.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto policy = attnlab::ScalePolicy::parse(text);
    const auto again = attnlab::ScalePolicy::parse(policy.name());
    if (again.kind() != policy.kind()) std::abort();
    (void)policy(64, 128);
  } catch (const attnlab::Error&) {
  }
  try {
    attnlab::parse_causal(text.c_str());
  } catch (const attnlab::Error&) {
  }
  // The lab's parameter parsing, every type it has.
  int64_t n = 0;
  double x = 0;
  bool flag = false;
  std::vector<int64_t> dims;
  std::vector<double> xs;
  attnlab::lab::Params params;
  params.add("n", n, "");
  params.add("x", x, "");
  params.add("flag", flag, "");
  params.add("dims", dims, "");
  params.add("xs", xs, "");
  for (const char* key : {"n", "x", "flag", "dims", "xs"}) {
    try {
      params.apply({{key, text}});
    } catch (const attnlab::Error&) {
    }
  }
  constexpr int64_t kBound = int64_t{1} << 24;
  if (n < -kBound || n > kBound) std::abort();
  for (int64_t d : dims)
    if (d < -kBound || d > kBound) std::abort();
  if (!std::isfinite(x)) std::abort();
  // A thread count is accepted exactly when it is in [0, kMaxThreads].
  if (n >= INT32_MIN && n <= INT32_MAX) {
    bool ok = true;
    try {
      attnlab::check_threads(static_cast<int>(n));
    } catch (const attnlab::Error&) {
      ok = false;
    }
    if (ok != (n >= 0 && n <= attnlab::kMaxThreads)) std::abort();
  }
  return 0;
}
