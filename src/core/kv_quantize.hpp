#pragma once
// The row codecs of the KV cache's element types (attnlab/kv_cache.hpp states each format):
// one head's row of `dim` values to bytes and back. Pure functions of their inputs.
#include <cstddef>
#include <cstdint>

#include "attnlab/kv_cache.hpp"

namespace attnlab::detail {

inline constexpr int64_t kQuantGroup = 32;  // channels per int8/int4 scale (q8_0's, q4_0's)

// Bytes of one row of `dim` values: the codes, then (int8, int4) a float32 scale per group.
int64_t row_bytes(CacheType type, int64_t dim);

// Encodes x[0, dim) (finite) into out. Returns -1, or the index of a value the type cannot
// hold (float16, bfloat16 overflow; fp8 beyond 448·scale), writing nothing meaningful then.
int64_t encode_row(CacheType type, const float* x, int64_t x_stride, int64_t dim, float scale, std::byte* out);

void decode_row(CacheType type, const std::byte* row, int64_t dim, float scale, float* out);

// The largest |x| the type holds (fp8: for scale 1); for messages.
double type_max(CacheType type);

// e4m3fn: round to nearest even of y (|y| ≤ 448 after rounding), and its value.
uint8_t fp8_e4m3_from_float(float y);
float fp8_e4m3_to_float(uint8_t bits);

}  // namespace attnlab::detail
