// The engine's cache of working buffers (scratch_cache.hpp says why it exists).
#include "engine/scratch_cache.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "hwy/aligned_allocator.h"

#ifdef ATTNLAB_ASAN
#include <sanitizer/asan_interface.h>
#define ATTNLAB_POISON(p, n) __asan_poison_memory_region((p), (n))
#define ATTNLAB_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define ATTNLAB_POISON(p, n) ((void)(p), (void)(n))
#define ATTNLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace attnlab::engine {
namespace {

// Cached blocks beyond this count are freed on return, whatever their bytes: the
// search is linear, and a call uses a dozen blocks per thread at most.
constexpr size_t kMaxCachedBlocks = 64;

// Each acquisition starts at the next of 16 offsets into its block, 256 bytes apart
// (kSlack more bytes are allocated for them), so that the buffers a call uses side by
// side meet each other at a different distance modulo 4 KiB from call to call, as
// fresh allocations did, instead of at one distance frozen by the first call, which
// measured slower (docs/engine.md, "Constants of the tiled path").
constexpr size_t kOffsets = 16, kOffsetStep = 256, kSlack = (kOffsets - 1) * kOffsetStep;

size_t next_offset() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kOffsets * kOffsetStep;
}

struct Cache {
  std::mutex mutex;
  std::vector<ScratchBlock> blocks;  // free blocks, any order; room for all, reserved: release never allocates
  size_t bytes = 0;                  // their capacities' sum
  Cache() { blocks.reserve(kMaxCachedBlocks); }
};

// Never destroyed: a block may come back from a thread that outlives static
// destruction (an OpenMP worker at exit). The blocks stay reachable from here, so
// LeakSanitizer does not count them.
Cache& cache() {
  static Cache* const c = new Cache;
  return *c;
}

// The smallest cached block that holds `bytes` and is at most twice that, taken out
// of the cache; {} if none.
ScratchBlock take_cached(size_t bytes) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  auto best = c.blocks.end();
  for (auto it = c.blocks.begin(); it != c.blocks.end(); ++it)
    if (it->capacity >= bytes && it->capacity / 2 <= bytes && (best == c.blocks.end() || it->capacity < best->capacity))
      best = it;
  if (best == c.blocks.end()) return {};
  const ScratchBlock b = *best;
  *best = c.blocks.back();
  c.blocks.pop_back();
  c.bytes -= b.capacity;
  return b;
}

}  // namespace

ScratchBlock acquire_scratch(size_t bytes) noexcept {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes > SIZE_MAX / 2) return {};  // no such memory; and bytes + kSlack must not wrap
  ScratchBlock b = take_cached(bytes);
  if (b.base == nullptr) {
    b.base = hwy::AllocateAlignedBytes(bytes + kSlack, nullptr, nullptr);
    if (b.base == nullptr) {
      empty_scratch_cache();
      b.base = hwy::AllocateAlignedBytes(bytes + kSlack, nullptr, nullptr);
    }
    if (b.base == nullptr) return {};
    b.capacity = bytes;
  }
  ATTNLAB_UNPOISON(b.base, b.capacity + kSlack);
  b.data = static_cast<char*>(b.base) + next_offset();
  return b;
}

void release_scratch(const ScratchBlock& block) noexcept {
  if (block.base == nullptr) return;
  {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    if (c.blocks.size() < kMaxCachedBlocks && c.bytes + block.capacity <= kScratchCacheBytes) {
      ATTNLAB_POISON(block.base, block.capacity + kSlack);
      c.blocks.push_back({nullptr, block.base, block.capacity});
      c.bytes += block.capacity;
      return;
    }
  }
  hwy::FreeAlignedBytes(block.base, nullptr, nullptr);
}

void scribble_scratch_cache(unsigned char byte) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (const ScratchBlock& b : c.blocks) {
    ATTNLAB_UNPOISON(b.base, b.capacity + kSlack);
    std::memset(b.base, byte, b.capacity + kSlack);
    ATTNLAB_POISON(b.base, b.capacity + kSlack);
  }
}

ScratchCacheStats scratch_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return {c.blocks.size(), c.bytes};
}

void empty_scratch_cache() noexcept {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (const ScratchBlock& b : c.blocks) {
    ATTNLAB_UNPOISON(b.base, b.capacity + kSlack);
    hwy::FreeAlignedBytes(b.base, nullptr, nullptr);
  }
  c.blocks.clear();
  c.bytes = 0;
}

}  // namespace attnlab::engine
