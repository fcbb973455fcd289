#pragma once
// The engine's working buffers, kept between calls (one cache for the process).
//
// Every call allocates its per-thread scratch (tiles of S, O, packed rows) and, on the
// decode path, the split-KV partials, and frees them when it returns. glibc gives
// freed memory back to the kernel as soon as the top of a heap passes 128 KB
// (M_TRIM_THRESHOLD: brk or madvise, each a TLB shootdown across the cores) and maps
// blocks over 128 KB afresh (page faults on first touch), so every call paid the
// system for memory it had just had (most of a short decoding step's time, where both
// are slow). The cache keeps the freed blocks
// for the next call instead, up to kScratchCacheBytes in all; a block returned when the
// cache is full is freed. release_cached_memory() (attnlab/engine.hpp) empties it.
// The measurements: docs/engine.md, "Constants of the tiled path".
//
// A block is Highway's aligned allocation (AllocateAlignedBytes, HWY_ALIGNMENT), reused
// for any request it holds that is at least half its size, so that a small request does
// not take a large block from the call that needs it. Each acquisition hands it out at
// the next of 16 offsets 256 bytes apart (scratch_cache.cpp says why). Under
// AddressSanitizer a cached block is poisoned: a use after release is still reported.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/address_sanitizer.hpp"  // ATTNLAB_ASAN: cached blocks are poisoned

namespace attnlab::engine {

inline constexpr size_t kScratchCacheBytes = size_t{32} << 20;

// A block of at least `bytes`, aligned to HWY_ALIGNMENT: a cached one, else a new one
// (if that fails, the cache is emptied and the allocation tried again); data is nullptr
// when the memory is not there. capacity is what the block holds (≥ bytes).
struct ScratchBlock {
  void* data = nullptr;   // what the caller uses: base + this acquisition's offset
  void* base = nullptr;   // the allocation
  size_t capacity = 0;    // bytes usable from data
};
ScratchBlock acquire_scratch(size_t bytes) noexcept;

// Gives a block of acquire_scratch back: to the cache, or freed if the cache is full.
void release_scratch(const ScratchBlock& block) noexcept;

// The blocks the cache holds and their bytes (for the tests).
struct ScratchCacheStats {
  size_t blocks = 0, bytes = 0;
};
ScratchCacheStats scratch_cache_stats();

// Frees every cached block (release_cached_memory in the public API).
void empty_scratch_cache() noexcept;

// Test hook: writes `byte` over every cached block, so that a test can show that what a
// reused buffer held never reaches a result.
void scribble_scratch_cache(unsigned char byte);

// A buffer of T from the cache, given back when it goes out of scope.
struct ScratchRelease {
  ScratchBlock block;
  void operator()(void*) const noexcept { release_scratch(block); }
};
template <class T>
using ScratchBuffer = std::unique_ptr<T[], ScratchRelease>;

// count elements of T (null when out of memory, or when count·sizeof(T) overflows).
template <class T>
ScratchBuffer<T> acquire_scratch_of(size_t count) noexcept {
  if (count > SIZE_MAX / sizeof(T)) return ScratchBuffer<T>(nullptr, ScratchRelease{});
  const ScratchBlock b = acquire_scratch(count * sizeof(T));
  return ScratchBuffer<T>(static_cast<T*>(b.data), ScratchRelease{b});
}

}  // namespace attnlab::engine
