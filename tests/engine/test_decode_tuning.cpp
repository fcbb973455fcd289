// The decoding step's tuning (attnlab/decode_tuning.hpp): its text form and the errors of a
// bad one, the refusal of another machine's, a tuning that the decision follows (the probe
// counts how the fused tiles read) with the same bits whichever way it names, and a short
// measurement that gives a usable tuning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnlab/decode_tuning.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "engine/testing/engine_probe.hpp"

namespace al = attnlab;

namespace {

al::DecodeTuning one_cell(const std::string& reads) {
  al::DecodeTuning t;
  t.machine = al::decode_tuning_machine();
  t.cells.push_back({"float32", 1, 64, reads, 2.0, 1.5});
  return t;
}

std::string parse_error(const std::string& text) {
  try {
    al::parse_decode_tuning(text);
  } catch (const al::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(DecodeTuning, TextRoundTrips) {
  al::DecodeTuning t = one_cell("row_order");
  t.cells.push_back({"bfloat16", 8, 256, "spread", 12.25, 11.5});
  const al::DecodeTuning back = al::parse_decode_tuning(al::to_text(t));
  EXPECT_EQ(back.machine, t.machine);
  ASSERT_EQ(back.cells.size(), 2u);
  EXPECT_EQ(back.cells[1].type, "bfloat16");
  EXPECT_EQ(back.cells[1].rows, 8);
  EXPECT_EQ(back.cells[1].head_dim, 256);
  EXPECT_EQ(back.cells[1].reads, "spread");
  EXPECT_DOUBLE_EQ(back.cells[1].rule_ms, 12.25);
}

TEST(DecodeTuning, ABadTextIsRefusedNamingItsLine) {
  const std::string m = "machine x\n";
  EXPECT_NE(parse_error("").find("no machine line"), std::string::npos);
  EXPECT_NE(parse_error("float32 1 64 spread 1 1\n").find("line 1: a cell before the machine line"), std::string::npos);
  EXPECT_NE(parse_error(m + "float64 1 64 spread 1 1\n").find("line 2: type 'float64'"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 9 64 spread 1 1\n").find("line 2: rows 9"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 96 spread 1 1\n").find("line 2: head_dim 96"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 64 sideways 1 1\n").find("line 2: reads 'sideways'"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 64 spread 1\n").find("line 2: 'float32 1 64 spread 1' is not"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 64 spread 1 1 extra\n").find("line 2:"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 64 spread nan 1\n").find("line 2:"), std::string::npos);
  EXPECT_NE(parse_error(m + "float32 1 64 spread -1 1\n").find("finite and ≥ 0"), std::string::npos);
  EXPECT_NE(parse_error(m + "# c\nfloat32 1 64 spread 1 1\nfloat32 1 64 row_order 1 1\n").find("line 4: a second line"),
            std::string::npos);
  EXPECT_NE(parse_error(m + m).find("line 2: a second machine line"), std::string::npos);
}

TEST(DecodeTuning, AnotherMachinesTuningIsRefused) {
  al::DecodeTuning t = one_cell("spread");
  t.machine = "a CPU that is not this one";
  try {
    al::use_decode_tuning(t);
    FAIL() << "another machine's tuning was taken";
  } catch (const al::Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured on 'a CPU that is not this one'"), std::string::npos) << e.what();
  }
}

TEST(DecodeTuning, TheDecisionFollowsItWithTheSameBits) {
  // One float32 row per K/V head at d = 64, 8 MiB of K and V, counted as read from memory (the
  // probe's cache size 0): the rule reads in row order on AVX-512.
  auto& max_bytes = al::engine::testing::fused_beside_loads_max_kv_bytes();
  const int64_t saved = max_bytes.load();
  max_bytes = 0;
  const int64_t nk = 8192;
  al::Tensor<float> q({1, 8, 1, 64}), k({1, 8, nk, 64}), v({1, 8, nk, 64});
  uint64_t s = 7;
  for (auto* x : {&q, &k, &v})
    for (float& e : x->storage()) s = s * 6364136223846793005ULL + 1442695040888963407ULL, e = static_cast<float>(s >> 40) * 0x1p-23f - 1.0f;
  auto& counts = al::engine::testing::tile_counts();
  al::Tensor<float> first({1, 8, 1, 64}), lse({1, 8, 1, 1});
  bool have_first = false;
  for (const char* reads : {"row_order", "beside_loads", "spread"}) {
    al::use_decode_tuning(one_cell(reads));
    const int64_t fused = counts.decode_fused, beside = counts.decode_fused_beside_loads,
                  row_order = counts.decode_fused_row_order;
    al::Tensor<float> out({1, 8, 1, 64});
    al::engine::attention_forward<float>(q, k, v, {}, {out, lse}, {.threads = 2});
    if (counts.decode_fused == fused) continue;  // not fused on this target: nothing to choose
    const std::string r = reads;
    EXPECT_EQ(counts.decode_fused_beside_loads > beside, r == "beside_loads") << r;
    EXPECT_EQ(counts.decode_fused_row_order > row_order, r == "row_order") << r;
    if (have_first) EXPECT_EQ(std::memcmp(out.data(), first.data(), sizeof(float) * 8 * 64), 0) << r;
    first = out, have_first = true;
  }
  al::use_decode_rule();
  max_bytes = saved;
}

TEST(DecodeTuning, AShortMeasurementGivesAUsableTuning) {
  al::DecodeTuningOptions o;
  o.rounds = 1, o.types = {"float32"}, o.rows = {1, 4}, o.head_dims = {64};  // the default bytes: from memory
  int called = 0;
  o.on_cell = [&](const al::DecodeTuningCell&) { ++called; };
  const al::DecodeTuning t = al::measure_decode_tuning(o);
  EXPECT_EQ(static_cast<size_t>(called), t.cells.size());
  for (const al::DecodeTuningCell& c : t.cells) EXPECT_LE(c.best_ms, c.rule_ms);
  al::use_decode_tuning(al::parse_decode_tuning(al::to_text(t)));
  al::use_decode_rule();
  o.rows = {9};
  EXPECT_THROW(al::measure_decode_tuning(o), al::Error);
  o.rows = {1}, o.bytes = std::max<int64_t>(1, al::engine::last_level_cache_bytes());  // fits the cache
  EXPECT_THROW(al::measure_decode_tuning(o), al::Error);
}

// Run by ctest with ATTNLAB_DECODE_TUNING naming a file that is not a tuning: every decoding
// call is an Error naming the variable and the file.
TEST(DecodeTuningEnvironment, ABadFileIsAnErrorAtTheCall) {
  const char* path = std::getenv("ATTNLAB_DECODE_TUNING");
  if (path == nullptr) GTEST_SKIP() << "ATTNLAB_DECODE_TUNING is not set (ctest sets it)";
  al::Tensor<float> q({1, 1, 1, 64}), k({1, 1, 64, 64}), v({1, 1, 64, 64}), out({1, 1, 1, 64}), lse({1, 1, 1, 1});
  for (int i = 0; i < 2; ++i) {
    try {
      al::engine::attention_forward<float>(q, k, v, {}, {out, lse});
      FAIL() << "a decoding call ran with a bad ATTNLAB_DECODE_TUNING";
    } catch (const al::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ATTNLAB_DECODE_TUNING"), std::string::npos) << e.what();
    }
  }
}
