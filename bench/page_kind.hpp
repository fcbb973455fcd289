#pragma once
// Which pages a buffer sits in, for the benches' reports: a KV cache in 2 MiB transparent
// huge pages decodes faster than the same cache in 4 KiB pages (docs/engine.md, "What
// a step reaches"), so a decode figure means little without saying which it was read from. Linux
// only (/proc/self/smaps, /sys/kernel/mm/transparent_hugepage); elsewhere "unknown".
#include <cstddef>
#include <string>
#include <string_view>

namespace attnlab::bench {

// The kernel's transparent-huge-page mode, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or "never"), or ""
// when it cannot be read.
std::string transparent_huge_pages_mode();

// The fraction of [p, p + bytes) backed by huge pages, from the text of a
// /proc/<pid>/smaps: each mapping that overlaps the range contributes its
// AnonHugePages in proportion to the overlap (smaps counts per mapping, and one mapping
// may hold several buffers). −1 when the text has no mapping that overlaps it.
double huge_page_fraction_in(std::string_view smaps, const void* p, size_t bytes);

// The same for this process's memory now (−1 when /proc/self/smaps cannot be read).
double huge_page_fraction(const void* p, size_t bytes);

// "4 KiB pages", "2 MiB pages", "2 MiB pages (x %, the rest 4 KiB)" or "pages
// unknown": for a report's header.
std::string describe_pages(const void* p, size_t bytes);

// The pages of a K and a V buffer of `bytes` each: describe_pages once when they agree,
// else "K: …, V: …".
std::string describe_kv_pages(const void* k, const void* v, size_t bytes);

// A buffer of n elements of E, mapped for itself on a 2 MiB boundary and advised into
// 2 MiB pages (huge) or kept out of them (not huge), whatever the kernel's default: the
// two page kinds side by side in one process. Zero-filled; the pages are placed when
// first written, by the writing thread. Throws std::bad_alloc if it cannot be mapped.
class MappedBuffer {
 public:
  MappedBuffer(size_t bytes, bool huge);
  ~MappedBuffer();
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* base_ = nullptr;  // the mapping, which may start before data_
  size_t mapped_ = 0;
  void* data_ = nullptr;
};

}  // namespace attnlab::bench
