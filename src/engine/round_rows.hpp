#pragma once
// float32 rows rounded to a 16-bit type (round_rows.cpp): the engine's 16-bit results (out;
// dq, dk, dv) are computed in float32 and rounded once, at the end.
#include <cstdint>

#include "attnlab/float16.hpp"

namespace attnlab::engine {

// dst[j] = E::from_float(src[j]) for j < n, bit for bit (round to nearest even, NaN kept quiet).
void round_rows(const float* src, bfloat16* dst, int64_t n);
void round_rows(const float* src, float16* dst, int64_t n);

}  // namespace attnlab::engine
