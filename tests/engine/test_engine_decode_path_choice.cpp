// Which forward path the engine takes for a shape (decode_path.hpp): the engine chooses it
// itself, the API has no say; and bad input on decode shapes gets the errors it got before.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "engine_path.hpp"
#include "same_bits.hpp"

namespace al = attnlab;
using al::engine::ForwardPath;

TEST(EngineDecode, TheEngineChoosesThePathFromTheShapes) {
  auto path = [](int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, bool diagnostics) {
    const al::Tensor<float> q({1, Hq, Nq, 8}, 0.5f), k({1, Hkv, Nk, 8}, 0.25f), v({1, Hkv, Nk, 8}, 1.0f);
    if (diagnostics) {
      al::Tensor<float> out(q.shape()), lse({1, Hq, Nq, 1}), pmax({1, Hq, Nq, 1});
      const al::RowDiagnostics<float> diag{pmax.view(), {}, {}};
      al::engine::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view(), diag});
    } else {
      al::detail::allocating_forward(q.view(), k.view(), v.view());
    }
    return al::test::last_forward_path();
  };
  const int64_t chunk = al::engine::kDecodeChunkMin, br = al::engine::kBr;
  EXPECT_EQ(path(8, 8, 1, chunk + 1, false), ForwardPath::decode);   // a decoding step
  EXPECT_EQ(path(32, 8, 1, 4 * chunk, false), ForwardPath::decode);  // grouped-query heads
  EXPECT_EQ(path(4, 1, br, chunk + 1, false), ForwardPath::decode);  // a chunk of new queries
  EXPECT_EQ(path(8, 8, 1, 2, false), ForwardPath::decode);           // a cache of two keys
  EXPECT_EQ(path(8, 8, 1, 1, false), ForwardPath::tiled);            // fewer than 2·Nq keys
  EXPECT_EQ(path(8, 8, 16, 31, false), ForwardPath::tiled);
  EXPECT_EQ(path(8, 8, 16, 32, false), ForwardPath::decode);
  EXPECT_EQ(path(8, 1, 16, chunk, false), ForwardPath::tiled);          // a lone item of two row blocks
  EXPECT_EQ(path(8, 1, 8, chunk, false), ForwardPath::decode);          // a lone item of one row block
  EXPECT_EQ(path(8, 1, 16, chunk + 1, false), ForwardPath::decode);     // two items
  EXPECT_EQ(path(2, 2, br + 1, 4 * chunk, false), ForwardPath::tiled);  // more than a query tile per head
  EXPECT_EQ(path(8, 8, 1, 4 * chunk, true), ForwardPath::tiled);        // diagnostics are the tiled path's
  {  // dropout is for training: the tiled path draws its mask
    const al::Tensor<float> q({1, 2, 1, 8}, 0.5f), k({1, 2, 4 * chunk, 8}, 0.25f), v({1, 2, 4 * chunk, 8}, 1.0f);
    al::AttentionOptions<float> o;
    o.dropout = {0.1, 5};
    al::detail::allocating_forward(q.view(), k.view(), v.view(), o);
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::tiled);
  }
}

TEST(EngineDecode, BadInputGetsTheSameErrors) {
  const int64_t nk = al::engine::kDecodeChunkMin * 3 + 5;
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const al::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A NaN deep in the cache, and a key length past Nk: the reference's messages.
  {
    al::Tensor<float> q({2, 4, 1, 16}, 0.5f), k({2, 2, nk, 16}, 0.25f), v({2, 2, nk, 16}, 1.0f);
    al::Tensor<double> qd({2, 4, 1, 16}, 0.5), kd({2, 2, nk, 16}, 0.25), vd({2, 2, nk, 16}, 1.0);
    k(1, 1, nk - 3, 7) = NAN;
    kd(1, 1, nk - 3, 7) = NAN;
    const std::string want = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view()); });
    EXPECT_EQ(want, "k: non-finite value nan at [1, 1, " + std::to_string(nk - 3) + ", 7]");
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view()); }), want);
    k(1, 1, nk - 3, 7) = kd(1, 1, nk - 3, 7) = 0.25f;
    al::AttentionOptions<float> of;
    al::AttentionOptions<double> od;
    const std::vector<int64_t> lengths{nk, nk + 1};
    of.key_lengths = od.key_lengths = lengths;
    const std::string want_len = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); });
    EXPECT_FALSE(want_len.empty());
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want_len);
  }
  // The decode path checks K and V while it reads them, and scans the keys no row sees:
  // a NaN or ±inf anywhere in them, used or not, gets the reference's message (and k's
  // before v's before the additive mask's, as check_forward_args orders them).
  {
    struct Bad {
      const char* what;
      bool in_k;
      int64_t key;
      float value;
      int causal;  // 0 none, 1 top-left (rows see 1 key: the rest are never read), 2 padding
    };
    const Bad cases[] = {
        {"nan in v", false, 700, NAN, 0},
        {"inf in k", true, 3, INFINITY, 0},
        {"-inf in v", false, nk - 1, -INFINITY, 0},
        {"nan in unread k", true, nk - 2, NAN, 1},
        {"inf in unread v", false, 900, INFINITY, 1},
        {"nan past the cache length", true, nk - 1, NAN, 2},
    };
    for (const Bad& c : cases) {
      SCOPED_TRACE(c.what);
      al::Tensor<float> q({2, 4, 1, 16}, 0.5f), k({2, 2, nk, 16}, 0.25f), v({2, 2, nk, 16}, 1.0f);
      al::Tensor<double> qd({2, 4, 1, 16}, 0.5), kd({2, 2, nk, 16}, 0.25), vd({2, 2, nk, 16}, 1.0);
      (c.in_k ? k : v)(1, 0, c.key, 5) = c.value;
      (c.in_k ? kd : vd)(1, 0, c.key, 5) = c.value;
      al::AttentionOptions<float> of;
      al::AttentionOptions<double> od;
      const std::vector<int64_t> lengths{nk, 100};
      if (c.causal == 1) of.causal = od.causal = al::Causal::top_left;
      if (c.causal == 2) of.key_lengths = od.key_lengths = lengths;
      const std::string want = message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); });
      EXPECT_NE(want.find(c.in_k ? "k: non-finite value" : "v: non-finite value"), std::string::npos) << want;
      const int64_t fused_before = al::engine::testing::tile_counts().decode_fused.load();
      EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want);
      EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
      // Two query heads per key/value head: without causality the tiles are the fused step's.
      if (c.causal == 0) EXPECT_GT(al::engine::testing::tile_counts().decode_fused.load(), fused_before);
      // k's or v's error comes before the additive mask's.
      al::Tensor<float> am({1, 1, 1, nk}, 0.0f);
      al::Tensor<double> amd({1, 1, 1, nk}, 0.0);
      am(0, 0, 0, 4) = INFINITY;
      amd(0, 0, 0, 4) = INFINITY;
      of.additive_mask = am.view();
      od.additive_mask = amd.view();
      EXPECT_EQ(message([&] { al::detail::allocating_forward(qd.view(), kd.view(), vd.view(), od); }), want);
      EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), of); }), want);
    }
  }
  // Scores past float's range in one chunk of one row: that row is named, as in the tiled path.
  {
    al::Tensor<float> q({1, 2, 2, 2}, 0.5f), k({1, 1, nk, 2}, 0.5f), v({1, 1, nk, 2}, 1.0f);
    q(0, 1, 1, 0) = q(0, 1, 1, 1) = 1e20f;
    k(0, 0, nk - 2, 0) = k(0, 0, nk - 2, 1) = 1e20f;  // in the last chunk
    al::AttentionOptions<float> none;
    none.scale = al::ScalePolicy::none();
    EXPECT_EQ(message([&] { al::detail::allocating_forward(q.view(), k.view(), v.view(), none); }),
              "attention: scores of row [0, 1, 1] overflow float32 (|scale·q·k| > 3.4e38); scale the inputs down or "
              "use the double-precision reference");
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
    // With the check off: NaN in that row only, the others normal.
    none.check_finite = false;
    const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), none);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        const bool bad = h == 1 && i == 1;
        EXPECT_EQ(std::isnan(f.lse(0, h, i, 0)), bad) << h << " " << i;
        EXPECT_EQ(std::isnan(f.out(0, h, i, 0)), bad) << h << " " << i;
      }
  }
  // The caller's interrupt stops the decode path too.
  {
    const al::Tensor<float> q({1, 8, 1, 64}, 0.5f), k({1, 8, nk, 64}, 0.25f), v({1, 8, nk, 64}, 1.0f);
    al::ComputeConfig cfg{2};
    cfg.interrupt = [] { return true; };
    EXPECT_THROW(al::detail::allocating_forward(q.view(), k.view(), v.view(), {}, cfg), al::Interrupted);
    EXPECT_EQ(al::test::last_forward_path(), ForwardPath::decode);
  }
}
