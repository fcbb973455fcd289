// The .npy reader and writer (attnlab/npy.hpp). The reader treats every file as
// hostile: each length is checked against the bytes actually present before it is
// used, the header is parsed by a small grammar (not evaluated), and the data size
// must equal what the shape and dtype promise.
#include "attnlab/npy.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <new>

#include "attnlab/error.hpp"

namespace attnlab::npy {
namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// NumPy's own reader refuses headers over 10000 bytes by default; allow more, but bound it.
constexpr size_t kMaxHeaderBytes = 1 << 16;
constexpr int64_t kMaxDataBytes = int64_t{1} << 46;  // 64 TiB: far above any real file, far below overflow

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(fmt::format("{}: {}", name, what));
}

// ---- the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("'descr' appears twice");
        if (peek() == '[') fail(name_, "structured dtypes are not supported (use float32, float64 or bool)");
        h.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) bad("'fortran_order' appears twice");
        h.fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) bad("'shape' appears twice");
        h.shape = tuple();
        have_shape = true;
      } else {
        bad(fmt::format("unknown key '{}'", key));
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_ws();
      if (peek() != '}') bad("expected ',' or '}'");
    }
    ++pos_;  // '}'
    skip_ws();
    if (pos_ != s_.size()) bad("text after the closing '}'");
    if (!have_descr || !have_order || !have_shape)
      bad("it must give 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(name_, fmt::format("corrupt .npy header ({}, at byte {} of the header)", what, pos_));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string");
    const size_t start = ++pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') bad("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= s_.size()) bad("unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }
  bool boolean() {
    if (s_.substr(pos_, 4) == "True") return pos_ += 4, true;
    if (s_.substr(pos_, 5) == "False") return pos_ += 5, false;
    bad("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad("expected a non-negative integer in 'shape'");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (INT64_MAX - 9) / 10) bad("a dimension in 'shape' is too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      dims.push_back(v);
      if (dims.size() > 32) bad("more than 32 dimensions");
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')' in 'shape'");
    }
    ++pos_;
    return dims;
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

struct Descr {
  DType dtype;
  size_t item;
  bool swap;  // stored in the other byte order than this machine's
};

Descr parse_descr(const std::string& d, const std::string& name) {
  const bool little_host = std::endian::native == std::endian::little;
  auto unsupported = [&] {
    fail(name, fmt::format("dtype '{}' is not supported (float16 '<f2', float32 '<f4', float64 '<f8', uint16 "
                           "'<u2' for bfloat16, either byte order, or bool '|b1')", d));
  };
  if (d.size() != 3) unsupported();
  const char order = d[0];
  const std::string code = d.substr(1);
  if (order != '<' && order != '>' && order != '=' && order != '|') unsupported();
  const bool little = order == '<' || (order == '=' && little_host);
  if (code == "b1") return {DType::boolean, 1, false};
  if (order == '|') unsupported();
  const bool swap = (order != '=') && (little != little_host);
  if (code == "f4") return {DType::float32, 4, swap};
  if (code == "f8") return {DType::float64, 8, swap};
  if (code == "f2") return {DType::float16, 2, swap};
  if (code == "u2") return {DType::uint16, 2, swap};
  unsupported();
  return {};  // unreachable
}

template <class T>
std::vector<T> decode(const unsigned char* p, int64_t n, bool swap) {
  std::vector<T> out(static_cast<size_t>(n));
  if (n == 0) return out;  // an empty vector's data() may be null: memcpy(null, …, 0) is undefined
  std::memcpy(out.data(), p, static_cast<size_t>(n) * sizeof(T));
  if (swap) {
    for (T& x : out) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, &x, sizeof(T));
      for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
      std::memcpy(&x, b, sizeof(T));
    }
  }
  return out;
}

template <class T>
std::string encode_impl(std::span<const T> values, std::span<const int64_t> shape, const char* code) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw Error(fmt::format("npy: negative dimension {} in the shape to write", s));
    if (s != 0 && n > kMaxDataBytes / s) throw Error("npy: the shape to write is too large");
    n *= s;
  }
  if (n != static_cast<int64_t>(values.size()))
    throw Error(fmt::format("npy: the shape holds {} values but {} were given", n, values.size()));
  std::string dims;
  for (int64_t s : shape) dims += fmt::format("{}, ", s);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (2, 3) but (3,)
  else if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", code, dims);
  // Pad so that the data starts on a 64-byte boundary, as NumPy does: 10 = magic + version + length.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(reinterpret_cast<const char*>(kMagic), 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  const size_t start = out.size();
  out.resize(start + values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data() + start, values.data(), values.size() * sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    for (size_t i = start; i < out.size(); i += sizeof(T))
      for (size_t j = 0; j < sizeof(T) / 2; ++j) std::swap(out[i + j], out[i + sizeof(T) - 1 - j]);
  }
  return out;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::boolean: return "bool";
    case DType::float16: return "float16";
    case DType::uint16: return "uint16";
  }
  return "?";
}

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

// What the header of a file of `total` bytes, starting with `bytes`, declares; checks that the
// data it promises is exactly what the file holds. `bytes` must hold the whole header.
struct Layout {
  Descr descr;
  std::vector<int64_t> shape;
  int64_t n = 0;
  size_t data_offset = 0;
};

Layout parse_layout(std::span<const unsigned char> bytes, size_t total, const std::string& name) {
  // The magic first, then each field in turn: a file cut anywhere is named "truncated" at
  // the field it lacks, never "not a .npy file" when its magic is there.
  const size_t magic = std::min<size_t>(bytes.size(), 6);
  if (magic > 0 && std::memcmp(bytes.data(), kMagic, magic) != 0) fail(name, "not a .npy file (no \\x93NUMPY magic)");
  if (bytes.size() < 6) fail(name, "not a .npy file (too short)");
  if (bytes.size() < 8) fail(name, "truncated .npy file (in the format version)");
  const unsigned major = bytes[6], minor = bytes[7];
  if (major == 1 && bytes.size() < 10) fail(name, "truncated .npy file (in the header length)");
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated .npy file (in the header length)");
    header_len = bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    offset = 12;
  } else {
    fail(name, fmt::format(".npy format version {}.{} is not supported (1.0, 2.0 or 3.0)", major, minor));
  }
  if (header_len > kMaxHeaderBytes) fail(name, fmt::format("corrupt .npy header (claims {} bytes)", header_len));
  if (bytes.size() - offset < header_len)
    fail(name, fmt::format("truncated .npy file (header of {} bytes, {} present)", header_len, bytes.size() - offset));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  for (char c : text)
    if (c == '\0') fail(name, "corrupt .npy header (contains a NUL byte)");
  const auto header = HeaderParser(text, name).parse();
  const Descr descr = parse_descr(header.descr, name);
  if (header.fortran_order)
    fail(name, "Fortran-order arrays are not supported (save a C-order array: np.save(f, np.ascontiguousarray(a)))");

  Layout a;
  a.descr = descr;
  a.shape = header.shape;
  int64_t n = 1;
  for (int64_t s : a.shape) {
    if (s != 0 && n > kMaxDataBytes / static_cast<int64_t>(descr.item) / s)
      fail(name, "corrupt .npy header (the shape is impossibly large)");
    n *= s;
  }
  const size_t data_bytes = static_cast<size_t>(n) * descr.item;
  const size_t present = total - offset - header_len;
  if (present < data_bytes)
    fail(name, fmt::format("truncated .npy file ({} data bytes for shape {}, {} present)", data_bytes,
                           fmt::format("({})", fmt::join(a.shape, ", ")), present));
  if (present > data_bytes)
    fail(name, fmt::format("corrupt .npy file ({} bytes after the data)", present - data_bytes));
  a.n = n;
  a.data_offset = offset + header_len;
  return a;
}

Array decode_array(const Layout& layout, const unsigned char* data) {
  Array a;
  a.dtype = layout.descr.dtype;
  a.shape = layout.shape;
  const int64_t n = layout.n;
  const bool swap = layout.descr.swap;
  switch (a.dtype) {
    case DType::float32: a.f32 = decode<float>(data, n, swap); break;
    case DType::float64: a.f64 = decode<double>(data, n, swap); break;
    case DType::float16:
    case DType::uint16: a.u16 = decode<uint16_t>(data, n, swap); break;
    case DType::boolean:
      a.b8.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) a.b8[static_cast<size_t>(i)] = data[i] != 0;
      break;
  }
  return a;
}

}  // namespace

Array parse(std::span<const unsigned char> bytes, const std::string& name) {
  const Layout layout = parse_layout(bytes, bytes.size(), name);
  return decode_array(layout, bytes.data() + layout.data_offset);
}

Array load(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) fail(path, "cannot open: " + ec.message());
  if (!std::filesystem::is_regular_file(status)) fail(path, "cannot read: not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: " + errno_text());
  // The header first, and the file's size checked against what it declares, before
  // the data is read: a huge file (sparse, or a valid header followed by gigabytes)
  // is an error naming it, not an allocation of its size.
  std::vector<unsigned char> head(static_cast<size_t>(std::min<std::uintmax_t>(size, 12 + kMaxHeaderBytes)));
  if (!head.empty() && !in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size())))
    fail(path, "cannot read: the file ended early");
  const Layout layout = parse_layout(head, static_cast<size_t>(size), path);
  const size_t data_bytes = static_cast<size_t>(size) - layout.data_offset;
  try {
    std::vector<unsigned char> data(data_bytes);
    in.seekg(static_cast<std::streamoff>(layout.data_offset));
    if (!data.empty() && !in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size())))
      fail(path, "cannot read: the file ended early");
    return decode_array(layout, data.data());
  } catch (const std::bad_alloc&) {
    fail(path, fmt::format("cannot read: out of memory for its {} bytes of data", data_bytes));
  }
}

std::string encode(std::span<const float> values, std::span<const int64_t> shape) {
  return encode_impl(values, shape, "<f4");
}
std::string encode(std::span<const double> values, std::span<const int64_t> shape) {
  return encode_impl(values, shape, "<f8");
}
std::string encode(std::span<const float16> values, std::span<const int64_t> shape) {
  return encode_impl(values, shape, "<f2");
}
std::string encode(std::span<const bfloat16> values, std::span<const int64_t> shape) {
  return encode_impl(values, shape, "<u2");
}
std::string encode_bool(std::span<const uint8_t> values, std::span<const int64_t> shape) {
  for (uint8_t v : values)
    if (v > 1) throw Error(fmt::format("npy: a bool array holds the byte {} (only 0 and 1)", v));
  return encode_impl(values, shape, "|b1");
}

}  // namespace attnlab::npy
