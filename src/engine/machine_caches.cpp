// The last-level cache from sysfs, CPUID or sysconf, bounded by what the process's cores
// can plausibly have (machine_caches.hpp).
#include "engine/machine_caches.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace attnlab::engine::machine {

int64_t sysfs_largest_cache(const std::filesystem::path& dir) {
  int64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    std::ifstream f(dir / ("index" + std::to_string(index)) / "size");
    std::string size;
    if (!(f >> size) || size.empty()) continue;
    int64_t n = 0;
    size_t pos = 0;
    while (pos < size.size() && size[pos] >= '0' && size[pos] <= '9' && n < (int64_t{1} << 40))
      n = n * 10 + (size[pos++] - '0');
    if (pos < size.size() && size[pos] == 'K') n <<= 10;
    if (pos < size.size() && size[pos] == 'M') n <<= 20;
    best = std::max(best, n);
  }
  return best;
}

LastLevelCache cpuid_largest_cache(const Cpuid& cpuid) {
  LastLevelCache found;
  if (!cpuid) return found;
  const auto vendor = cpuid(0, 0);
  const uint32_t max_basic = vendor[0];
  // "AuthenticAMD" and "HygonGenuine" keep their caches in 0x8000001D (leaf 4 is reserved there).
  const bool amd = (vendor[1] == 0x68747541 && vendor[3] == 0x69746e65 && vendor[2] == 0x444d4163) ||
                   (vendor[1] == 0x6f677948 && vendor[3] == 0x6e65476e && vendor[2] == 0x656e6975);
  uint32_t leaf = 4;
  if (amd) {
    const uint32_t max_extended = cpuid(0x80000000, 0)[0];
    const bool topology_extensions = max_extended >= 0x80000001 && (cpuid(0x80000001, 0)[2] >> 22 & 1) != 0;
    if (max_extended < 0x8000001D || !topology_extensions) return found;
    leaf = 0x8000001D;
  } else if (max_basic < 4) {
    return found;
  }
  int best_level = 0;
  for (uint32_t sub = 0; sub < 16; ++sub) {
    const auto r = cpuid(leaf, sub);
    const uint32_t type = r[0] & 0x1f, level = r[0] >> 5 & 0x7;
    if (type == 0) break;  // no more caches
    if (type == 2) continue;  // instructions only
    const int64_t ways = (r[1] >> 22 & 0x3ff) + 1, partitions = (r[1] >> 12 & 0x3ff) + 1, line = (r[1] & 0xfff) + 1,
                  sets = static_cast<int64_t>(r[2]) + 1;
    const int64_t bytes = ways * partitions * line * sets;
    if (static_cast<int>(level) > best_level || (static_cast<int>(level) == best_level && bytes > found.bytes)) {
      best_level = static_cast<int>(level);
      found.bytes = bytes;
    }
  }
  if (found.bytes > 0) found.source = amd ? "cpuid leaf 0x8000001d" : "cpuid leaf 4";
  found.reported = found.bytes;
  return found;
}

LastLevelCache find_last_level_cache(const CacheSources& s) {
  LastLevelCache c;
  if (const int64_t sysfs = sysfs_largest_cache(s.sysfs_cache_dir); sysfs > 0) {
    c.bytes = sysfs, c.source = "sysfs";
  } else if (const LastLevelCache cpu = cpuid_largest_cache(s.cpuid); cpu.bytes > 0) {
    c = cpu;
  } else if (s.sysconf_bytes > 0) {
    c.bytes = s.sysconf_bytes, c.source = "sysconf";
  }
  c.reported = c.bytes;
  c.bytes = std::min(c.bytes, std::max(1, s.cores) * kMaxCacheBytesPerCore);
  return c;
}

CacheSources this_machine() {
  CacheSources s;
#if defined(__x86_64__) || defined(__i386__)
  s.cpuid = [](uint32_t leaf, uint32_t subleaf) {
    std::array<uint32_t, 4> r{};
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
    return r;
  };
#endif
#ifdef _SC_LEVEL3_CACHE_SIZE
  s.sysconf_bytes = std::max<long>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  cpu_set_t set;
  CPU_ZERO(&set);
  s.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return s;
}

}  // namespace attnlab::engine::machine
