#pragma once
// The last-level cache the engine plans with (attnlab::engine::last_level_cache_bytes), read
// from each source in turn, and each step testable on a fake machine:
// 1. sysfs, /sys/devices/system/cpu/cpu0/cache/index*/size: the largest of CPU 0's caches;
// 2. the CPU itself where sysfs lacks the directory (firecracker and some KVM guests):
//    CPUID leaf 4 (Intel) or 0x8000001D (AMD, with topology extensions), the deterministic
//    cache parameters, which give the cache a core shares, not the host's total;
// 3. sysconf(_SC_LEVEL3_CACHE_SIZE), which in a guest can report the host's whole L3
//    (508 MiB on a 2-vCPU Zen 5 guest).
// Whatever the source, a figure above kMaxCacheBytesPerCore for each core the process may
// run on is not believed: it is cut to that bound.
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace attnlab::engine::machine {

// The most last-level cache any x86 part gives one core: 768 MiB shared by 16 cores (AMD
// EPYC 9184X, stacked cache), 48 MiB each.
inline constexpr int64_t kMaxCacheBytesPerCore = int64_t{48} << 20;

// CPUID (leaf, subleaf) -> {eax, ebx, ecx, edx}.
using Cpuid = std::function<std::array<uint32_t, 4>(uint32_t leaf, uint32_t subleaf)>;

struct CacheSources {
  std::filesystem::path sysfs_cache_dir = "/sys/devices/system/cpu/cpu0/cache";
  Cpuid cpuid;                // empty: no CPUID (not x86)
  int64_t sysconf_bytes = 0;  // sysconf(_SC_LEVEL3_CACHE_SIZE), 0 if unknown
  int cores = 1;              // the CPUs the process may run on (sched_getaffinity)
};

struct LastLevelCache {
  int64_t bytes = 0;   // 0: unknown
  std::string source;  // "sysfs", "cpuid leaf 4", "cpuid leaf 0x8000001d", "sysconf", or "" if unknown
  int64_t reported = 0;  // what the source said, before the plausibility bound
};

// The largest cache under `dir` (index*/size, "32768K" or "32M"), 0 if none.
int64_t sysfs_largest_cache(const std::filesystem::path& dir);
// The largest data or unified cache the CPU describes (leaf 4 or 0x8000001D), 0 if none.
LastLevelCache cpuid_largest_cache(const Cpuid& cpuid);
LastLevelCache find_last_level_cache(const CacheSources& sources);

// This machine's sources: the real sysfs, CPUID on x86, sysconf, the process's CPU count.
CacheSources this_machine();

}  // namespace attnlab::engine::machine
