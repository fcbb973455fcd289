// Ring attention under mpirun -np P (P = 1…4, tests/mpi/CMakeLists.txt): every rank builds
// the same whole problem, runs the ring on its shard, and checks its shard of the results
// against the double reference under the engine's accuracy rule (tests/engine/engine_check.hpp,
// docs/engine.md "Tolerances"), the errors reduced over ranks. Also: the one-process engine's
// errors beside the ring's (printed: the measured error at each P), bitwise repeatability,
// bfloat16/float16 as the float32 ring on converted inputs, the window and ALiBi (each block
// placed by its offsets), and errors raised on every rank.
//
//   test_ring_attention --kill-rank R   rank R kills itself inside a long ring (check_killed_rank.sh)
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/ring_attention.hpp"
#include "core/attention_results.hpp"
#include "engine_check.hpp"

namespace attnlab::test {
namespace {

using mpi::RingLayout;

int g_rank = 0, g_size = 1;
ComputeConfig one_thread() {
  ComputeConfig c;
  c.threads = 1;
  return c;
}

// Rank r's rows of a whole [B, H, N, D] tensor, in its shard's order.
template <class T>
Tensor<T> shard(const Tensor<T>& full, const RingLayout& layout, int rank) {
  const int64_t n = layout.shard_length(rank);
  Tensor<T> s({full.shape()[0], full.shape()[1], n, full.shape()[3]});
  for (int64_t b = 0; b < full.shape()[0]; ++b)
    for (int64_t h = 0; h < full.shape()[1]; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < full.shape()[3]; ++c) s(b, h, i, c) = full(b, h, layout.global_row(rank, i), c);
  return s;
}

// max |mine − whole's rows|, over every rank.
template <class T, class U>
double max_error_over_ranks(const Tensor<T>& mine, const Tensor<U>& whole, const RingLayout& layout) {
  const Tensor<U> rows = shard(whole, layout, g_rank);
  double m = 0;
  for (int64_t e = 0; e < mine.numel(); ++e) {
    const double x = static_cast<double>(mine.data()[e]), y = static_cast<double>(rows.data()[e]);
    if (x == y) continue;
    m = std::max(m, std::isnan(x - y) ? INFINITY : std::abs(x - y));
  }
  double all = 0;
  MPI_Allreduce(&m, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

struct RingRun {
  Tensor<float> out, lse, dq, dk, dv;
  std::vector<float> dsinks;
};

RingRun run_ring(const Problem& p, const FloatProblem& f, const RingLayout& layout, const ComputeConfig& config) {
  const AttentionOptions<float> opt = f.options(p);
  const Tensor<float> q = shard(f.q, layout, g_rank), k = shard(f.k, layout, g_rank), v = shard(f.v, layout, g_rank),
                      go = shard(f.grad_out, layout, g_rank);
  const int64_t n = layout.shard_length(g_rank);
  RingRun r{Tensor<float>({p.B, p.Hq, n, p.dv}), Tensor<float>({p.B, p.Hq, n, 1}), Tensor<float>(q.shape()),
            Tensor<float>(k.shape()), Tensor<float>(v.shape()), std::vector<float>(p.sinks.size())};
  mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), opt, {r.out.view(), r.lse.view()},
                              config);
  mpi::ring_attention_backward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), r.out.view(), r.lse.view(),
                               go.view(), opt, {r.dq.view(), r.dk.view(), r.dv.view(), r.dsinks}, config);
  return r;
}

// The ring and the one-process engine against the double reference, under the accuracy rule.
void check_problem(const std::string& name, const Problem& p0, const RingLayout& layout) {
  const Problem p = FloatProblem::rounded(p0);
  const FloatProblem f(p);
  const RingRun ring = run_ring(p, f, layout, one_thread());

  const auto rf = detail::allocating_forward(p.q.view(), p.k.view(), p.v.view(), p.options());
  const auto rg = detail::allocating_backward(p.q.view(), p.k.view(), p.v.view(), rf, p.grad_out.view(), p.options());
  Tensor<double> ref_dsinks({1, p.Hq, 1, 1});
  std::copy(rg.dsinks.begin(), rg.dsinks.end(), ref_dsinks.data());
  const NaiveResult nv = naive_float_attention(p, f, /*d_from_out=*/true);
  const Tensor<double>* ref[kQuantities] = {&rf.out, &rf.lse, &rg.dq, &rg.dk, &rg.dv, &ref_dsinks};
  const auto floor = accuracy_floors(p, rf, ref, nv);

  const AttentionOptions<float> opt = f.options(p);
  const auto fe = detail::allocating_forward(f.q.view(), f.k.view(), f.v.view(), opt);
  Tensor<float> edq(p.q.shape()), edk(p.k.shape()), edv(p.v.shape()), eds({1, p.Hq, 1, 1});
  attention_backward(
      f.q.view(), f.k.view(), f.v.view(), fe.out.view(), fe.lse.view(), f.grad_out.view(), opt,
      {edq.view(), edk.view(), edv.view(), p.sinks.empty() ? std::span<float>() : std::span<float>(eds.storage())}, {});
  Tensor<float> ring_ds({1, p.Hq, 1, 1});
  std::copy(ring.dsinks.begin(), ring.dsinks.end(), ring_ds.data());
  const Tensor<float>* mine[kQuantities] = {&ring.out, &ring.lse, &ring.dq, &ring.dk, &ring.dv, &ring_ds};
  const Tensor<float>* eng[kQuantities] = {&fe.out, &fe.lse, &edq, &edk, &edv, &eds};
  const Tensor<float>* nai[kQuantities] = {&nv.out, &nv.lse, &nv.dq, &nv.dk, &nv.dv, &nv.dsinks};
  std::string line = "P=" + std::to_string(g_size) + " " + name + ":";
  for (int x = 0; x < kQuantities; ++x) {
    if (x == 5 && p.sinks.empty()) continue;
    // dsinks is whole on every rank: compared whole (the layout of one "row" per head).
    const bool whole = x == 5;
    const double err = whole ? max_abs_diff(to_double(*mine[x]), *ref[x]) : max_error_over_ranks(*mine[x], *ref[x], layout);
    const double err_engine = max_abs_diff(to_double(*eng[x]), *ref[x]);
    const double err_naive = max_abs_diff(to_double(*nai[x]), *ref[x]);
    EXPECT_LE(err, 2.0 * err_naive + floor[x]) << name << " " << kQuantity[x] << ": ring error " << err
                                               << ", naive float32 error " << err_naive << ", engine " << err_engine;
    double size = 1e-30;  // the largest finite reference value (a fully masked row's L is −inf)
    for (double y : ref[x]->storage())
      if (std::isfinite(y)) size = std::max(size, std::abs(y));
    char buf[160];
    std::snprintf(buf, sizeof buf, " %s ring %.1e engine %.1e (rule %.1e)", kQuantity[x], err / size, err_engine / size,
                  (2.0 * err_naive + floor[x]) / size);
    line += buf;
  }
  if (g_rank == 0) std::printf("[errors] %s\n", line.c_str());
}

Problem base(uint64_t seed, int64_t B, int64_t Hq, int64_t Hkv, int64_t N, int64_t d) {
  std::mt19937_64 rng(seed);
  return make_problem(rng, B, Hq, Hkv, N, N, d, d);
}

// Chunk lengths that leave rank P − 1 with an empty shard (with one rank, its first chunk).
RingLayout layout_with_empty_shard() {
  std::vector<int64_t> lengths;
  for (int c = 0; c < 2 * g_size; ++c) lengths.push_back(5 + 3 * c);
  lengths[static_cast<size_t>(g_size - 1)] = 0;
  if (g_size > 1) lengths[static_cast<size_t>(g_size)] = 0;
  return RingLayout::from_chunks(lengths);
}

TEST(RingAttention, NonCausalGqaUnevenShards) {
  const Problem p = base(1, 2, 4, 2, 67, 16);
  check_problem("non-causal GQA N=67", p, RingLayout::zigzag(p.Nq, g_size));
}

TEST(RingAttention, CausalGqaUnevenShards) {
  Problem p = base(2, 2, 4, 2, 67, 16);
  p.causal = Causal::top_left;
  check_problem("causal GQA N=67", p, RingLayout::zigzag(p.Nq, g_size));
}

TEST(RingAttention, CausalBottomRightCrossesTiles) {
  Problem p = base(3, 1, 2, 1, 300, 64);
  p.causal = Causal::bottom_right;
  check_problem("causal MQA N=300 d=64", p, RingLayout::zigzag(p.Nq, g_size));
}

TEST(RingAttention, PaddingAndRowDependentScales) {
  Problem p = base(4, 2, 2, 1, 45, 8);
  p.causal = Causal::top_left;
  p.key_lengths = {31, 6};
  p.scale = ScalePolicy::entropy_invariant();
  check_problem("causal padded entropy_invariant", p, RingLayout::zigzag(p.Nq, g_size));
  p.causal = Causal::none;
  p.key_lengths = {45, 0};  // the second batch entry sees no key: O = 0, L = −inf
  p.scale = ScalePolicy::scalable_softmax(0.7);
  check_problem("padded ssmax", p, RingLayout::zigzag(p.Nq, g_size));
}

TEST(RingAttention, ConstantScalePolicies) {
  for (const ScalePolicy s : {ScalePolicy::none(), ScalePolicy::inv_d(), ScalePolicy::fixed(0.3)}) {
    Problem p = base(5, 1, 2, 2, 29, 12);
    p.causal = Causal::top_left;
    p.scale = s;
    check_problem("causal scale " + s.name(), p, RingLayout::zigzag(p.Nq, g_size));
  }
}

TEST(RingAttention, SoftcapAndSinks) {
  Problem p = base(6, 2, 3, 1, 40, 16);
  p.causal = Causal::top_left;
  p.softcap = 2.5;
  p.sinks = {0.5, -1.0, 2.0};
  check_problem("causal softcap sinks", p, RingLayout::zigzag(p.Nq, g_size));
}

TEST(RingAttention, EmptyShard) {
  const RingLayout layout = layout_with_empty_shard();
  Problem p = base(7, 1, 2, 1, layout.total(), 16);
  p.causal = Causal::top_left;
  check_problem("causal empty shard", p, layout);
  p.causal = Causal::none;
  check_problem("non-causal empty shard", p, layout);
}

// The window and ALiBi, measured from the global diagonal: each block call is placed in the
// sequence by its offsets; chunk pairs wholly outside the window are skipped.
TEST(RingAttention, SlidingWindowCausalAndNot) {
  for (const Causal causal : {Causal::none, Causal::top_left})
    for (const Window w : {Window{5, 0}, Window{12, 7}, Window{-1, 3}, Window{0, -1}}) {
      Problem p = base(13, 2, 4, 2, 67, 16);
      p.causal = causal, p.window = w;
      check_problem(
          std::string(to_string(causal)) + " window (" + std::to_string(w.left) + ", " + std::to_string(w.right) + ")",
          p, RingLayout::zigzag(p.Nq, g_size));
    }
}

TEST(RingAttention, AlibiCausalAndNotWithWindowAndRowScales) {
  for (const Causal causal : {Causal::none, Causal::top_left}) {
    Problem p = base(14, 2, 2, 1, 45, 8);
    p.causal = causal;
    p.alibi_slopes = {0.5, 0.125};  // per head
    check_problem(std::string(to_string(causal)) + " alibi", p, RingLayout::zigzag(p.Nq, g_size));
    p.alibi_slopes = {0.25, 0.0625, 1.0, 0.03125};  // per batch entry and head
    p.window = {9, 2};
    p.scale = ScalePolicy::entropy_invariant();  // each row's count is its global window's
    check_problem(std::string(to_string(causal)) + " alibi per batch, window (9, 2), entropy_invariant", p,
                  RingLayout::zigzag(p.Nq, g_size));
  }
}

TEST(RingAttention, WindowAndAlibiCrossTiles) {
  Problem p = base(15, 1, 2, 1, 300, 64);
  p.causal = Causal::bottom_right;
  p.window = {100, 0};
  p.alibi_slopes = {0.01, 0.05};
  check_problem("causal window (100, 0) alibi N=300 d=64", p, RingLayout::zigzag(p.Nq, g_size));
  const RingLayout layout = layout_with_empty_shard();
  Problem e = base(16, 1, 2, 1, layout.total(), 16);
  e.window = {6, 6};
  e.alibi_slopes = {0.2, 0.4};
  check_problem("window (6, 6) alibi empty shard", e, layout);
}

bool same_bits(const Tensor<float>& a, const Tensor<float>& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

// Repeated runs, and 1 or 2 threads per rank, give the same bits (the engine is
// deterministic for any thread count, and the ring merges in a fixed order).
TEST(RingAttention, BitwiseRepeatable) {
  Problem p = FloatProblem::rounded(base(8, 1, 4, 2, 150, 32));
  p.causal = Causal::top_left;
  p.sinks = {0.1, 0.2, 0.3, 0.4};
  const FloatProblem f(p);
  const RingLayout layout = RingLayout::zigzag(p.Nq, g_size);
  const RingRun a = run_ring(p, f, layout, one_thread());
  const RingRun b = run_ring(p, f, layout, one_thread());
  ComputeConfig two;
  two.threads = 2;
  const RingRun c = run_ring(p, f, layout, two);
  for (const RingRun* r : {&b, &c}) {
    EXPECT_TRUE(same_bits(a.out, r->out) && same_bits(a.lse, r->lse));
    EXPECT_TRUE(same_bits(a.dq, r->dq) && same_bits(a.dk, r->dk) && same_bits(a.dv, r->dv));
    EXPECT_EQ(a.dsinks, r->dsinks);
  }
}

// One rank, no mask: one engine call per direction, so the ring is the engine, bit for bit.
TEST(RingAttention, OneRankEqualsTheEngineBitwise) {
  if (g_size != 1) GTEST_SKIP() << "one rank only";
  const Problem p = FloatProblem::rounded(base(9, 2, 4, 2, 90, 32));
  const FloatProblem f(p);
  const RingRun r = run_ring(p, f, RingLayout::zigzag(p.Nq, 1), one_thread());
  const auto fe = detail::allocating_forward(f.q.view(), f.k.view(), f.v.view(), f.options(p));
  const auto g = detail::allocating_backward(f.q.view(), f.k.view(), f.v.view(), fe, f.grad_out.view(), f.options(p));
  EXPECT_TRUE(same_bits(r.out, fe.out) && same_bits(r.lse, fe.lse));
  EXPECT_TRUE(same_bits(r.dq, g.dq) && same_bits(r.dk, g.dk) && same_bits(r.dv, g.dv));
}

// 16-bit inputs: the float32 ring on the inputs converted, its outputs rounded once.
template <class T>
void check_half_precision() {
  Problem p = base(10, 1, 4, 2, 70, 16);
  p.causal = Causal::top_left;
  for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out})
    for (double& x : t->storage()) x = T::from_float(static_cast<float>(x)).to_float();
  const FloatProblem f(p);
  const RingLayout layout = RingLayout::zigzag(p.Nq, g_size);
  auto to_t = [](const Tensor<float>& x) {
    Tensor<T> y(x.shape());
    for (int64_t e = 0; e < x.numel(); ++e) y.data()[e] = T::from_float(x.data()[e]);
    return y;
  };
  auto back = [](const Tensor<T>& x) {
    Tensor<float> y(x.shape());
    for (int64_t e = 0; e < x.numel(); ++e) y.data()[e] = x.data()[e].to_float();
    return y;
  };
  const Tensor<float> q = shard(f.q, layout, g_rank), k = shard(f.k, layout, g_rank), v = shard(f.v, layout, g_rank),
                      go = shard(f.grad_out, layout, g_rank);
  const Tensor<T> qt = to_t(q), kt = to_t(k), vt = to_t(v), got = to_t(go);
  const AttentionOptions<float> opt = f.options(p);
  const int64_t n = layout.shard_length(g_rank);
  Tensor<T> out({p.B, p.Hq, n, p.dv}), dq(q.shape()), dk(k.shape()), dv(v.shape());
  Tensor<float> lse({p.B, p.Hq, n, 1}), out_f(out.shape()), lse_f(lse.shape()), dq_f(q.shape()), dk_f(k.shape()),
      dv_f(v.shape());
  mpi::RingStats sent_t, sent_f;
  mpi::ring_attention_forward(MPI_COMM_WORLD, layout, qt.view(), kt.view(), vt.view(), opt, {out.view(), lse.view()}, {},
                              &sent_t);
  mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), opt, {out_f.view(), lse_f.view()},
                              {}, &sent_f);
  EXPECT_TRUE(same_bits(back(out), back(to_t(out_f))) && same_bits(lse, lse_f));
  EXPECT_EQ(2 * sent_t.bytes_sent, sent_f.bytes_sent) << "the forward's K/V travel in the 16-bit type";
  const Tensor<float> out_held = back(out);  // the O the caller of the 16-bit forward holds
  mpi::ring_attention_backward(MPI_COMM_WORLD, layout, qt.view(), kt.view(), vt.view(), out.view(), lse.view(),
                               got.view(), opt, {dq.view(), dk.view(), dv.view()});
  mpi::ring_attention_backward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), out_held.view(), lse.view(),
                               go.view(), opt, {dq_f.view(), dk_f.view(), dv_f.view()});
  EXPECT_TRUE(same_bits(back(dq), back(to_t(dq_f))) && same_bits(back(dk), back(to_t(dk_f))) &&
              same_bits(back(dv), back(to_t(dv_f))));
  // And the one-process engine in the type: within half an ulp of the type per rounding.
  const auto fe = detail::allocating_forward(f.q.view(), f.k.view(), f.v.view(), opt);
  const double tol = (std::is_same_v<T, bfloat16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) * max_abs(to_double(fe.out));
  EXPECT_LE(max_error_over_ranks(back(out), fe.out, layout), tol);
}

TEST(RingAttention, Bfloat16IsTheFloatRingRounded) { check_half_precision<bfloat16>(); }
TEST(RingAttention, Float16IsTheFloatRingRounded) { check_half_precision<float16>(); }

// A bad call throws on every rank (no rank left waiting), naming the rank and the shape.
TEST(RingAttention, WrongShardShapeIsAnErrorOnEveryRank) {
  const Problem p = base(11, 1, 2, 2, 33, 8);
  const FloatProblem f(p);
  const RingLayout layout = RingLayout::zigzag(p.Nq, g_size);
  const int bad = g_size - 1;
  const Tensor<float> k = shard(f.k, layout, g_rank), v = shard(f.v, layout, g_rank);
  Tensor<float> q = shard(f.q, layout, g_rank);
  if (g_rank == bad) q = Tensor<float>({1, 2, layout.shard_length(bad) - 1, 8});
  Tensor<float> out({1, 2, layout.shard_length(g_rank), 8}), lse({1, 2, layout.shard_length(g_rank), 1});
  const std::string want = "rank " + std::to_string(bad) + "'s q has shape " +
                           to_string(Shape{1, 2, layout.shard_length(bad) - 1, 8});
  try {
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), f.options(p),
                                {out.view(), lse.view()});
    ADD_FAILURE() << "no error on rank " << g_rank;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  // The last rank cuts the same rows into other chunks: an error on every rank, not a hang
  // (the layout is checked before the shapes).
  std::vector<int64_t> chunks = layout.chunk_lengths;
  if (g_rank == bad) chunks.front() += 1, chunks.back() -= 1;
  try {
    mpi::ring_attention_forward(MPI_COMM_WORLD, RingLayout::from_chunks(chunks), q.view(), k.view(), v.view(),
                                f.options(p), {out.view(), lse.view()});
    ADD_FAILURE() << "no error for layouts that differ";
  } catch (const Error& e) {
    const std::string named = "rank " + std::to_string(bad) + "'s layout";
    EXPECT_NE(std::string(e.what()).find(g_size > 1 ? named : "shape"), std::string::npos) << e.what();
  }
  // A non-finite key on the last rank; an option the ring cannot place.
  Tensor<float> kbad = k;
  if (g_rank == bad && kbad.numel() > 0) kbad.data()[kbad.numel() - 1] = NAN;
  const Tensor<float> qok = shard(f.q, layout, g_rank);
  EXPECT_THROW(mpi::ring_attention_forward(MPI_COMM_WORLD, layout, qok.view(), kbad.view(), v.view(), f.options(p),
                                           {out.view(), lse.view()}),
               Error);
  AttentionOptions<float> dropped = f.options(p);  // on one rank only: still an error on all
  if (g_rank == bad) dropped.dropout.p = 0.1;
  try {
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, qok.view(), k.view(), v.view(), dropped,
                                {out.view(), lse.view()});
    ADD_FAILURE() << "no error for dropout";
  } catch (const Error& e) {
    const std::string named = "dropout (rank " + std::to_string(bad) + "'s options)";
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
  // A window given to one rank only; a window with key padding (its diagonal moves per batch entry).
  AttentionOptions<float> windowed = f.options(p);
  if (g_rank == bad) windowed.window = {4, 0};
  try {
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, qok.view(), k.view(), v.view(), windowed,
                                {out.view(), lse.view()});
    if (g_size > 1) ADD_FAILURE() << "no error for a window on one rank";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("options differ from rank 0's"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> lengths = {20};
  windowed = f.options(p);
  windowed.window = {4, 0};
  windowed.key_lengths = lengths;
  try {
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, qok.view(), k.view(), v.view(), windowed,
                                {out.view(), lse.view()});
    ADD_FAILURE() << "no error for a window with key padding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a sliding window with key padding is not supported"), std::string::npos)
        << e.what();
  }
}

// The backward's inputs checked on every rank and the outcome agreed before any exchange: a
// NaN or inf in the last rank's lse (or a NaN in its out) is an error on every rank naming
// that rank, never one rank raising while the others wait in the ring, nor NaN gradients.
TEST(RingAttention, BadBackwardInputOnOneRankIsAnErrorOnEveryRank) {
  Problem p = base(13, 1, 2, 2, 33, 8);
  p.causal = Causal::top_left;
  const FloatProblem f(p);
  const RingLayout layout = RingLayout::zigzag(p.Nq, g_size);
  const RingRun good = run_ring(p, f, layout, one_thread());
  const int bad = g_size - 1;
  const Tensor<float> q = shard(f.q, layout, g_rank), k = shard(f.k, layout, g_rank), v = shard(f.v, layout, g_rank),
                      go = shard(f.grad_out, layout, g_rank);
  struct Case {
    bool in_lse;
    float value;
    const char* expected;
  };
  for (const Case& c : {Case{true, NAN, "lse has the value nan"}, Case{true, INFINITY, "lse has the value inf"},
                        Case{true, -INFINITY, "lse has the value -inf"}, Case{false, NAN, "out has a non-finite value"},
                        Case{false, -INFINITY, "out has a non-finite value"}}) {
    Tensor<float> out = good.out, lse = good.lse, dq(q.shape()), dk(k.shape()), dv(v.shape());
    if (g_rank == bad) (c.in_lse ? lse : out).data()[(c.in_lse ? lse : out).numel() - 1] = c.value;
    std::string m = "(no error)";
    try {
      mpi::ring_attention_backward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), out.view(), lse.view(),
                                   go.view(), f.options(p), {dq.view(), dk.view(), dv.view()}, one_thread());
    } catch (const Error& e) {
      m = e.what();
    }
    const std::string named = "rank " + std::to_string(bad) + "'s " + c.expected;
    EXPECT_NE(m.find(named), std::string::npos) << "rank " << g_rank << ": " << m;
  }
}

// Rank `victim` dies inside a ring of long calls; the others are left in MPI until mpirun ends the job.
int kill_rank(int victim) {
  const Problem p = base(12, 1, 4, 4, 4096, 64);
  const FloatProblem f(p);
  const RingLayout layout = RingLayout::zigzag(p.Nq, g_size);
  const Tensor<float> q = shard(f.q, layout, g_rank), k = shard(f.k, layout, g_rank), v = shard(f.v, layout, g_rank);
  Tensor<float> out({1, 4, q.shape()[2], 64}), lse({1, 4, q.shape()[2], 1});
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == victim) raise(SIGKILL);
  for (int i = 0; i < 1000; ++i)
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), f.options(p),
                                {out.view(), lse.view()});
  std::fprintf(stderr, "rank %d: the ring finished without rank %d\n", g_rank, victim);
  return 0;
}

}  // namespace
}  // namespace attnlab::test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &attnlab::test::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &attnlab::test::g_size);
  if (argc == 3 && std::string(argv[1]) == "--kill-rank") {
    const int rc = attnlab::test::kill_rank(std::stoi(argv[2]));
    MPI_Finalize();
    return rc;
  }
  testing::InitGoogleTest(&argc, argv);
  if (attnlab::test::g_rank != 0) delete testing::UnitTest::GetInstance()->listeners().Release(
      testing::UnitTest::GetInstance()->listeners().default_result_printer());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed != 0) std::fprintf(stderr, "rank %d: tests failed\n", attnlab::test::g_rank);
  MPI_Finalize();
  return any;
}
