#include "page_kind.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

namespace attnlab::bench {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "";
  const size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close != std::string::npos && close > open ? line.substr(open + 1, close - open - 1)
                                                                                  : "";
}

double huge_page_fraction_in(std::string_view smaps, const void* p, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  double huge = 0, covered = 0;
  uintptr_t lo = 0, hi = 0;  // the current mapping, [lo, hi)
  size_t at = 0;
  while (at < smaps.size()) {
    size_t eol = smaps.find('\n', at);
    if (eol == std::string_view::npos) eol = smaps.size();
    const std::string line(smaps.substr(at, eol - at));
    at = eol + 1;
    // A mapping's header: "start-end perms offset dev inode [path]", hexadecimal bounds.
    char* dash = nullptr;
    const unsigned long long start = std::strtoull(line.c_str(), &dash, 16);
    if (dash != line.c_str() && *dash == '-') {
      char* space = nullptr;
      const unsigned long long stop = std::strtoull(dash + 1, &space, 16);
      if (space != dash + 1 && *space == ' ') {
        lo = static_cast<uintptr_t>(start), hi = static_cast<uintptr_t>(stop);
        continue;
      }
    }
    if (line.rfind("AnonHugePages:", 0) != 0 || hi <= lo) continue;
    const uintptr_t overlap_lo = std::max(lo, begin), overlap_hi = std::min(hi, end);
    if (overlap_hi <= overlap_lo) continue;
    const double overlap = static_cast<double>(overlap_hi - overlap_lo);
    const double kib = std::strtod(line.c_str() + 14, nullptr);
    huge += std::min(overlap, kib * 1024.0 * overlap / static_cast<double>(hi - lo));
    covered += overlap;
  }
  return covered > 0 ? huge / static_cast<double>(bytes) : -1.0;
}

double huge_page_fraction(const void* p, size_t bytes) {
  std::ifstream f("/proc/self/smaps");
  if (!f) return -1.0;
  std::ostringstream text;
  text << f.rdbuf();
  return huge_page_fraction_in(text.str(), p, bytes);
}

std::string describe_pages(const void* p, size_t bytes) {
  const double f = huge_page_fraction(p, bytes);
  if (f < 0) return "pages unknown";
  if (f < 0.005) return "4 KiB pages";
  if (f > 0.995) return "2 MiB pages";
  return "2 MiB pages (" + std::to_string(static_cast<int>(100 * f + 0.5)) + " %, the rest 4 KiB)";
}

std::string describe_kv_pages(const void* k, const void* v, size_t bytes) {
  const std::string pk = describe_pages(k, bytes), pv = describe_pages(v, bytes);
  return pk == pv ? pk : "K: " + pk + ", V: " + pv;
}

MappedBuffer::MappedBuffer(size_t bytes, bool huge) {
  // One huge page more than asked, so that data_ can start on a 2 MiB boundary.
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  mapped_ = rounded + kHugePage;
  base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    throw std::bad_alloc();
  }
  const auto aligned = (reinterpret_cast<uintptr_t>(base_) + kHugePage - 1) / kHugePage * kHugePage;
  data_ = reinterpret_cast<void*>(aligned);
  // Advice only: a kernel without transparent huge pages refuses it, and the buffer
  // stays in 4 KiB pages (describe_pages says so).
  madvise(data_, rounded, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

MappedBuffer::~MappedBuffer() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

}  // namespace attnlab::bench
