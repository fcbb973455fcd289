#include "attnlab/attention_options.hpp"

#include <cstring>
#include <fmt/format.h>

namespace attnlab {

std::string to_string(const Shape& shape) {
  return fmt::format("[{}, {}, {}, {}]", shape[0], shape[1], shape[2], shape[3]);
}

const char* to_string(Causal causal) {
  switch (causal) {
    case Causal::none: return "none";
    case Causal::top_left: return "top_left";
    case Causal::bottom_right: return "bottom_right";
  }
  return "none";
}

Causal parse_causal(const char* text) {
  if (std::strcmp(text, "none") == 0) return Causal::none;
  if (std::strcmp(text, "top_left") == 0) return Causal::top_left;
  if (std::strcmp(text, "bottom_right") == 0) return Causal::bottom_right;
  throw Error(fmt::format("causal: unknown alignment '{}' (expected none, top_left or bottom_right)", text));
}

void check_threads(int threads, const char* what) {
  if (threads < 0 || threads > kMaxThreads)
    throw Error(fmt::format("{}: {} is outside [0, {}] (0 = all cores)", what, threads, kMaxThreads));
}

}  // namespace attnlab
