#include "core/kv_quantize.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "attnlab/float16.hpp"

namespace attnlab::detail {

namespace {

int64_t groups(int64_t dim) { return (dim + kQuantGroup - 1) / kQuantGroup; }

// d such that `levels`·d is finite: at |x| near FLT_MAX, max/levels rounds up and the
// product would overflow on the way back; one step down costs nothing (the codes clamp).
float finite_scale(float d, float levels) {
  while (std::isinf(d * levels)) d = std::nextafter(d, 0.0f);
  return d;
}

}  // namespace

int64_t row_bytes(CacheType type, int64_t dim) {
  switch (type) {
    case CacheType::float32:
      return 4 * dim;
    case CacheType::bfloat16:
    case CacheType::float16:
      return 2 * dim;
    case CacheType::int8:
      return dim + 4 * groups(dim);
    case CacheType::int4:
      return (dim + 1) / 2 + 4 * groups(dim);
    case CacheType::fp8_e4m3:
      return dim;
  }
  return 0;
}

double type_max(CacheType type) {
  switch (type) {
    case CacheType::float16:
      return 65504.0;
    case CacheType::bfloat16:
      return 3.3895313892515355e38;
    case CacheType::fp8_e4m3:
      return 448.0;
    default:
      return FLT_MAX;
  }
}

uint8_t fp8_e4m3_from_float(float y) {
  const uint8_t sign = std::signbit(y) ? 0x80 : 0;
  const float a = std::fabs(y);
  int e = 0;
  std::frexp(a, &e);                    // a = f·2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, -6);  // the binade of a (subnormals share 2^-6's)
  const float step = std::ldexp(1.0f, exp - 3);
  const float m = std::nearbyint(a / step);  // exact quotient (a power of two), ties to even
  const float r = m * step;                  // the rounded magnitude, may step up a binade
  if (r == 0.0f) return sign;
  int er = 0;
  std::frexp(r, &er);
  if (er - 1 < -6) return static_cast<uint8_t>(sign | static_cast<int>(r / std::ldexp(1.0f, -9)));  // subnormal
  const int biased = er - 1 + 7;
  const int mant = static_cast<int>(r / std::ldexp(1.0f, er - 1 - 3)) - 8;
  return static_cast<uint8_t>(sign | (biased << 3) | mant);
}

float fp8_e4m3_to_float(uint8_t bits) {
  const int exp = (bits >> 3) & 0xf, mant = bits & 7;
  const float mag =
      exp == 0 ? std::ldexp(static_cast<float>(mant), -9) : std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return (bits & 0x80) ? -mag : mag;
}

int64_t encode_row(CacheType type, const float* x, int64_t xs, int64_t dim, float scale, std::byte* out) {
  switch (type) {
    case CacheType::float32:
      for (int64_t c = 0; c < dim; ++c) std::memcpy(out + 4 * c, &x[c * xs], 4);
      return -1;
    case CacheType::bfloat16:
    case CacheType::float16:
      for (int64_t c = 0; c < dim; ++c) {
        const uint16_t bits =
            type == CacheType::bfloat16 ? bfloat16::from_float(x[c * xs]).bits : float16::from_float(x[c * xs]).bits;
        const bool finite = type == CacheType::bfloat16 ? bfloat16{bits}.is_finite() : float16{bits}.is_finite();
        if (!finite) return c;
        std::memcpy(out + 2 * c, &bits, 2);
      }
      return -1;
    case CacheType::fp8_e4m3:
      for (int64_t c = 0; c < dim; ++c) {
        const float y = x[c * xs] / scale;
        if (!(std::fabs(y) <= 448.0f)) {
          if (!(std::fabs(y) < 464.0f)) return c;  // 448 < |y| < 464 rounds to 448: e4m3fn's max
        }
        out[c] = static_cast<std::byte>(fp8_e4m3_from_float(std::clamp(y, -448.0f, 448.0f)));
      }
      return -1;
    case CacheType::int8:
    case CacheType::int4: {
      const bool int8 = type == CacheType::int8;
      std::byte* scales = out + (int8 ? dim : (dim + 1) / 2);
      if (!int8) std::memset(out, 0, static_cast<size_t>((dim + 1) / 2));
      for (int64_t g = 0; g < groups(dim); ++g) {
        const int64_t c0 = g * kQuantGroup, c1 = std::min(dim, c0 + kQuantGroup);
        float amax = 0.0f, m = 0.0f;
        for (int64_t c = c0; c < c1; ++c)
          if (std::fabs(x[c * xs]) > amax) amax = std::fabs(x[c * xs]), m = x[c * xs];
        const float d = int8 ? finite_scale(amax / 127.0f, 127.0f) : finite_scale(-m / 8.0f, -8.0f);
        for (int64_t c = c0; c < c1; ++c) {
          const float q = d == 0.0f ? 0.0f : std::nearbyint(x[c * xs] / d);
          if (int8) {
            out[c] = static_cast<std::byte>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
          } else {
            const auto nibble = static_cast<uint8_t>(static_cast<int>(std::clamp(q, -8.0f, 7.0f)) + 8);
            out[c / 2] |= static_cast<std::byte>(c % 2 == 0 ? nibble : nibble << 4);
          }
        }
        std::memcpy(scales + 4 * g, &d, 4);
      }
      return -1;
    }
  }
  return -1;
}

void decode_row(CacheType type, const std::byte* row, int64_t dim, float scale, float* out) {
  switch (type) {
    case CacheType::float32:
      std::memcpy(out, row, static_cast<size_t>(4 * dim));
      return;
    case CacheType::bfloat16:
    case CacheType::float16:
      for (int64_t c = 0; c < dim; ++c) {
        uint16_t bits = 0;
        std::memcpy(&bits, row + 2 * c, 2);
        out[c] = type == CacheType::bfloat16 ? bfloat16{bits}.to_float() : float16{bits}.to_float();
      }
      return;
    case CacheType::fp8_e4m3:
      for (int64_t c = 0; c < dim; ++c) out[c] = fp8_e4m3_to_float(static_cast<uint8_t>(row[c])) * scale;
      return;
    case CacheType::int8:
    case CacheType::int4: {
      const bool int8 = type == CacheType::int8;
      const std::byte* scales = row + (int8 ? dim : (dim + 1) / 2);
      for (int64_t c = 0; c < dim; ++c) {
        float d = 0.0f;
        std::memcpy(&d, scales + 4 * (c / kQuantGroup), 4);
        const int q = int8 ? static_cast<int8_t>(row[c])
                           : static_cast<int>((static_cast<uint8_t>(row[c / 2]) >> (4 * (c % 2))) & 0xf) - 8;
        out[c] = static_cast<float>(q) * d;
      }
      return;
    }
  }
}

}  // namespace attnlab::detail
