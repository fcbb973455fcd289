// The fused decoding step's online softmax two rows at a time (decode_fused_softmax-inl.h,
// FusedSoftmaxRows) against the same rows taken one at a time (FusedSoftmaxRow): bitwise
// the same P, m, l, NaN flags and O, block after block, through every branch of the lazy
// max. The engine's tests compare the fused step with the reference within the accuracy
// rule, and its row order with its requests bit for bit, but both of those take the rows
// the same way; only this test sees a pair and a lone row side by side.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/testing/kernel_pieces.hpp"

namespace {

namespace eng = attnlab::engine::testing;

constexpr size_t kKeys = 8, kDvPad = 32;

// One way's state: m, l, the NaN flags and O of `rows` rows.
struct Rows {
  std::vector<float> m, l, o;
  std::unique_ptr<bool[]> nan;
  explicit Rows(int rows, std::mt19937& rng)
      : m(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity()),
        l(static_cast<size_t>(rows), 0.0f),
        o(static_cast<size_t>(rows) * kDvPad),
        nan(new bool[static_cast<size_t>(rows)]()) {
    std::normal_distribution<float> nd;
    for (float& x : o) x = nd(rng);
  }
};

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// The scores of one block: standard normal, and with the given odds per row a score far
// above the row's running max (the exact update with a rescale of O), a NaN, or −inf.
std::vector<float> block_scores(int rows, int block, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> u;
  std::vector<float> s(static_cast<size_t>(rows) * kKeys);
  for (float& x : s) x = nd(rng);
  for (int r = 0; r < rows; ++r) {
    float* row = s.data() + static_cast<size_t>(r) * kKeys;
    const size_t at = static_cast<size_t>(u(rng) * kKeys) % kKeys;
    const float odds = u(rng);
    if (odds < 0.15f) row[at] = 20.0f + 10.0f * static_cast<float>(block);  // the max moves
    else if (odds < 0.18f) row[at] = std::numeric_limits<float>::quiet_NaN();
    else if (odds < 0.22f) row[at] = -std::numeric_limits<float>::infinity();
  }
  return s;
}

TEST(EngineFusedSoftmax, RowsInPairsBitwiseTheRowsAlone) {
  bool pairs_taken = false;
  for (int rows = 1; rows <= 8; ++rows) {
    std::mt19937 rng(static_cast<unsigned>(100 + rows));
    std::vector<float> scale(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) scale[static_cast<size_t>(r)] = 0.05f + 0.1f * static_cast<float>(r);
    std::mt19937 o_rng(7);
    Rows pairs(rows, o_rng);
    o_rng.seed(7);
    Rows alone(rows, o_rng);
    for (int block = 0; block < 64; ++block) {
      const std::vector<float> s = block_scores(rows, block, rng);
      std::vector<float> p_pairs = s, p_alone = s;
      pairs_taken |= eng::fused_softmax_rows_piece(rows, false, p_pairs.data(), scale.data(), pairs.m.data(),
                                                   pairs.l.data(), pairs.nan.get(), pairs.o.data(), kDvPad);
      eng::fused_softmax_rows_piece(rows, true, p_alone.data(), scale.data(), alone.m.data(), alone.l.data(),
                                    alone.nan.get(), alone.o.data(), kDvPad);
      for (size_t i = 0; i < s.size(); ++i)
        ASSERT_TRUE(same_bits(p_pairs[i], p_alone[i]))
            << rows << " rows, block " << block << ", P[" << i << "] " << p_pairs[i] << " vs " << p_alone[i];
      for (int r = 0; r < rows; ++r) {
        const auto ur = static_cast<size_t>(r);
        ASSERT_TRUE(same_bits(pairs.m[ur], alone.m[ur])) << rows << " rows, block " << block << ", m of row " << r;
        ASSERT_TRUE(same_bits(pairs.l[ur], alone.l[ur])) << rows << " rows, block " << block << ", l of row " << r;
        ASSERT_EQ(pairs.nan[ur], alone.nan[ur]) << rows << " rows, block " << block << ", NaN flag of row " << r;
      }
      for (size_t i = 0; i < pairs.o.size(); ++i)
        ASSERT_TRUE(same_bits(pairs.o[i], alone.o[i])) << rows << " rows, block " << block << ", O[" << i << "]";
    }
  }
  // On AVX-512 the rows from kFusedSoftmaxPairsMinRows were taken in pairs: the
  // comparison above compared two ways, not one way with itself.
  if (std::string(eng::pieces_target_name()).find("AVX3") != std::string::npos) EXPECT_TRUE(pairs_taken);
}

}  // namespace
