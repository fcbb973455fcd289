// libFuzzer target: the .npy parser on arbitrary bytes.
// Property: parse either throws attnlab::Error or returns an array whose value
// count matches its shape; a float array re-encodes and re-parses to the same values.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "attnlab/error.hpp"
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
  const size_t held = a.dtype == npy::DType::float32 ? a.f32.size()
                      : a.dtype == npy::DType::float64 ? a.f64.size()
                                                       : a.b8.size();
  if (static_cast<int64_t>(held) != n || a.numel() != n) std::abort();
  if (a.dtype == npy::DType::boolean || n == 0) return 0;
  const std::string bytes = a.dtype == npy::DType::float32 ? npy::encode(std::span<const float>(a.f32), a.shape)
                                                           : npy::encode(std::span<const double>(a.f64), a.shape);
  const auto b = npy::parse(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(bytes.data()),
                                                           bytes.size()));
  if (b.shape != a.shape || b.dtype != a.dtype) std::abort();
  // Compare bit patterns: NaN payloads must survive too.
  const bool same = a.dtype == npy::DType::float32
                        ? std::memcmp(a.f32.data(), b.f32.data(), a.f32.size() * sizeof(float)) == 0
                        : std::memcmp(a.f64.data(), b.f64.data(), a.f64.size() * sizeof(double)) == 0;
  if (!same) std::abort();
  return 0;
}
