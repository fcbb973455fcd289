// The .npy reader and writer: round trips, both byte orders, and every kind of bad
// file (corrupt, truncated, Fortran order, other dtypes) as an Error, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/npy.hpp"

namespace {

using attnlab::Error;
namespace npy = attnlab::npy;
using attnlab::bfloat16;
using attnlab::float16;

std::vector<unsigned char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// A version 1.0 file with the given header dict and raw data bytes.
std::string file_with(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string f = "\x93NUMPY\x01";
  f += '\0';
  f += static_cast<char>(header.size() & 0xff);
  f += static_cast<char>(header.size() >> 8);
  return f + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v, bool big_endian = false) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  if (big_endian)
    for (size_t i = 0; i < s.size(); i += sizeof(T))
      for (size_t j = 0; j < sizeof(T) / 2; ++j) std::swap(s[i + j], s[i + sizeof(T) - 1 - j]);
  return s;
}

void expect_error(const std::string& file, const std::string& fragment) {
  try {
    npy::parse(bytes_of(file), "x.npy");
    FAIL() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("x.npy: ", 0), 0u) << e.what();
  }
}

TEST(Npy, RoundTripsFloat32AndFloat64) {
  const std::vector<float> f{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -1e30f};
  const std::vector<int64_t> shape{2, 3};
  const auto a = npy::parse(bytes_of(npy::encode(std::span<const float>(f), shape)));
  EXPECT_EQ(a.dtype, npy::DType::float32);
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.f32, f);
  const std::vector<double> d{3.0, -4.5, 1e300};
  const std::vector<int64_t> shape1{3};
  const std::string enc = npy::encode(std::span<const double>(d), shape1);
  EXPECT_NE(enc.find("'shape': (3,)"), std::string::npos);  // a 1-tuple, as Python writes it
  EXPECT_EQ((enc.find('\n') + 1) % 64, 0u);                   // data 64-byte aligned, as NumPy does
  EXPECT_EQ(npy::parse(bytes_of(enc)).f64, d);
  const std::vector<double> scalar{7.0};
  const auto s = npy::parse(bytes_of(npy::encode(std::span<const double>(scalar), std::vector<int64_t>{})));
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.f64, scalar);
}

TEST(Npy, ReadsBigEndianAndBool) {
  const std::vector<double> d{1.0, -2.5, 1e-300};
  const auto a = npy::parse(bytes_of(file_with("{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }",
                                               raw(d, /*big_endian=*/true))));
  EXPECT_EQ(a.f64, d);
  const std::vector<float> f{0.5f, 3.0f};
  const auto b = npy::parse(bytes_of(file_with("{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2)}",
                                               raw(f, true))));
  EXPECT_EQ(b.f32, f);
  const auto c = npy::parse(bytes_of(file_with("{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (2, 2)}",
                                               std::string("\x01\x00\x00\x05", 4))));
  EXPECT_EQ(c.dtype, npy::DType::boolean);
  EXPECT_EQ(c.b8, (std::vector<uint8_t>{1, 0, 0, 1}));
}

TEST(Npy, ReadsAndWritesFloat16AndBFloat16AsUint16) {
  // float16 '<f2' and uint16 '<u2' (bfloat16's storage): the 16-bit patterns, either byte order.
  const std::vector<uint16_t> bits{0x3c00, 0xc500, 0x7bff, 0x0001};  // 1, -5, 65504, 2^-24 as float16
  const auto a = npy::parse(bytes_of(file_with("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }",
                                               raw(bits))));
  EXPECT_EQ(a.dtype, npy::DType::float16);
  EXPECT_EQ(a.u16, bits);
  const auto b = npy::parse(bytes_of(file_with("{'descr': '>u2', 'fortran_order': False, 'shape': (4,), }",
                                               raw(bits, /*big_endian=*/true))));
  EXPECT_EQ(b.dtype, npy::DType::uint16);
  EXPECT_EQ(b.u16, bits);
  std::vector<float16> h;
  std::vector<bfloat16> bf;
  for (uint16_t x : bits) h.push_back(float16::from_bits(x)), bf.push_back(bfloat16::from_bits(x));
  const std::vector<int64_t> shape{4};
  const std::string eh = npy::encode(std::span<const float16>(h), shape), eb = npy::encode(std::span<const bfloat16>(bf), shape);
  EXPECT_NE(eh.find("'descr': '<f2'"), std::string::npos);
  EXPECT_NE(eb.find("'descr': '<u2'"), std::string::npos);
  EXPECT_EQ(npy::parse(bytes_of(eh)).u16, bits);
  EXPECT_EQ(npy::parse(bytes_of(eb)).u16, bits);
}

TEST(Npy, ReadsVersion2Headers) {
  std::string f = file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", raw(std::vector<double>{2.0}));
  // Re-frame the same header with a 4-byte length (format 2.0).
  const size_t len = static_cast<unsigned char>(f[8]) | (static_cast<unsigned char>(f[9]) << 8);
  std::string v2 = "\x93NUMPY\x02";
  v2 += '\0';
  v2 += std::string{static_cast<char>(len & 0xff), static_cast<char>(len >> 8), '\0', '\0'};
  v2 += f.substr(10);
  EXPECT_EQ(npy::parse(bytes_of(v2)).f64, std::vector<double>{2.0});
}

TEST(Npy, RejectsFortranOrderAndOtherDtypes) {
  const std::string two_doubles = raw(std::vector<double>{1, 2});
  expect_error(file_with("{'descr': '<f8', 'fortran_order': True, 'shape': (2,), }", two_doubles), "Fortran-order");
  expect_error(file_with("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", two_doubles),
               "dtype '<i8' is not supported");
  expect_error(file_with("{'descr': '<i2', 'fortran_order': False, 'shape': (8,), }", two_doubles),
               "dtype '<i2' is not supported");
  expect_error(file_with("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", two_doubles),
               "dtype '<c16' is not supported");
  expect_error(file_with("{'descr': '|u1', 'fortran_order': False, 'shape': (16,), }", two_doubles),
               "dtype '|u1' is not supported");
  expect_error(file_with("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }", two_doubles),
               "structured dtypes");
}

TEST(Npy, RejectsTruncatedFiles) {
  const std::string good = file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }",
                                     raw(std::vector<double>{1, 2, 3, 4}));
  expect_error(good.substr(0, good.size() - 1), "truncated .npy file (32 data bytes for shape (2, 2), 31 present)");
  expect_error(good.substr(0, 40), "truncated .npy file (header of");
  // Its magic and version alone, or less: truncated where it stops, never "not a .npy file".
  expect_error(good.substr(0, 8), "truncated .npy file (in the header length)");
  expect_error(good.substr(0, 7), "truncated .npy file (in the format version)");
  expect_error(good.substr(0, 3), "not a .npy file (too short)");
  expect_error("PK\x03\x04", "not a .npy file (no \\x93NUMPY magic)");
  expect_error("", "not a .npy file (too short)");
  expect_error(good + "junk", "4 bytes after the data");
  // Every prefix is an error (never a crash or an out-of-bounds read under ASan).
  for (size_t n = 0; n < good.size(); ++n) EXPECT_THROW(npy::parse(bytes_of(good.substr(0, n))), Error) << n;
}

TEST(Npy, RejectsCorruptHeaders) {
  const std::string d = raw(std::vector<double>{1, 2});
  expect_error("\x93NUMPX\x01" + std::string(60, ' '), "no \\x93NUMPY magic");
  expect_error("\x93NUMPY\x07" + std::string(60, ' '), "format version 7.32 is not supported");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False}", d), "must give");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'x': 1}", d), "unknown key 'x'");
  expect_error(file_with("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", d), "twice");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,)}", d), "expected True or False");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,)}", d), "non-negative integer");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,", d), "expected");
  expect_error(file_with("{'descr': '<f8, 'fortran_order': False, 'shape': (2,)}", d), "corrupt .npy header");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,)}", d),
               "too large");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 65536)}", d),
               "impossibly large");
  expect_error(file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)} extra", d), "after the closing");
  // A header length far beyond the file, and a huge claimed header.
  std::string lying = file_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", d);
  lying[8] = '\xff';
  lying[9] = '\xff';
  expect_error(lying, "truncated .npy file (header of 65535 bytes");
  std::string huge = "\x93NUMPY\x02";
  huge += std::string("\0\xff\xff\xff\x7f", 5) + std::string(64, ' ');
  expect_error(huge, "claims");
}

TEST(Npy, RandomCorruptionNeverCrashes) {
  const std::string good = file_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                                     raw(std::vector<float>(12, 1.0f)));
  std::mt19937 gen(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string f = good;
    const int flips = 1 + trial % 4;
    for (int i = 0; i < flips; ++i) f[gen() % f.size()] = static_cast<char>(gen());
    try {
      const auto a = npy::parse(bytes_of(f));
      EXPECT_EQ(a.numel() * (a.dtype == npy::DType::float64 ? 8 : a.dtype == npy::DType::float32 ? 4 : 1),
                static_cast<int64_t>(f.size() - 10 - (static_cast<unsigned char>(f[8]) | (static_cast<unsigned char>(f[9]) << 8))));
    } catch (const Error&) {
    }
  }
}

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("attnlab_npy_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(NpyFiles, SaveLoadAndNamedErrors) {
  const std::vector<float> f{1, 2, 3, 4, 5, 6};
  npy::save<float>(path("a.npy"), f, std::vector<int64_t>{1, 2, 3});
  EXPECT_EQ(npy::load(path("a.npy")).f32, f);
  EXPECT_THROW(npy::load(path("missing.npy")), Error);
  try {
    npy::load(path("missing.npy"));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.npy: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW(npy::load(dir_.string()), Error);  // a directory
  EXPECT_THROW(npy::save<float>(path("b.npy"), f, std::vector<int64_t>{4}), Error);  // shape/values mismatch
}

TEST_F(NpyFiles, FailedWriteLeavesEveryOutputUntouched) {
  const std::vector<double> old{1.0};
  npy::save<double>(path("keep.npy"), old, std::vector<int64_t>{1});
  const std::vector<double> now{2.0};
  const std::string enc = npy::encode(std::span<const double>(now), std::vector<int64_t>{1});
  EXPECT_THROW(attnlab::io::write_files_atomically({{path("keep.npy"), enc}, {path("no/such/dir/x.npy"), enc}}), Error);
  EXPECT_EQ(npy::load(path("keep.npy")).f64, old);
  std::filesystem::create_directory(path("a_dir"));
  EXPECT_THROW(attnlab::io::write_files_atomically({{path("keep.npy"), enc}, {path("a_dir"), enc}}), Error);
  EXPECT_EQ(npy::load(path("keep.npy")).f64, old);
  std::filesystem::remove(path("a_dir"));
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
  attnlab::io::write_files_atomically({{path("keep.npy"), enc}});
  EXPECT_EQ(npy::load(path("keep.npy")).f64, now);
}

}  // namespace
