// Bad arguments fail with attnlab::Error whose message names the argument and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"
#include "core/attention_results.hpp"

namespace al = attnlab;
using al::Tensor;

namespace {

// Runs the forward and returns the error message ("" if it did not throw).
std::string forward_error(const Tensor<double>& q, const Tensor<double>& k, const Tensor<double>& v,
                          const al::AttentionOptions<double>& opt = {}) {
  try {
    al::detail::allocating_forward(q.view(), k.view(), v.view(), opt);
  } catch (const al::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MESSAGE(expr, text) EXPECT_EQ((expr), std::string(text))

}  // namespace

TEST(Errors, ShapeMismatchesNameTheArgument) {
  const Tensor<double> q({2, 4, 5, 64}), k({2, 2, 7, 64}), v({2, 2, 7, 16});
  EXPECT_MESSAGE(forward_error(q, Tensor<double>({2, 2, 7, 32}), v), "k: head dim 32 does not match q's 64");
  EXPECT_MESSAGE(forward_error(q, Tensor<double>({3, 2, 7, 64}), v), "k: batch 3 does not match q's 2");
  EXPECT_MESSAGE(forward_error(q, k, Tensor<double>({2, 2, 6, 16})), "v: seq 6 does not match k's 7");
  EXPECT_MESSAGE(forward_error(q, k, Tensor<double>({2, 1, 7, 16})), "v: 1 heads does not match k's 2");
  EXPECT_MESSAGE(forward_error(q, Tensor<double>({2, 3, 7, 64}), Tensor<double>({2, 3, 7, 16})),
                 "q: 4 heads is not a multiple of k's 3 key/value heads");
  EXPECT_MESSAGE(forward_error(Tensor<double>({2, 4, 0, 64}), k, v),
                 "q: empty tensor, shape [2, 4, 0, 64] (every axis must be at least 1)");
  EXPECT_MESSAGE(forward_error(q, k, v, {}), "");
}

TEST(Errors, MasksPaddingAndOutputs) {
  const Tensor<double> q({2, 4, 5, 8}), k({2, 2, 7, 8}), v({2, 2, 7, 8});
  Tensor<uint8_t> bm({1, 3, 5, 7});
  al::AttentionOptions<double> opt;
  opt.bool_mask = bm.view();
  EXPECT_MESSAGE(forward_error(q, k, v, opt),
                 "bool_mask: shape [1, 3, 5, 7] does not broadcast to [B, Hq, Nq, Nk] = [2, 4, 5, 7]");
  Tensor<double> am({2, 4, 5, 6});
  al::AttentionOptions<double> opt2;
  opt2.additive_mask = am.view();
  EXPECT_MESSAGE(forward_error(q, k, v, opt2),
                 "additive_mask: shape [2, 4, 5, 6] does not broadcast to [B, Hq, Nq, Nk] = [2, 4, 5, 7]");
  Tensor<double> am_ok({1, 1, 5, 7});
  am_ok(0, 0, 1, 2) = NAN;
  opt2.additive_mask = am_ok.view();
  EXPECT_MESSAGE(forward_error(q, k, v, opt2),
                 "additive_mask: value nan at [0, 0, 1, 2] (only finite values and -inf are allowed)");
  const std::vector<int64_t> lengths{3, 8};
  al::AttentionOptions<double> opt3;
  opt3.key_lengths = lengths;
  EXPECT_MESSAGE(forward_error(q, k, v, opt3), "key_lengths: value 8 for batch 1 is outside [0, 7]");
  const std::vector<int64_t> short_lengths{3};
  opt3.key_lengths = short_lengths;
  EXPECT_MESSAGE(forward_error(q, k, v, opt3), "key_lengths: 1 entries, expected one per batch (2)");

  Tensor<double> out({2, 4, 5, 7}), lse({2, 4, 5, 1});
  try {
    al::reference::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view()});
    FAIL();
  } catch (const al::Error& e) {
    EXPECT_MESSAGE(std::string(e.what()), "out: shape [2, 4, 5, 7] should be [2, 4, 5, 8]");
  }
}

TEST(Errors, NonFiniteInputsNameTensorAndIndexUnlessTheCheckIsOff) {
  Tensor<double> q({1, 2, 3, 4}), k({1, 1, 3, 4}), v({1, 1, 3, 4});
  k(0, 0, 2, 1) = INFINITY;
  EXPECT_MESSAGE(forward_error(q, k, v), "k: non-finite value inf at [0, 0, 2, 1]");
  k(0, 0, 2, 1) = 0;
  v(0, 0, 1, 3) = NAN;
  EXPECT_MESSAGE(forward_error(q, k, v), "v: non-finite value nan at [0, 0, 1, 3]");
  al::AttentionOptions<double> off;
  off.check_finite = false;
  EXPECT_MESSAGE(forward_error(q, k, v, off), "");  // the caller asked for no check
}

TEST(Errors, StridesNegativeOrAliasingAndOverlappingOutputs) {
  std::vector<double> buf(64, 0.0);
  const al::ConstView<double> q(buf.data(), {1, 1, 4, 4});
  const al::ConstView<double> bad(buf.data() + 60, {1, 1, 4, 4}, {16, 16, -4, 1});
  Tensor<double> out({1, 1, 4, 4}), lse({1, 1, 4, 1});
  auto run = [&](al::ConstView<double> qq, al::TensorView<double> o, al::TensorView<double> l) -> std::string {
    try {
      al::reference::attention_forward(qq, q, q, {}, {o, l});
    } catch (const al::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_MESSAGE(run(bad, out.view(), lse.view()), "q: negative stride -4 on axis 2");
  // Output rows that alias each other (seq stride 0).
  const al::TensorView<double> aliased(out.data(), {1, 1, 4, 4}, {16, 16, 0, 1});
  EXPECT_MESSAGE(run(q, aliased, lse.view()), "out: strides [16, 16, 0, 1] make distinct elements overlap");
  // Output written over an input.
  const al::TensorView<double> over_q(buf.data(), {1, 1, 4, 4});
  EXPECT_MESSAGE(run(q, over_q, lse.view()), "out: memory overlaps q");
  // Broadcast (stride-0) inputs are fine: one key row repeated.
  const al::ConstView<double> repeated(buf.data(), {1, 1, 4, 4}, {0, 0, 0, 1});
  EXPECT_MESSAGE(run(repeated, out.view(), lse.view()), "");
}

TEST(Errors, BackwardChecksGradOutAndGradientShapes) {
  Tensor<double> q({1, 2, 3, 4}), k({1, 1, 3, 4}), v({1, 1, 3, 5});
  const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view());
  Tensor<double> dout({1, 2, 3, 4});
  try {
    al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view());
    FAIL();
  } catch (const al::Error& e) {
    EXPECT_MESSAGE(std::string(e.what()), "grad_out: shape [1, 2, 3, 4] should be [1, 2, 3, 5]");
  }
  Tensor<double> dout_ok({1, 2, 3, 5});
  dout_ok(0, 1, 2, 0) = NAN;
  try {
    al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout_ok.view());
    FAIL();
  } catch (const al::Error& e) {
    EXPECT_MESSAGE(std::string(e.what()), "grad_out: non-finite value nan at [0, 1, 2, 0]");
  }
}

TEST(Errors, ScoreOverflowIsAnErrorNotNaN) {
  Tensor<double> q({1, 1, 2, 2}, 1e160), k({1, 1, 3, 2}, 1e160), v({1, 1, 3, 2}, 1.0);
  EXPECT_MESSAGE(forward_error(q, k, v),
                 "attention: score of q[0, 0, 0] and k[0, 0, 0] overflows to inf (inputs too large)");
  // Large but representable scores are exact: logits of ±1e30 are fine.
  Tensor<double> q2({1, 1, 1, 1}, 1e15), k2({1, 1, 2, 1}), v2({1, 1, 2, 1});
  k2(0, 0, 0, 0) = 1e15;
  k2(0, 0, 1, 0) = -1e15;
  v2(0, 0, 0, 0) = 3.0;
  al::AttentionOptions<double> none;
  none.scale = al::ScalePolicy::none();
  const auto f = al::detail::allocating_forward(q2.view(), k2.view(), v2.view(), none);
  EXPECT_EQ(f.out(0, 0, 0, 0), 3.0);
  EXPECT_EQ(f.lse(0, 0, 0, 0), 1e30);
}

TEST(Errors, BackwardRejectsALseThatIsNaNOrPlusInfinity) {
  Tensor<double> q({1, 1, 2, 2}, 0.5), k({1, 1, 2, 2}, 0.25), v({1, 1, 2, 2}, 1.0), dout({1, 1, 2, 2}, 1.0);
  auto f = al::detail::allocating_forward(q.view(), k.view(), v.view());
  f.lse(0, 0, 1, 0) = INFINITY;
  try {
    al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view());
    FAIL();
  } catch (const al::Error& e) {
    EXPECT_MESSAGE(std::string(e.what()),
                   "lse: value inf at [0, 0, 1, 0] (a log-sum-exp is finite, or -inf for a fully masked row)");
  }
}

TEST(Errors, BackwardRefusesAnLseOfMinusInfOnARowThatSeesAKey) {
  // −inf means "fully masked": trusted blindly it turned a visible row's gradients into
  // zeros without a word (issue 18). Both implementations share the check.
  Tensor<double> q({1, 1, 2, 4}, 0.5), k({1, 1, 3, 4}, 0.25), v({1, 1, 3, 4}, 1.0), dout({1, 1, 2, 4}, 1.0);
  std::vector<int64_t> lengths{0};  // every row fully masked by padding
  al::AttentionOptions<double> padded;
  padded.key_lengths = lengths;
  auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), padded);
  EXPECT_NO_THROW(al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view(), padded));
  f = al::detail::allocating_forward(q.view(), k.view(), v.view());
  f.lse(0, 0, 1, 0) = -INFINITY;
  const std::string want =
      "lse: -inf at [0, 0, 1, 0], but that row sees a key (-inf is only for a fully masked row; pass the "
      "forward's lse)";
  try {
    al::detail::allocating_backward(q.view(), k.view(), v.view(), f, dout.view());
    ADD_FAILURE() << "no error";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  Tensor<float> qf({1, 1, 2, 4}, 0.5f), kf({1, 1, 3, 4}, 0.25f), vf({1, 1, 3, 4}, 1.0f), dof({1, 1, 2, 4}, 1.0f);
  auto ff = al::detail::allocating_forward(qf.view(), kf.view(), vf.view());
  ff.lse(0, 0, 1, 0) = -INFINITY;
  try {
    al::detail::allocating_backward(qf.view(), kf.view(), vf.view(), ff, dof.view());
    ADD_FAILURE() << "no error from the engine";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(Errors, VariantsNameTheOptionAndTheValue) {
  const Tensor<double> q({1, 4, 5, 8}), k({1, 2, 7, 8}), v({1, 2, 7, 8});
  auto with = [&](auto&& set) {
    al::AttentionOptions<double> o;
    set(o);
    return forward_error(q, k, v, o);
  };
  EXPECT_MESSAGE(with([](auto& o) { o.window = {-2, 0}; }),
                 "window: (-2, 0) has a side below -1 (-1 means unbounded on that side)");
  EXPECT_MESSAGE(with([](auto& o) { o.window = {3, -5}; }),
                 "window: (3, -5) has a side below -1 (-1 means unbounded on that side)");
  EXPECT_MESSAGE(with([](auto& o) { o.window = {-1, 0}; }), "");
  EXPECT_MESSAGE(with([](auto& o) { o.softcap = 0.0; }),
                 "softcap: 0 must be a positive finite number (leave it empty for no softcap)");
  EXPECT_MESSAGE(with([](auto& o) { o.softcap = -3.0; }),
                 "softcap: -3 must be a positive finite number (leave it empty for no softcap)");
  EXPECT_MESSAGE(with([](auto& o) { o.softcap = NAN; }),
                 "softcap: nan must be a positive finite number (leave it empty for no softcap)");
  const std::vector<double> three{0.5, 0.25, 0.125}, four{0.5, 0.25, 0.125, 1.0}, nan4{0.5, NAN, 0, 0};
  EXPECT_MESSAGE(with([&](auto& o) { o.alibi_slopes = three; }),
                 "alibi_slopes: 3 values; expected Hq = 4 (one per query head) or 4 = 1 x 4 (per batch entry and "
                 "query head)");
  EXPECT_MESSAGE(with([&](auto& o) { o.alibi_slopes = nan4; }), "alibi_slopes: non-finite value nan at [1]");
  EXPECT_MESSAGE(with([&](auto& o) { o.alibi_slopes = four; }), "");
  EXPECT_MESSAGE(with([&](auto& o) { o.sinks = three; }), "sinks: 3 values; expected one per query head (Hq = 4)");
  const std::vector<int64_t> cq{0, 2, 5}, ck{0, 4, 7}, ck_short{0, 4, 6}, ck_down{0, 5, 4, 7}, ck_start{1, 4, 7};
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq; }),
                 "cu_seqlens_k: missing; packed sequences need both cu_seqlens_q and cu_seqlens_k");
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq, o.cu_seqlens_k = ck_short; }),
                 "cu_seqlens_k: ends at 6, but total_k (k's seq) is 7 (the last offset is the total length)");
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq, o.cu_seqlens_k = ck_down; }),
                 "cu_seqlens_k: 4 entries, but cu_seqlens_q has 3 (one offset per sequence, plus one)");
  const std::vector<int64_t> cq4{0, 2, 2, 5};
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq4, o.cu_seqlens_k = ck_down; }),
                 "cu_seqlens_k: decreases from 5 to 4 at entry 2 (offsets must not decrease)");
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq, o.cu_seqlens_k = ck_start; }),
                 "cu_seqlens_k: starts at 1; the first offset must be 0");
  EXPECT_MESSAGE(with([&](auto& o) { o.cu_seqlens_q = cq, o.cu_seqlens_k = ck; }), "");
  EXPECT_MESSAGE(with([](auto& o) { o.dropout.p = 1.0; }), "dropout_p: 1 is outside [0, 1)");
  EXPECT_MESSAGE(with([](auto& o) { o.dropout.p = -0.1; }), "dropout_p: -0.1 is outside [0, 1)");
  EXPECT_MESSAGE(with([](auto& o) { o.dropout.p = NAN; }), "dropout_p: nan is outside [0, 1)");
  // Packed sequences take batch 1.
  const Tensor<double> q2({2, 4, 5, 8}), k2({2, 2, 7, 8}), v2({2, 2, 7, 8});
  al::AttentionOptions<double> packed;
  packed.cu_seqlens_q = cq;
  packed.cu_seqlens_k = ck;
  EXPECT_MESSAGE(forward_error(q2, k2, v2, packed),
                 "cu_seqlens_q: packed sequences take batch 1 (q [1, Hq, total_q, d]), got batch 2");
}

TEST(Errors, SinksAndTheirGradient) {
  const Tensor<double> q({1, 2, 3, 4}, 0.1), k({1, 1, 3, 4}, 0.2), v({1, 1, 3, 4}, 0.3), dout({1, 2, 3, 4}, 1.0);
  const std::vector<double> sinks{0.5, -0.5};
  al::AttentionOptions<double> o;
  o.causal = al::Causal::top_left;
  const auto f = al::detail::allocating_forward(q.view(), k.view(), v.view(), o);
  Tensor<double> dq(q.shape()), dk(k.shape()), dv(v.shape());
  std::vector<double> ds(2);
  auto backward = [&](const al::detail::AttentionForward<double>& fw, const al::AttentionOptions<double>& opt,
                      std::span<double> d) -> std::string {
    try {
      al::reference::attention_backward(q.view(), k.view(), v.view(), fw.out.view(), fw.lse.view(), dout.view(), opt,
                                        {dq.view(), dk.view(), dv.view(), d}, {});
    } catch (const al::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_MESSAGE(backward(f, o, ds), "dsinks: given, but options.sinks is empty (there is no sink to differentiate)");
  o.sinks = sinks;
  std::vector<double> ds3(3);
  EXPECT_MESSAGE(backward(f, o, ds3), "dsinks: 3 values; expected one per query head (Hq = 2)");
  al::detail::AttentionForward<double> bad = al::detail::allocating_forward(q.view(), k.view(), v.view(), o);
  bad.lse(0, 1, 0, 0) = -INFINITY;
  EXPECT_MESSAGE(backward(bad, o, ds),
                 "lse: -inf at [0, 1, 0, 0], but with sinks every row's L is at least its sink (pass the forward's lse)");
  const auto good = al::detail::allocating_forward(q.view(), k.view(), v.view(), o);
  EXPECT_MESSAGE(backward(good, o, ds), "");
  EXPECT_MESSAGE(backward(good, o, {}), "");  // dsinks not asked for
}

TEST(Errors, SoftcapMustSurviveTheConversionToFloat) {
  const Tensor<float> q({1, 1, 2, 4}, 0.5f);
  al::AttentionOptions<float> o;
  o.softcap = 1e-310;  // a positive double that is 0 as a float
  try {
    al::detail::allocating_forward(q.view(), q.view(), q.view(), o);
    FAIL() << "accepted";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), "softcap: 1e-310 is outside the range of float32 (about 1.2e-38 to 3.4e38)");
  }
  o.softcap = 3e38;  // 1/c is subnormal: the engine divides instead
  const auto f = al::detail::allocating_forward(q.view(), q.view(), q.view(), o);
  EXPECT_FLOAT_EQ(f.out(0, 0, 0, 0), 0.5f);
}
