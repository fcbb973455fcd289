#pragma once
// The one exception type attnlab throws for bad input. Its message names the
// argument and the offending shapes or values, e.g. "k: head dim 32 does not
// match q's 64", so that the caller can fix the call without reading our code.
#include <stdexcept>
#include <string>

#include "attnlab/export.hpp"

namespace attnlab {

class ATTNLAB_API Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

// A working buffer could not be allocated: an Error (the call is too large for this
// machine) whose message names the size. Python raises it as MemoryError.
class ATTNLAB_API OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& message) : Error(message) {}
};

// The caller's ComputeConfig::interrupt asked the call to stop (Python: Ctrl-C). The
// outputs hold partial results; attnlab's own programs never return them.
class ATTNLAB_API Interrupted : public Error {
 public:
  explicit Interrupted(const std::string& message) : Error(message) {}
};

}  // namespace attnlab
