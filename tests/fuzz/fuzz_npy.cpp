// libFuzzer target: the .npy parser on arbitrary bytes.
// Property: parse either throws attnlab::Error or returns an array whose value
// count matches its shape; a float array (32, 64 or 16-bit) re-encodes and re-parses to the
// same bits.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/npy.hpp"

namespace npy = attnlab::npy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  npy::Array a;
  try {
    a = npy::parse(std::span<const unsigned char>(data, size), "fuzz.npy");
  } catch (const attnlab::Error&) {
    return 0;
  }
  int64_t n = 1;
  for (int64_t s : a.shape) n *= s;
  const bool sixteen = a.dtype == npy::DType::float16 || a.dtype == npy::DType::uint16;
  const size_t held = a.dtype == npy::DType::float32   ? a.f32.size()
                      : a.dtype == npy::DType::float64 ? a.f64.size()
                      : sixteen                        ? a.u16.size()
                                                       : a.b8.size();
  if (static_cast<int64_t>(held) != n || a.numel() != n) std::abort();
  if (a.dtype == npy::DType::boolean || n == 0) return 0;
  // Re-encode (16-bit arrays as float16 '<f2' or bfloat16 '<u2', the same bit patterns) and
  // re-parse: the same shape, dtype and bits (NaN payloads must survive too).
  std::string bytes;
  if (a.dtype == npy::DType::float32) {
    bytes = npy::encode(std::span<const float>(a.f32), a.shape);
  } else if (a.dtype == npy::DType::float64) {
    bytes = npy::encode(std::span<const double>(a.f64), a.shape);
  } else if (a.dtype == npy::DType::float16) {
    std::vector<attnlab::float16> v(a.u16.size());
    for (size_t i = 0; i < v.size(); ++i) v[i].bits = a.u16[i];
    bytes = npy::encode(std::span<const attnlab::float16>(v), a.shape);
  } else {
    std::vector<attnlab::bfloat16> v(a.u16.size());
    for (size_t i = 0; i < v.size(); ++i) v[i].bits = a.u16[i];
    bytes = npy::encode(std::span<const attnlab::bfloat16>(v), a.shape);
  }
  const auto b = npy::parse(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(bytes.data()),
                                                           bytes.size()));
  if (b.shape != a.shape || b.dtype != a.dtype) std::abort();
  const bool same = a.dtype == npy::DType::float32   ? std::memcmp(a.f32.data(), b.f32.data(), a.f32.size() * sizeof(float)) == 0
                    : a.dtype == npy::DType::float64 ? std::memcmp(a.f64.data(), b.f64.data(), a.f64.size() * sizeof(double)) == 0
                                                     : a.u16 == b.u16;
  if (!same) std::abort();
  return 0;
}
