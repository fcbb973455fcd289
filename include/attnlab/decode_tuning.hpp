#pragma once
// The decoding step's reads from memory, measured on this machine (as FFTW's wisdom, for one
// decision). With few query rows per K/V head the fused decoding step (docs/engine.md,
// "Decoding") reads K and V from memory in one of three ways that give the same bits: asking
// for lines beside its loads, spreading its requests over each block of keys, or in row order
// (the CPU's prefetchers alone). Which is fastest moves from CPU to CPU by 10-40 % (docs/
// tuning.md): the library's rule was fitted on one. measure_decode_tuning times the three on
// this machine for each cell (element type, rows per K/V head, head size) and keeps the
// fastest; use_decode_tuning makes the process's decoding calls read that way. Results are
// bitwise the same whichever way is taken, so a tuning changes times, never values.
//
//   attnlab tune --out decode-tuning.txt               # the command line: measure and save
//   ATTNLAB_DECODE_TUNING=decode-tuning.txt python ... # any program: the library loads it
//
// Only AVX-512 targets have the three ways (the others spread their requests): there
// measure_decode_tuning returns no cells. A tuning names the machine it was measured on and is
// refused on another (decode_tuning_machine()).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/export.hpp"

namespace attnlab {

// One cell: K and V of `type` (float32, float16, bfloat16), `rows` query rows per K/V head
// (1-8), d = dv = head_dim (64, 128, 256), read from memory (beyond the last-level cache).
struct DecodeTuningCell {
  std::string type;
  int rows = 0;
  int head_dim = 0;
  std::string reads;   // the way taken: beside_loads, spread or row_order
  double rule_ms = 0;  // the median time of the library's rule's way
  double best_ms = 0;  // the median time of the way taken
};

struct DecodeTuning {
  std::string machine;  // decode_tuning_machine() where it was measured
  std::vector<DecodeTuningCell> cells;
};

struct DecodeTuningOptions {
  int rounds = 7;       // interleaved rounds per cell (every way once a round); the median decides
  int64_t bytes = 0;    // K and V bytes per call; 0: 4 × the last-level cache, at least 256 MiB
  int threads = 0;      // 0: OpenMP's default, as a decoding call's
  std::vector<std::string> types = {"float32", "float16", "bfloat16"};
  std::vector<int> rows = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int> head_dims = {64, 128, 256};
  // Another way replaces the rule's only if its median is faster by more than this fraction:
  // the noise between rounds does not flip a cell.
  double margin = 0.03;
  std::function<void(const DecodeTuningCell&)> on_cell;  // called as each cell is measured
};

// This machine as a tuning names it: the CPU (vendor, family, model, stepping), the SIMD
// target the engine runs and the last-level cache's size.
ATTNLAB_API std::string decode_tuning_machine();

// Times the ways on this machine (a few seconds per element type at the defaults).
ATTNLAB_API DecodeTuning measure_decode_tuning(const DecodeTuningOptions& options = {});

// The text form (a header, a `machine` line, one line per cell), and back: an Error names the
// line and what is wrong with it.
ATTNLAB_API std::string to_text(const DecodeTuning& tuning);
ATTNLAB_API DecodeTuning parse_decode_tuning(std::string_view text);

// Makes this process's decoding calls read as the tuning says in its cells (the rule
// elsewhere); an Error if it was measured on another machine. use_decode_rule() drops it.
// Not while other threads decode (the switch is one pointer, read at each call's start).
ATTNLAB_API void use_decode_tuning(const DecodeTuning& tuning);
ATTNLAB_API void use_decode_rule();

}  // namespace attnlab
