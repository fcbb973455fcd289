// libFuzzer target: the text parsers behind the command line and configs.
// Property: a parse either succeeds with a value that round-trips, or throws
// attnlab::Error. Nothing else (no crash, no other exception).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnlab/attention_options.hpp"
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
  return 0;
}
