// Bad arguments fail with attnlab::Error whose message names the argument and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/reference.hpp"

namespace al = attnlab;
using al::Tensor;

namespace {

// Runs the forward and returns the error message ("" if it did not throw).
std::string forward_error(const Tensor<double>& q, const Tensor<double>& k, const Tensor<double>& v,
                          const al::AttentionOptions<double>& opt = {}) {
  try {
    al::reference::attention_forward(q.view(), k.view(), v.view(), opt);
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
    al::reference::attention_forward(q.view(), k.view(), v.view(), {}, out.view(), lse.view());
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
      al::reference::attention_forward(qq, q, q, {}, o, l);
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
  const auto f = al::reference::attention_forward(q.view(), k.view(), v.view());
  Tensor<double> dout({1, 2, 3, 4});
  try {
    al::reference::attention_backward(q.view(), k.view(), v.view(), f, dout.view());
    FAIL();
  } catch (const al::Error& e) {
    EXPECT_MESSAGE(std::string(e.what()), "grad_out: shape [1, 2, 3, 4] should be [1, 2, 3, 5]");
  }
  Tensor<double> dout_ok({1, 2, 3, 5});
  dout_ok(0, 1, 2, 0) = NAN;
  try {
    al::reference::attention_backward(q.view(), k.view(), v.view(), f, dout_ok.view());
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
  const auto f = al::reference::attention_forward(q2.view(), k2.view(), v2.view(), none);
  EXPECT_EQ(f.out(0, 0, 0, 0), 3.0);
  EXPECT_EQ(f.lse(0, 0, 0, 0), 1e30);
}

TEST(Errors, BackwardRejectsALseThatIsNaNOrPlusInfinity) {
  Tensor<double> q({1, 1, 2, 2}, 0.5), k({1, 1, 2, 2}, 0.25), v({1, 1, 2, 2}, 1.0), dout({1, 1, 2, 2}, 1.0);
  auto f = al::reference::attention_forward(q.view(), k.view(), v.view());
  f.lse(0, 0, 1, 0) = INFINITY;
  try {
    al::reference::attention_backward(q.view(), k.view(), v.view(), f, dout.view());
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
  auto f = al::reference::attention_forward(q.view(), k.view(), v.view(), padded);
  EXPECT_NO_THROW(al::reference::attention_backward(q.view(), k.view(), v.view(), f, dout.view(), padded));
  f = al::reference::attention_forward(q.view(), k.view(), v.view());
  f.lse(0, 0, 1, 0) = -INFINITY;
  const std::string want =
      "lse: -inf at [0, 0, 1, 0], but that row sees a key (-inf is only for a fully masked row; pass the "
      "forward's lse)";
  try {
    al::reference::attention_backward(q.view(), k.view(), v.view(), f, dout.view());
    ADD_FAILURE() << "no error";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  Tensor<float> qf({1, 1, 2, 4}, 0.5f), kf({1, 1, 3, 4}, 0.25f), vf({1, 1, 3, 4}, 1.0f), dof({1, 1, 2, 4}, 1.0f);
  auto ff = al::attention_forward(qf.view(), kf.view(), vf.view());
  ff.lse(0, 0, 1, 0) = -INFINITY;
  try {
    al::attention_backward(qf.view(), kf.view(), vf.view(), ff, dof.view());
    ADD_FAILURE() << "no error from the engine";
  } catch (const al::Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}
