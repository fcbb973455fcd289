#include <gtest/gtest.h>

#include <set>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {
namespace {

TEST(Tasks, RecallAnswersTheValueAfterTheQueriedKey) {
  TaskConfig t;
  t.n_pairs = 5;
  t.n_keys = 7;
  t.n_values = 9;
  const Batch b = make_batch(t, 200, 42);
  ASSERT_EQ(b.seq, 11);
  for (int64_t r = 0; r < b.batch; ++r) {
    const int32_t* row = b.tokens.data() + r * b.seq;
    std::set<int32_t> keys;
    int found = 0;
    for (int64_t p = 0; p < t.n_pairs; ++p) {
      ASSERT_LT(row[2 * p], t.n_keys);
      ASSERT_GE(row[2 * p + 1], t.n_keys);
      ASSERT_LT(row[2 * p + 1], t.n_keys + t.n_values);
      keys.insert(row[2 * p]);
      if (row[2 * p] == row[b.seq - 1]) {
        ++found;
        EXPECT_EQ(b.targets[static_cast<size_t>(r)], row[2 * p + 1] - t.n_keys);
      }
    }
    EXPECT_EQ(keys.size(), static_cast<size_t>(t.n_pairs)) << "keys must be distinct";
    EXPECT_EQ(found, 1);
  }
}

TEST(Tasks, CopyAnswersTheTokenAfterTheMarker) {
  TaskConfig t;
  t.kind = TaskKind::copy_after_marker;
  t.seq_len = 8;
  t.n_content = 5;
  const Batch b = make_batch(t, 200, 3);
  std::set<int64_t> positions;
  for (int64_t r = 0; r < b.batch; ++r) {
    const int32_t* row = b.tokens.data() + r * b.seq;
    EXPECT_EQ(row[b.seq - 1], t.n_content + 1);
    int markers = 0;
    for (int64_t i = 0; i + 1 < b.seq; ++i)
      if (row[i] == t.n_content) {
        ++markers;
        positions.insert(i);
        EXPECT_EQ(b.targets[static_cast<size_t>(r)], row[i + 1]);
      }
    EXPECT_EQ(markers, 1);
  }
  EXPECT_EQ(positions.size(), static_cast<size_t>(t.seq_len - 2)) << "the marker visits every allowed position";
}

TEST(Tasks, DeterministicInTheSeed) {
  TaskConfig t;
  const Batch a = make_batch(t, 8, 5), b = make_batch(t, 8, 5), c = make_batch(t, 8, 6);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(Tasks, RejectsBadConfigs) {
  TaskConfig t;
  t.n_keys = t.n_pairs - 1;
  EXPECT_THROW(make_batch(t, 4, 1), Error);
  t = TaskConfig{};
  EXPECT_THROW(make_batch(t, 0, 1), Error);
  t.kind = TaskKind::copy_after_marker;
  t.seq_len = 2;
  EXPECT_THROW(make_batch(t, 4, 1), Error);
  EXPECT_THROW(parse_task("sorting"), Error);
  EXPECT_EQ(parse_task("copy"), TaskKind::copy_after_marker);
}

}  // namespace
}  // namespace attnlab::train
