#pragma once
// Test switches of the decode path, for the tests only (never part of libattnlab's API).
#include <cstdint>
#include <limits>

#include "engine/plan.hpp"

namespace attnlab::engine::testing {

// While alive, the fused decoding step asks for its lines as it does for K and V read
// from memory (true) or as for K and V in the last-level cache (false), whatever their size.
class DecodeFromMemory {
 public:
  explicit DecodeFromMemory(bool from_memory) {
    fused_beside_loads_max_kv_bytes().store(from_memory ? 0 : std::numeric_limits<int64_t>::max());
  }
  ~DecodeFromMemory() { fused_beside_loads_max_kv_bytes().store(saved_); }
  DecodeFromMemory(const DecodeFromMemory&) = delete;
  DecodeFromMemory& operator=(const DecodeFromMemory&) = delete;

 private:
  int64_t saved_ = fused_beside_loads_max_kv_bytes().load();
};

inline bool cpu_has_bf16_dot_products() { return engine::cpu_has_bf16_dot_products(); }

}  // namespace attnlab::engine::testing
