#pragma once
// A core's read stream with arithmetic in its loop: how much of the memory's time a
// loop's own work can hide. Decoding against a KV cache reads K and V once and does
// a little arithmetic per byte; on the machines we measured, that arithmetic is not
// free even though it takes less time than the memory (docs/engine.md, "What a
// step reaches"). BM_StreamArithmetic (build/attnlab_microbench) times this loop on a buffer
// from memory and on one resident in L2, so both sides of that sum are measured.
#include <cstddef>

namespace attnlab::bench {

// One pass over x[0, n) (n a whole number of 8 vectors): every
// loaded vector is summed and also feeds `fmas` multiply-adds (0, 1, 2, 4 or 8) on
// eight accumulators of their own, work that depends on the data but never stalls the
// loads. With prefetch_bytes > 0 each 64-byte line read also asks for the line
// prefetch_bytes ahead (software prefetch, as the decode kernels do). Returns the sum of
// x[0, n) (the work joins it times zero: keep the result, and nothing is optimised away).
float stream_with_arithmetic(const float* x, size_t n, int fmas, size_t prefetch_bytes);

// The same loop over two arrays read as a decoding step reads K and V: `row` floats of x
// (a key's row), then the same `row` floats of y (its value's row), row after row, n
// floats of each (n a whole number of rows, row a whole number of 8 vectors).
float stream_pair_with_arithmetic(const float* x, const float* y, size_t n, size_t row, int fmas, size_t prefetch_bytes);

// The same pair read in the fused decoding step's order over each block of 8 rows (two
// rows of x at a time, then y by blocks of 3 vectors of columns down the 8 rows), with
// the hardware prefetchers alone; n a whole number of 8 rows. `which`: kStepOrderK, kStepOrderV
// or both (the other read row after row), and with kStepOrderGap a pause of about 256
// cycles without loads between a block's K and its V (where the step's softmax is).
inline constexpr int kStepOrderK = 1, kStepOrderV = 2, kStepOrderGap = 4;
float stream_pair_in_step_order(const float* x, const float* y, size_t n, size_t row, int fmas, int which);

// The SIMD target these loops run on (e.g. "AVX3").
const char* stream_target_name();

}  // namespace attnlab::bench
