#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0), for the command line.
//
// Read: float16 ('<f2', '>f2'), float32 ('<f4', '>f4'), float64 ('<f8', '>f8'), uint16
// ('<u2', '>u2': how bfloat16 is stored, NumPy having no bfloat16) and bool ('|b1'), in C
// order, either byte order (converted to this machine's). Fortran order, other dtypes,
// a truncated or corrupt file and a malformed header are each an attnlab::Error
// naming the file and the problem; nothing in a file can make the reader crash,
// over-allocate or read out of bounds.
// Write: float16, float32, float64, or bfloat16 as uint16, C order, little-endian, format 1.0.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/float16.hpp"

namespace attnlab::npy {

enum class DType { float32, float64, boolean, float16, uint16 };
const char* to_string(DType dtype);  // "float32", "float64", "bool", "float16", "uint16"

struct Array {
  DType dtype = DType::float64;
  std::vector<int64_t> shape;  // C order; empty for a 0-d array
  // Exactly one of these holds numel() values, the one matching dtype.
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<uint8_t> b8;  // 0 or 1
  std::vector<uint16_t> u16;  // float16 or uint16: the 16-bit patterns
  int64_t numel() const;
};

// Parses the bytes of a .npy file; `name` is used in error messages.
Array parse(std::span<const unsigned char> bytes, const std::string& name = "<memory>");
// Reads and parses a file. Throws attnlab::Error (unreadable, not .npy, unsupported...).
Array load(const std::string& path);

// The bytes of a .npy file holding `values` with the given C-order shape.
std::string encode(std::span<const float> values, std::span<const int64_t> shape);
std::string encode(std::span<const double> values, std::span<const int64_t> shape);
std::string encode(std::span<const float16> values, std::span<const int64_t> shape);   // '<f2'
std::string encode(std::span<const bfloat16> values, std::span<const int64_t> shape);  // '<u2', the bit patterns
// A bool array (dtype '|b1') from bytes that are 0 or 1.
std::string encode_bool(std::span<const uint8_t> values, std::span<const int64_t> shape);

template <class T>
void save(const std::string& path, std::span<const T> values, std::span<const int64_t> shape) {
  io::write_file_atomically(path, encode(values, shape));  // see atomic_files.hpp
}

}  // namespace attnlab::npy
