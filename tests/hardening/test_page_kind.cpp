// The benches' page report (bench/page_kind.hpp): the smaps parser on text whose answer
// is known (mappings that hold the range in part, in whole, several at once, none), and
// buffers mapped out of huge pages, which the report must call 4 KiB pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "page_kind.hpp"

namespace ab = attnlab::bench;

namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

// Two mappings as the kernel prints them (other fields trimmed): 8 MiB with 4 MiB in
// huge pages, then 4 MiB with none.
const std::string kSmaps =
    "7f0000000000-7f0000800000 rw-p 00000000 00:00 0 \n"
    "Size:               8192 kB\n"
    "AnonHugePages:      4096 kB\n"
    "7f0000800000-7f0000c00000 rw-p 00000000 00:00 0                          [heap]\n"
    "Size:               4096 kB\n"
    "AnonHugePages:         0 kB\n";

}  // namespace

TEST(PageKind, SmapsFractionsFollowTheOverlap) {
  const uintptr_t first = 0x7f0000000000, second = 0x7f0000800000;
  // The whole first mapping: half its bytes are in huge pages.
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in(kSmaps, at(first), 8u << 20), 0.5);
  // A quarter of it: its share pro rata.
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in(kSmaps, at(first), 2u << 20), 0.5);
  // Both mappings: 4 MiB of 12.
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in(kSmaps, at(first), 12u << 20), 4.0 / 12.0);
  // The second alone, and a range no mapping holds.
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in(kSmaps, at(second), 1u << 20), 0.0);
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in(kSmaps, at(0x1000), 4096), -1.0);
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction_in("", at(first), 4096), -1.0);
}

TEST(PageKind, AMappingAdvisedOutOfHugePagesIsReportedAsFourKiB) {
  const size_t bytes = size_t{8} << 20;
  ab::MappedBuffer small(bytes, /*huge=*/false);
  std::memset(small.data(), 1, bytes);  // place the pages
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % (2u << 20), 0u);
  EXPECT_DOUBLE_EQ(ab::huge_page_fraction(small.data(), bytes), 0.0);
  EXPECT_EQ(ab::describe_pages(small.data(), bytes), "4 KiB pages");
}

TEST(PageKind, AMappingAdvisedIntoHugePagesGetsThemWhereTheKernelAllows) {
  const std::string mode = ab::transparent_huge_pages_mode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages: '" << mode << "'";
  const size_t bytes = size_t{8} << 20;
  ab::MappedBuffer huge(bytes, /*huge=*/true);
  std::memset(huge.data(), 1, bytes);
  const double f = ab::huge_page_fraction(huge.data(), bytes);
  // The kernel may find no free 2 MiB frames (fragmented memory); then it is not this
  // code's failure, but the report must still say what it got.
  if (f == 0.0) GTEST_SKIP() << "the kernel placed no huge page (memory fragmented?)";
  EXPECT_GT(f, 0.0);
  EXPECT_LE(f, 1.0);
  EXPECT_NE(ab::describe_pages(huge.data(), bytes), "4 KiB pages");
}
