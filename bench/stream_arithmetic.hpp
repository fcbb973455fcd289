#pragma once
// A core's read stream with arithmetic in its loop: how much of the memory's time a
// loop's own work can hide. Decoding against a KV cache reads K and V once and does
// a little arithmetic per byte; on the machines we measured, that arithmetic is not
// free even though it takes less time than the memory (docs/engine.md, "What limits
// it"). BM_StreamArithmetic (build/attnlab_microbench) times this loop on a buffer
// from memory and on one resident in L2, so both sides of that sum are measured.
#include <cstddef>

namespace attnlab::bench {

// One pass over x[0, n) (n a whole number of 8 vectors; x vector-aligned): every
// loaded vector is summed and also feeds `fmas` multiply-adds (0, 1, 2, 4 or 8) on
// eight accumulators of their own, work that depends on the data but never stalls the
// loads. With prefetch_bytes > 0 each 64-byte line read also asks for the line
// prefetch_bytes ahead (software prefetch, as the decode kernels do). Returns a sum
// of the accumulators, for the caller to keep so that nothing is optimised away.
float stream_with_arithmetic(const float* x, size_t n, int fmas, size_t prefetch_bytes);

}  // namespace attnlab::bench
