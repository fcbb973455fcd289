// Bad 16-bit input to the engine: NaN in a bfloat16 or float16 tensor is named, a float16
// result past 65504 is an error.
#include <gtest/gtest.h>

#include "attnlab/attention.hpp"
#include "attnlab/float16.hpp"

namespace al = attnlab;
using al::bfloat16;
using al::float16;

TEST(EnginePrecision, NaNInA16BitInputIsNamed) {
  al::Tensor<bfloat16> q({1, 1, 4, 8}, bfloat16::from_float(0.5f)), k({1, 1, 6, 8}, bfloat16::from_float(0.25f)),
      v({1, 1, 6, 8}, bfloat16::from_float(1.0f)), out({1, 1, 4, 8});
  al::Tensor<float> lse({1, 1, 4, 1});
  k(0, 0, 5, 3) = bfloat16::from_float(NAN);
  try {
    al::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view()});
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_STREQ(e.what(), "k: non-finite value nan at [0, 0, 5, 3]");
  }
  al::Tensor<float16> qh({1, 1, 4, 8}, float16::from_float(0.5f)), kh({1, 1, 6, 8}), vh({1, 1, 6, 8}), oh({1, 1, 4, 8});
  vh(0, 0, 2, 1) = float16::from_float(-INFINITY);
  try {
    al::attention_forward(qh.view(), kh.view(), vh.view(), {}, {oh.view(), lse.view()});
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_STREQ(e.what(), "v: non-finite value -inf at [0, 0, 2, 1]");
  }
}

TEST(EnginePrecision, Float16ResultPastItsRangeIsAnError) {
  // dV = Pᵀ dO: 600 rows of dO = 200 on one key give 120000 > 65504.
  const int64_t N = 600;
  al::Tensor<float16> q({1, 1, N, 8}), k({1, 1, 1, 8}), v({1, 1, 1, 8}, float16::from_float(1.0f));
  al::Tensor<float16> out({1, 1, N, 8}), g({1, 1, N, 8}, float16::from_float(200.0f));
  al::Tensor<float> lse({1, 1, N, 1});
  al::attention_forward(q.view(), k.view(), v.view(), {}, {out.view(), lse.view()});
  al::Tensor<float16> dq(q.shape()), dk(k.shape()), dv(v.shape());
  try {
    al::attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), g.view(), {},
                           {dq.view(), dk.view(), dv.view()});
    FAIL() << "no error";
  } catch (const al::Error& e) {
    EXPECT_STREQ(e.what(),
                 "attention: dv overflows float16 at [0, 0, 0, 0] (an intermediate such as dO·v or the sum of p·v "
                 "left the type's range); scale the inputs down or compute in float32 (bfloat16 has float32's range)");
  }
}
