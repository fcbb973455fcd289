// `attnlab bench`'s probes on any machine: a buffer sized by the cache stays within the memory
// the system has free (MemAvailable), and the warnings beside the table name a fraction
// above 100 % and rounds more than 2x apart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "bench_warnings.hpp"
#include "peak_memory.hpp"

namespace ab = attnlab::bench;
namespace fs = std::filesystem;

TEST(BenchProbes, BuffersStayWithinTheAvailableMemory) {
  const fs::path meminfo = fs::temp_directory_path() / ("meminfo-" + std::to_string(::getpid()));
  std::ofstream(meminfo) << "MemTotal:        8000000 kB\nMemFree:          100000 kB\nMemAvailable:    2000000 kB\n";
  EXPECT_EQ(ab::available_memory_bytes(meminfo.string()), int64_t{2000000} << 10);
  fs::remove(meminfo);
  EXPECT_EQ(ab::available_memory_bytes("/nonexistent/meminfo"), 0);
  // 16x a guest's 508 MiB "last-level cache" on a machine with 2 GB free: a quarter of it.
  EXPECT_EQ(ab::probe_bytes_within_memory(int64_t{16} * (508 << 20), int64_t{2000000} << 10), int64_t{500000} << 10);
  EXPECT_EQ(ab::probe_bytes_within_memory(int64_t{512} << 20, int64_t{64} << 30), int64_t{512} << 20);
  EXPECT_EQ(ab::probe_bytes_within_memory(int64_t{512} << 20, 0), int64_t{512} << 20);  // unknown: as asked
  // This machine: the default probe never asks for more than a quarter of what is free.
  const int64_t free_now = ab::available_memory_bytes();
  if (free_now > 0) EXPECT_LE(ab::probe_bytes_within_memory(int64_t{1} << 40), free_now / 4);
}

TEST(BenchProbes, WarningsNameTheFigureAndTheReason) {
  EXPECT_FALSE(ab::above_yardstick("attnlab f32 forward", 99.0, 100.0, "measured FMA peak", 1.0));
  EXPECT_FALSE(ab::above_yardstick("attnlab f32 forward", 500.0, 0.0, "measured FMA peak", 1.0));  // not measured
  const auto w = ab::above_yardstick("attnlab f32 forward", 116.0, 100.0, "measured FMA peak", 3.5);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("attnlab f32 forward runs at 116 % of the measured FMA peak"), std::string::npos) << *w;
  EXPECT_NE(w->find("load average 3.50"), std::string::npos) << *w;
  EXPECT_FALSE(ab::rounds_disagree("attnlab f32 forward", {10.0, 19.9, 12.0}));
  EXPECT_FALSE(ab::rounds_disagree("attnlab f32 forward", {10.0}));
  const auto r = ab::rounds_disagree("attnlab f32 forward", {10.0, 280.0, 11.0});
  ASSERT_TRUE(r);
  EXPECT_NE(r->find("3 rounds range from 10 to 280 ms (28.0x)"), std::string::npos) << *r;
}
