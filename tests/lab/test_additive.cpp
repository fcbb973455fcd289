// The additive and multiplicative scores' own backward passes against central finite differences.
#include <gtest/gtest.h>

#include "attnlab/error.hpp"
#include "lab/additive_attention.hpp"

namespace lab = attnlab::lab;

TEST(AdditiveAttention, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 g(5);
  std::normal_distribution<double> n(0, 1);
  for (auto [d_in, d_a] : {std::pair<int64_t, int64_t>{3, 4}, {7, 2}, {5, 5}}) {
    for (const char* init : {"xavier", "standard_normal"}) {
      auto w = lab::ScoreWeights::init(d_in, d_a, init, g);
      std::vector<double> h(static_cast<size_t>(d_in)), s(h.size());
      for (auto& x : h) x = n(g);
      for (auto& x : s) x = n(g);
      const double up = 0.7;
      for (int kind = 0; kind < 2; ++kind) {
        auto f = [&](const lab::ScoreWeights& ww, const std::vector<double>& hh, const std::vector<double>& ss) {
          return up * (kind ? lab::multiplicative_score(ww, hh, ss) : lab::additive_score(ww, hh, ss));
        };
        const auto gr = kind ? lab::multiplicative_score_backward(w, h, s, up) : lab::additive_score_backward(w, h, s, up);
        const double eps = 1e-6;
        // Central differences have error O(eps²·f''') + O(1e-16/eps): 1e-7 relative is ample.
        auto near = [](double a, double b) { return std::abs(a - b) <= 1e-7 * std::max(1.0, std::abs(b)); };
        for (size_t i = 0; i < h.size(); ++i) {
          auto hp = h, hm = h;
          hp[i] += eps, hm[i] -= eps;
          EXPECT_TRUE(near(gr.dh[i], (f(w, hp, s) - f(w, hm, s)) / (2 * eps))) << kind << " dh " << i;
          auto sp = s, sm = s;
          sp[i] += eps, sm[i] -= eps;
          EXPECT_TRUE(near(gr.ds[i], (f(w, h, sp) - f(w, h, sm)) / (2 * eps))) << kind << " ds " << i;
        }
        for (size_t i = 0; i < w.W1.size(); ++i) {
          auto p = w, m = w;
          p.W1[i] += eps, m.W1[i] -= eps;
          EXPECT_TRUE(near(gr.dW1[i], (f(p, h, s) - f(m, h, s)) / (2 * eps))) << kind << " dW1 " << i;
          p = w, m = w;
          p.W2[i] += eps, m.W2[i] -= eps;
          EXPECT_TRUE(near(gr.dW2[i], (f(p, h, s) - f(m, h, s)) / (2 * eps))) << kind << " dW2 " << i;
        }
        if (kind == 0)
          for (size_t i = 0; i < w.v.size(); ++i) {
            auto p = w, m = w;
            p.v[i] += eps, m.v[i] -= eps;
            EXPECT_TRUE(near(gr.dv[i], (f(p, h, s) - f(m, h, s)) / (2 * eps))) << "dv " << i;
          }
      }
    }
  }
}

TEST(AdditiveAttention, ScoreIsBoundedByTheL1NormOfV) {
  std::mt19937_64 g(1);
  auto w = lab::ScoreWeights::init(16, 8, "standard_normal", g);
  std::vector<double> h(16, 100.0), s(16, -50.0);
  double l1 = 0;
  for (double x : w.v) l1 += std::abs(x);
  EXPECT_LE(std::abs(lab::additive_score(w, h, s)), l1 + 1e-12);
}

TEST(AdditiveAttention, RejectsBadShapesAndInit) {
  std::mt19937_64 g(1);
  EXPECT_THROW(lab::ScoreWeights::init(0, 3, "xavier", g), attnlab::Error);
  EXPECT_THROW(lab::ScoreWeights::init(3, 3, "he", g), attnlab::Error);
  auto w = lab::ScoreWeights::init(3, 3, "xavier", g);
  std::vector<double> h(3), s(4);
  EXPECT_THROW(lab::additive_score(w, h, s), attnlab::Error);
  EXPECT_THROW(lab::multiplicative_score_backward(w, s, h, 1.0), attnlab::Error);
}
