#pragma once
// The engine's test probe: switches that replace the decode policy's inputs and counters
// of the tiles the kernels computed, for the tests and benchmarks only. The library holds
// one pointer to a probe, null unless a test installs one (probe() below): production calls
// count nothing and take the library's switches.
#include <atomic>
#include <cstdint>
#include <limits>

#include "engine/decode_path.hpp"
#include "engine/decode_strategy.hpp"

namespace attnlab::engine {

// The tile pairs (query tile × key tile of one (b, h)) the kernels computed, summed over
// the calls made while the probe is installed, and the key tiles the decode path took
// through its fused step, of those the ones that asked for their lines beside the loads,
// read in row order, and whose bfloat16 scores ran on VDPBF16PS (DecodeStrategy); and the
// forward's and the backward's tile pairs whose products ran on VDPBF16PS (bf16_products.hpp).
struct TileCounts {
  std::atomic<int64_t> forward{0}, backward{0}, decode_fused{0}, decode_fused_beside_loads{0}, decode_fused_row_order{0},
      decode_bf16_dots{0}, forward_bf16_products{0}, backward_bf16_products{0};
};

struct EngineProbe {
  // DecodeSwitches (decode_strategy.hpp), as atomics a test flips between calls.
  std::atomic<bool> fused{true}, bf16_dots{true}, row_order{true};
  std::atomic<int64_t> beside_loads_max_kv_bytes{default_decode_switches().beside_loads_max_kv_bytes};
  std::atomic<int64_t> beside_loads_min_rows{default_decode_switches().beside_loads_min_rows};
  TileCounts counts;
  // The path the last forward took (of any element type; tests call from one thread).
  // Not a timing; lets tests prove that the decode shapes they check ran the decode path.
  std::atomic<ForwardPath> last_path{ForwardPath::tiled};

  // The library's switches (its tuning in use among them) with these replaced.
  DecodeSwitches switches() const {
    DecodeSwitches s = default_decode_switches();
    s.fused = fused.load(), s.bf16_dots = bf16_dots.load(), s.row_order = row_order.load();
    s.beside_loads_max_kv_bytes = beside_loads_max_kv_bytes.load(), s.beside_loads_min_rows = beside_loads_min_rows.load();
    return s;
  }
};

// Where the library looks for a probe (engine.cpp).
std::atomic<EngineProbe*>& engine_probe_slot();
// The installed probe, or null (production: nothing is counted).
EngineProbe* installed_engine_probe();

// Adds n tile pairs to the installed probe's count `which` (forward, backward); none installed: nothing.
inline void count_tiles(std::atomic<int64_t> TileCounts::*which, int64_t n) {
  if (EngineProbe* probe = installed_engine_probe()) (probe->counts.*which).fetch_add(n, std::memory_order_relaxed);
}

namespace testing {

// The process's probe, installed on first use and kept for the process's life.
inline EngineProbe& probe() {
  static EngineProbe* const p = [] {
    auto* made = new EngineProbe();
    engine_probe_slot().store(made, std::memory_order_release);
    return made;
  }();
  return *p;
}

inline TileCounts& tile_counts() { return probe().counts; }
// The path of the last forward since the probe was installed (tests/support/engine_path.hpp
// installs it before main, so that the first call is seen too).
inline ForwardPath last_forward_path() { return probe().last_path.load(); }
// Whether decoding may take the fused step. Off, its shapes take the tile step, which a
// 16-bit cache takes on the targets without AVX-512, so that the precision tests can hold
// 16-bit results bitwise to the float32 engine's there too.
inline std::atomic<bool>& fused_decode_allowed() { return probe().fused; }
// Whether bfloat16 products may run on VDPBF16PS (a bfloat16 cache's scores, the tiled
// forward's and backward's products). Off, the values are converted to float32 and multiplied there, the
// float32 engine's results on the converted values.
inline std::atomic<bool>& bf16_dot_products_allowed() { return probe().bf16_dots; }
// The size up to which the fused step asks for its lines beside its loads (the policy's
// last-level cache size unless set), and the rows from which a float32 cache not read in
// row order does so whatever the size. Both ways give bitwise the same results.
inline std::atomic<int64_t>& fused_beside_loads_max_kv_bytes() { return probe().beside_loads_max_kv_bytes; }
inline std::atomic<int64_t>& fused_beside_loads_min_rows() { return probe().beside_loads_min_rows; }
// Whether the fused step may read K and V in row order from memory; off, it spreads its
// requests. Bitwise the same results either way.
inline std::atomic<bool>& fused_row_order_allowed() { return probe().row_order; }
inline bool cpu_has_bf16_dot_products() { return engine::cpu_has_bf16_dot_products(); }

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

}  // namespace testing
}  // namespace attnlab::engine
