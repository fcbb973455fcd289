#pragma once
// The 16-bit element types attention takes besides float and double:
//   bfloat16  1 sign, 8 exponent, 7 mantissa bits: float32's range, 3 significant digits
//             (what models are stored and run in);
//   float16   IEEE binary16, 1 sign, 5 exponent, 10 mantissa bits: max 65504, smallest
//             normal 6.1e-5, subnormals down to 6e-8.
// Each is its bit pattern and nothing else (2 bytes, trivially copyable), so arrays of
// them are PyTorch's, NumPy's (float16) and Highway's (hwy::bfloat16_t, hwy::float16_t)
// layouts. Conversions to float are exact; from float they round to nearest, ties to
// even (as PyTorch and NumPy do), overflow to ±inf, keep NaN a (quiet) NaN.
//
// Why not Highway's types in this header: Highway is a private dependency of the library
// (its headers are not installed with attnlab's), and its scalar BF16FromF32 (Highway
// 1.0.3) truncates instead of rounding to nearest even. The kernels reinterpret these
// arrays as Highway's types and convert with its vector PromoteTo (exact both ways).
#include <bit>
#include <cstdint>

namespace attnlab {

struct bfloat16 {
  uint16_t bits = 0;

  static constexpr bfloat16 from_bits(uint16_t b) { return bfloat16{b}; }
  // Round to nearest, ties to even; NaN stays NaN (quiet, sign kept).
  static constexpr bfloat16 from_float(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return from_bits(static_cast<uint16_t>((x >> 16) | 0x40u));
    const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // carries into the exponent, up to inf
    return from_bits(static_cast<uint16_t>(rounded >> 16));
  }
  constexpr float to_float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
  constexpr bool is_finite() const { return (bits & 0x7f80u) != 0x7f80u; }
};

struct float16 {
  uint16_t bits = 0;

  static constexpr float16 from_bits(uint16_t b) { return float16{b}; }
  // Round to nearest, ties to even (F. Giesen's float_to_half_fast3_rtne: the exponent
  // rebiased by an integer add whose carry does the rounding; below 2^-14 the float
  // adder rounds f to a multiple of 2^-24 by adding 0.5). Needs the default rounding
  // mode, and subnormal floats not flushed to zero.
  static constexpr float16 from_float(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x47800000u)  // ≥ 65536, inf or NaN (65504…65536 round in the normal branch)
      return from_bits(sign | (x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u));
    if (x < 0x38800000u) {  // below 2^-14: a float16 subnormal or zero
      const float sum = std::bit_cast<float>(x) + 0.5f;
      return from_bits(static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(sum) - 0x3f000000u)));
    }
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // exponent bias 127 → 15 ((15 − 127) << 23) plus rounding
    return from_bits(static_cast<uint16_t>(sign | (x >> 13)));
  }
  constexpr float to_float() const {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
    // zero or subnormal: mant · 2^-24, exact in float
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign != 0 ? -mag : mag;
  }
  constexpr bool is_finite() const { return (bits & 0x7c00u) != 0x7c00u; }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

// Element type names, as the messages, the CLI and the JSON results spell them.
inline constexpr const char* type_name(const float*) { return "float32"; }
inline constexpr const char* type_name(const double*) { return "float64"; }
inline constexpr const char* type_name(const bfloat16*) { return "bfloat16"; }
inline constexpr const char* type_name(const float16*) { return "float16"; }

// x rounded to T (T = bfloat16 or float16), and back: what a value becomes when stored in T.
template <class T>
constexpr float round_to(float x) {
  return T::from_float(x).to_float();
}

}  // namespace attnlab
