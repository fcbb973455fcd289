// `attnlab bench`'s read bound (bench/peak_memory.hpp, read_once): every float of both
// buffers is read exactly once, whatever the count, the thread count and the reader (one
// or two streams, with or without multiply-adds), so the bound times the bytes it claims. The counts cover the slices' edges (fewer floats than
// threads × one cache line, a remainder after whole lines) and the buffers start off a
// vector boundary, as a std::vector's large allocation does (16 bytes past a page).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "peak_memory.hpp"

namespace ab = attnlab::bench;

TEST(ReadOnce, SumsEveryFloatOfBothBuffersOnce) {
  int readers = 0;
  const ab::Reader* reader = ab::probe_readers(&readers);
  ASSERT_GE(readers, 2);
  for (int ri = 0; ri < readers; ++ri)
  for (int threads : {1, 2, 3})
    for (int64_t count : {0, 1, 15, 16, 17, 47, 48, 127, 128, 129, 1000, 4099, 70001}) {
      // a: ones, b: twos, each one float past an aligned start; guards past the end
      // that would change the sum if read.
      std::vector<float> a(static_cast<size_t>(count) + 64, 1000.0f), b(static_cast<size_t>(count) + 64, 1000.0f);
      std::fill(a.begin() + 1, a.begin() + 1 + count, 1.0f);
      std::fill(b.begin() + 1, b.begin() + 1 + count, 2.0f);
      EXPECT_EQ(ab::read_once(a.data() + 1, b.data() + 1, count, threads, reader[ri]), 3.0f * static_cast<float>(count))
          << count << " floats, " << threads << " threads, " << reader[ri].name();
    }
}
