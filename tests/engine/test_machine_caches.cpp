// The last-level cache the engine plans with, on fake machines (engine/machine_caches.hpp):
// sysfs first; where a virtual machine has no cpu0/cache directory, the CPU's own cache
// description (CPUID leaf 4 on Intel, 0x8000001D on AMD); then sysconf; and never more than
// 48 MiB per core the process may run on, whatever a guest's sysconf says of its host.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "attnlab/engine.hpp"
#include "engine/machine_caches.hpp"
#include "engine/decode_strategy.hpp"
#include "engine/plan.hpp"

namespace fs = std::filesystem;
using attnlab::engine::machine::CacheSources;
using attnlab::engine::machine::Cpuid;
using attnlab::engine::machine::find_last_level_cache;
using attnlab::engine::machine::kMaxCacheBytesPerCore;

namespace {

// A fake sysfs cache directory holding index*/size with these sizes.
fs::path fake_sysfs(const std::string& name, const std::vector<std::string>& sizes) {
  const fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (size_t i = 0; i < sizes.size(); ++i) {
    fs::create_directories(dir / ("index" + std::to_string(i)));
    std::ofstream(dir / ("index" + std::to_string(i)) / "size") << sizes[i] << "\n";
  }
  return dir;
}

// CPUID leaf 4 / 0x8000001D's words for one cache: type (1 data, 2 instructions, 3 unified),
// level, ways, line bytes, sets (one partition).
std::array<uint32_t, 4> cache_leaf(uint32_t type, uint32_t level, uint32_t ways, uint32_t line, uint32_t sets) {
  return {type | level << 5, (ways - 1) << 22 | (line - 1), sets - 1, 0};
}

// A Zen 5 guest's CPUID: "AuthenticAMD", topology extensions, L1d 48K, L1i 32K, L2 1M, L3 32M.
Cpuid amd_guest() {
  return [](uint32_t leaf, uint32_t sub) -> std::array<uint32_t, 4> {
    if (leaf == 0) return {0x10, 0x68747541, 0x444d4163, 0x69746e65};
    if (leaf == 0x80000000) return {0x80000021, 0, 0, 0};
    if (leaf == 0x80000001) return {0, 0, 1u << 22, 0};
    if (leaf == 0x8000001D) {
      static const std::array<uint32_t, 4> caches[] = {cache_leaf(1, 1, 12, 64, 64), cache_leaf(2, 1, 8, 64, 64),
                                                       cache_leaf(3, 2, 16, 64, 1024), cache_leaf(3, 3, 16, 64, 32768)};
      return sub < 4 ? caches[sub] : std::array<uint32_t, 4>{};
    }
    return {};
  };
}

// An Intel CPU's leaf 4: L1d 48K, L2 2M, L3 36M ("GenuineIntel").
Cpuid intel() {
  return [](uint32_t leaf, uint32_t sub) -> std::array<uint32_t, 4> {
    if (leaf == 0) return {0x20, 0x756e6547, 0x6c65746e, 0x49656e69};
    if (leaf == 4) {
      static const std::array<uint32_t, 4> caches[] = {cache_leaf(1, 1, 12, 64, 64), cache_leaf(3, 2, 16, 64, 2048),
                                                       cache_leaf(3, 3, 12, 64, 49152)};
      return sub < 3 ? caches[sub] : std::array<uint32_t, 4>{};
    }
    return {};
  };
}

}  // namespace

TEST(MachineCaches, SysfsFirst) {
  CacheSources s;
  s.sysfs_cache_dir = fake_sysfs("sysfs", {"32K", "32K", "1024K", "32768K"});
  s.cpuid = amd_guest(), s.sysconf_bytes = int64_t{320} << 20, s.cores = 2;
  const auto c = find_last_level_cache(s);
  EXPECT_EQ(c.bytes, int64_t{32} << 20);
  EXPECT_EQ(c.source, "sysfs");
  fs::remove_all(s.sysfs_cache_dir);
}

// The virtual machines the project runs on: no cpu0/cache directory, a sysconf figure of the
// host's whole L3 (508 MiB on a 2-vCPU guest). The CPU says 32 MiB; without CPUID, the bound.
TEST(MachineCaches, WithoutSysfsTheCpuSaysWhatACoreShares) {
  CacheSources s;
  s.sysfs_cache_dir = fake_sysfs("no-sysfs", {});
  s.sysconf_bytes = int64_t{508} << 20, s.cores = 2;
  s.cpuid = amd_guest();
  auto c = find_last_level_cache(s);
  EXPECT_EQ(c.bytes, int64_t{32} << 20);
  EXPECT_EQ(c.source, "cpuid leaf 0x8000001d");
  s.cpuid = intel();
  c = find_last_level_cache(s);
  EXPECT_EQ(c.bytes, int64_t{36} << 20);
  EXPECT_EQ(c.source, "cpuid leaf 4");
  s.cpuid = nullptr;  // not x86: sysconf, never believed beyond 48 MiB per core
  c = find_last_level_cache(s);
  EXPECT_EQ(c.source, "sysconf");
  EXPECT_EQ(c.reported, int64_t{508} << 20);
  EXPECT_EQ(c.bytes, 2 * kMaxCacheBytesPerCore);
  s.sysconf_bytes = 0;
  EXPECT_EQ(find_last_level_cache(s).bytes, 0);  // unknown stays unknown
  fs::remove_all(s.sysfs_cache_dir);
}

TEST(MachineCaches, NoFigureBeyondWhatTheCoresCanHave) {
  CacheSources s;
  s.sysfs_cache_dir = fake_sysfs("huge-sysfs", {"48K", "2048K", "520192K"});  // a host's figure seen by a guest
  s.cores = 1;
  EXPECT_EQ(find_last_level_cache(s).bytes, kMaxCacheBytesPerCore);
  s.cores = 64;
  EXPECT_EQ(find_last_level_cache(s).bytes, int64_t{520192} << 10);
  fs::remove_all(s.sysfs_cache_dir);
}

// This machine, as the decode policy sees it (default_decode_switches reads this figure).
TEST(MachineCaches, ThisMachinesFigureIsPlausible) {
  const auto s = attnlab::engine::machine::this_machine();
  const int64_t llc = attnlab::engine::last_level_cache_bytes();
  EXPECT_LE(llc, s.cores * kMaxCacheBytesPerCore);
  EXPECT_EQ(llc, find_last_level_cache(s).bytes);
  EXPECT_EQ(attnlab::engine::default_decode_switches().beside_loads_max_kv_bytes, llc);
}
