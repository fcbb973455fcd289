// The engine's promise for the 16-bit types (docs/engine.md, "bfloat16 and float16"):
// results equal, bit for bit, the float32 engine's on the inputs converted to float32
// up front, rounded to the type once; lse and dsinks equal the float32 engine's. Over
// random problems with every option, strided views, grouped heads, both forward paths
// (the decode path reads 16-bit K and V in place), and every thread count. The problems
// include the fused decoding step's shapes, whose online softmax per 8 keys rounds
// differently from the tiles': on AVX-512 a 16-bit cache takes that step exactly where
// float32 does, and is compared with the float32 engine as it is; elsewhere it takes
// the tile-at-a-time step, and the float32 engine is run with the step off
// (engine::testing::fused_decode_allowed). The bfloat16 dot products that the fused step takes
// for a bfloat16 cache's scores where the CPU has them (engine::testing::bf16_dot_products_allowed)
// are off in these comparisons: their sums run in another order, held to the accuracy
// rule instead (EnginePrecisionAccuracy.BFloat16ScoresOnTheCpuDotProducts…).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/float16.hpp"
#include "core/attention_results.hpp"
#include "engine/decode_path.hpp"
#include "engine/plan.hpp"
#include "engine/testing/engine_probe.hpp"
#include "engine_check.hpp"
#include "engine_path.hpp"

namespace al = attnlab;
using al::bfloat16;
using al::float16;

namespace {

// x's values rounded to T, in a layout with permuted axes and gaps when `spread` > 1
// (storage keeps the memory), and the same values as float, contiguous.
template <class T>
al::TensorView<T> to_type(const al::Tensor<double>& x, const std::array<int, 4>& order, int spread,
                          std::vector<T>& storage, al::Tensor<float>& as_float) {
  const al::Shape s = x.shape();
  al::Shape strides{};
  int64_t stride = spread;
  for (int a = 3; a >= 0; --a) {
    strides[order[a]] = stride;
    stride *= s[order[a]];
  }
  storage.assign(static_cast<size_t>(stride), T::from_float(1234.0f));
  al::TensorView<T> v(storage.data(), s, strides);
  as_float = al::Tensor<float>(s);
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 0; j < s[3]; ++j) {
          v(b, h, i, j) = T::from_float(static_cast<float>(x(b, h, i, j)));
          as_float(b, h, i, j) = v(b, h, i, j).to_float();
        }
  return v;
}

template <class T>
int64_t count_differences(al::ConstView<T> got, const al::Tensor<float>& want_float) {
  int64_t n = 0;
  for (int64_t b = 0; b < got.batch(); ++b)
    for (int64_t h = 0; h < got.heads(); ++h)
      for (int64_t i = 0; i < got.seq(); ++i)
        for (int64_t j = 0; j < got.dim(); ++j) n += got(b, h, i, j).bits != T::from_float(want_float(b, h, i, j)).bits;
  return n;
}

int64_t count_differences(const al::Tensor<float>& a, const al::Tensor<float>& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::bit_cast<uint32_t>(a.data()[i]) != std::bit_cast<uint32_t>(b.data()[i]);
  return n;
}

// An engine test hook (engine::testing::fused_decode_allowed, bf16_dot_products_allowed) off while
// in scope (see the top).
struct HookOff {
  explicit HookOff(std::atomic<bool>& h) : hook(h) { hook.store(false); }
  ~HookOff() { hook.store(true); }
  std::atomic<bool>& hook;
};

// One problem in type T against the float32 engine on the same values; `path` is the
// forward path the problem must take. Returns whether the float32 engine, fused step
// allowed, takes it on this problem (where the comparison needs the step off).
template <class T>
bool check_equals_float_engine(const al::test::Problem& p, bool strided, int threads, al::engine::ForwardPath path) {
  const al::test::FloatProblem f(p);
  const al::AttentionOptions<float> opt = f.options(p);
  const std::array<int, 4> plain{0, 1, 2, 3};
  std::vector<T> sq, sk, sv, sg, sdq, sdk, sdv;
  al::Tensor<float> q32, k32, v32, g32, o32;
  const al::ConstView<T> q = to_type<T>(p.q, strided ? std::array<int, 4>{0, 2, 1, 3} : plain, 1, sq, q32);
  const al::ConstView<T> k =
      to_type<T>(p.k, strided ? std::array<int, 4>{2, 0, 1, 3} : plain, strided ? 2 : 1, sk, k32);
  const al::ConstView<T> v = to_type<T>(p.v, strided ? std::array<int, 4>{0, 1, 3, 2} : plain, 1, sv, v32);
  const al::ConstView<T> g = to_type<T>(p.grad_out, plain, 1, sg, g32);
  const al::ComputeConfig config{threads};
  const HookOff exact_products(al::engine::testing::bf16_dot_products_allowed());  // scores on converted values
  auto fused_tiles = [] { return al::engine::testing::tile_counts().decode_fused.load(); };
  const int64_t before32 = fused_tiles();
  const auto f32_as_is = al::detail::allocating_forward(q32.view(), k32.view(), v32.view(), opt, config);
  const bool fused_shape = fused_tiles() > before32;

  // Forward: where the 16-bit call takes the fused step, the float32 engine as it is;
  // elsewhere the float32 engine as the 16-bit types run it (the step off).
  al::Tensor<T> out({p.B, p.Hq, p.Nq, p.dv});
  al::Tensor<float> lse({p.B, p.Hq, p.Nq, 1});
  const int64_t before16 = fused_tiles();
  al::attention_forward(q, k, v, opt, {out.view(), lse.view()}, config);
  const bool fused16 = fused_tiles() > before16;
  EXPECT_EQ(al::test::last_forward_path(), path);
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  // Strided views are not read in place (the float32 copies are), so they never fuse.
  EXPECT_EQ(fused16, avx512 && fused_shape && !strided)
      << "a 16-bit cache read in place takes the fused step where float32 does, on AVX-512 only";
  const HookOff fused_off(al::engine::testing::fused_decode_allowed());  // as the 16-bit types run off AVX-512
  const auto f32 =
      fused16 ? f32_as_is : al::detail::allocating_forward(q32.view(), k32.view(), v32.view(), opt, config);
  EXPECT_EQ(count_differences<T>(out.view(), f32.out), 0) << "out";
  EXPECT_EQ(count_differences(lse, f32.lse), 0) << "lse";

  // Backward, from the 16-bit forward's out (what a caller holds), and the float engine
  // from the same values.
  const al::ConstView<T> o = out.view();
  o32 = al::Tensor<float>(out.shape());
  for (int64_t i = 0; i < out.numel(); ++i) o32.data()[i] = out.data()[i].to_float();
  al::Tensor<float> unused;
  const al::TensorView<T> dq =
      to_type<T>(p.q, strided ? std::array<int, 4>{1, 0, 2, 3} : plain, strided ? 3 : 1, sdq, unused);
  const al::TensorView<T> dk = to_type<T>(p.k, plain, 1, sdk, unused);
  const al::TensorView<T> dv = to_type<T>(p.v, plain, 1, sdv, unused);
  std::vector<float> dsinks(p.sinks.size()), dsinks32(p.sinks.size());
  al::attention_backward(q, k, v, o, lse.view(), g, opt, {dq, dk, dv, std::span<float>(dsinks)}, config);
  al::Tensor<float> dq32(p.q.shape()), dk32(p.k.shape()), dv32(p.v.shape());
  al::attention_backward(q32.view(), k32.view(), v32.view(), o32.view(), f32.lse.view(), g32.view(), opt,
                         {dq32.view(), dk32.view(), dv32.view(), std::span<float>(dsinks32)}, config);
  EXPECT_EQ(count_differences<T>(dq, dq32), 0) << "dq";
  EXPECT_EQ(count_differences<T>(dk, dk32), 0) << "dk";
  EXPECT_EQ(count_differences<T>(dv, dv32), 0) << "dv";
  for (size_t h = 0; h < dsinks.size(); ++h)
    EXPECT_EQ(std::bit_cast<uint32_t>(dsinks[h]), std::bit_cast<uint32_t>(dsinks32[h])) << "dsinks " << h;
  return fused_shape;
}

template <class T>
void check_random_problems(uint64_t seed) {
  int fused_shapes = 0, short_decodes = 0, short_tiled = 0;
  for (int n = 0; n < 120; ++n) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(n));
    al::test::ProblemLimits lim;
    lim.dims = {3, 8, 16, 64, 80, 128};
    lim.p_window = 0.2, lim.p_softcap = 0.2, lim.p_alibi = 0.2, lim.p_sinks = 0.2, lim.p_packed = 0.2;
    lim.p_dropout = 0.15, lim.p_mask_mod = 0.1, lim.p_score_mod = 0.1;
    if (n % 3 == 0) {  // a KV cache: the decode path (Nq ≤ 64 rows, Nk > 512 keys)
      lim.max_seq_q = n % 2 == 0 ? 3 : 40;
      lim.min_seq_k = 513;
      lim.max_seq_k = 1300;
      lim.max_batch = 1;
      lim.p_dropout = 0;  // dropout takes the tiled path
      if (n % 6 == 3) {   // grouped heads decoding without a score treatment: the fused step's shapes in float32
        lim.max_seq_q = 1, lim.max_group = 4, lim.dims = {16, 64, 128};
        lim.p_window = lim.p_softcap = lim.p_alibi = lim.p_packed = lim.p_mask_mod = lim.p_score_mod = 0;
        lim.p_bool_mask = lim.p_additive_mask = 0;
      }
    } else {
      lim.max_seq = n % 5 == 0 ? 300 : 40;
    }
    const al::test::Problem p = al::test::random_problem(rng, lim);
    const bool strided = n % 4 == 1;
    const int threads = 1 + n % 3;
    SCOPED_TRACE("seed " + std::to_string(seed + n) + (strided ? " strided " : " ") + std::to_string(threads) +
                 " threads: " + p.describe());
    // The short problems take either path (decode_path.hpp: Nk ≥ 2·Nq decodes).
    const auto path = n % 3 == 0
                          ? al::engine::ForwardPath::decode
                          : al::engine::choose_forward_path(p.B, p.Hq, p.Hkv, p.Nq, p.Nk, false, p.dropout_p != 0);
    short_decodes += n % 3 != 0 && path == al::engine::ForwardPath::decode;
    short_tiled += path == al::engine::ForwardPath::tiled;
    fused_shapes += check_equals_float_engine<T>(p, strided, threads, path);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GE(fused_shapes, 5);   // the comparison covers the shapes where the float32 engine fuses
  EXPECT_GE(short_decodes, 5);  // short problems with Nk ≥ 2·Nq: both paths are compared
  EXPECT_GE(short_tiled, 30);
}

}  // namespace

TEST(EnginePrecision, BFloat16EqualsFloat32EngineOnConvertedInputsBitwise) { check_random_problems<bfloat16>(515); }
TEST(EnginePrecision, Float16EqualsFloat32EngineOnConvertedInputsBitwise) { check_random_problems<float16>(9091); }

// A 16-bit cache from memory (K and V past the last-level cache; here the size threshold
// set to 0) takes the fused step on AVX-512, 1 to 8 rows per K/V head at d = 64 and 128, in row
// order but for 5 to 8 rows at d = 64 off the bfloat16 dot products (decode_strategy.hpp): bitwise the float32 engine's on the
// converted values, forward and backward (check_equals_float_engine, scores on converted
// values); with a bfloat16 cache's scores on the CPU's dot products (3 rows and more),
// bitwise the same as with row order off. Counted where it runs.
template <class T>
void check_row_order_16bit(uint64_t seed) {
  const bool avx512 = al::engine::target_name().rfind("AVX3", 0) == 0;
  auto& max_bytes = al::engine::testing::fused_beside_loads_max_kv_bytes();
  const int64_t saved = max_bytes.load();
  max_bytes.store(0);
  const auto& counts = al::engine::testing::tile_counts();
  for (const int64_t group : {1, 2, 3, 5, 8})
    for (const int64_t d : {64, 128}) {
      std::mt19937_64 rng(seed + static_cast<uint64_t>(group * 1000 + d));
      al::test::Problem p;
      p.B = 2, p.Hkv = 1, p.Hq = group, p.Nq = 1, p.Nk = 3 * al::engine::kDecodeChunkMin - 5, p.d = p.dv = d;
      p.q = al::Tensor<double>({p.B, p.Hq, p.Nq, p.d});
      p.k = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.d});
      p.v = al::Tensor<double>({p.B, p.Hkv, p.Nk, p.dv});
      p.grad_out = al::Tensor<double>({p.B, p.Hq, p.Nq, p.dv});
      for (auto* t : {&p.q, &p.k, &p.v, &p.grad_out}) al::test::fill_normal(*t, rng);
      // K's values spread over 2^−6 to 2^6: products of 16-bit values are exact in float32,
      // and sums of a few of them of like size often are too, whatever their order; these
      // round, so an order changed anywhere in the scores changes the bits.
      for (int64_t i = 0; i < p.k.numel(); ++i)
        p.k.data()[i] = std::ldexp(p.k.data()[i], static_cast<int>(rng() % 13) - 6);
      p.key_lengths = {p.Nk, p.Nk - 300};
      SCOPED_TRACE(p.describe());
      check_equals_float_engine<T>(p, false, 2, al::engine::ForwardPath::decode);

      // The 16-bit forward as it runs by default (bfloat16: its dot products where the CPU
      // has them), with row order and without.
      const std::array<int, 4> plain{0, 1, 2, 3};
      std::vector<T> sq, sk, sv;
      al::Tensor<float> q32, k32, v32;
      const al::ConstView<T> q = to_type<T>(p.q, plain, 1, sq, q32), k = to_type<T>(p.k, plain, 1, sk, k32),
                             v = to_type<T>(p.v, plain, 1, sv, v32);
      const al::test::FloatProblem f(p);
      auto forward = [&](al::Tensor<T>& out, al::Tensor<float>& lse) {
        out = al::Tensor<T>({p.B, p.Hq, p.Nq, p.dv}), lse = al::Tensor<float>({p.B, p.Hq, p.Nq, 1});
        al::attention_forward(q, k, v, f.options(p), {out.view(), lse.view()}, al::ComputeConfig{2});
      };
      al::Tensor<T> out_rows, out_off;
      al::Tensor<float> lse_rows, lse_off;
      const int64_t before = counts.decode_fused_row_order.load(), fused_before = counts.decode_fused.load();
      forward(out_rows, lse_rows);
      const int64_t fused = counts.decode_fused.load() - fused_before;
      // Every fused tile in row order, but for 5 to 8 rows at d = 64 off the bfloat16 dot products
      // (rows of 4 vectors are read in row order up to 4 rows): those spread their requests.
      const bool row_order = group <= 4 || d >= 128 ||
                             (std::is_same_v<T, bfloat16> && al::engine::testing::cpu_has_bf16_dot_products());
      EXPECT_EQ(counts.decode_fused_row_order.load() - before, row_order ? fused : 0);
      EXPECT_EQ(fused > 0, avx512) << "the fused step on AVX-512";
      {
        const HookOff off(al::engine::testing::fused_row_order_allowed());
        const int64_t before_off = counts.decode_fused_row_order.load();
        forward(out_off, lse_off);
        EXPECT_EQ(counts.decode_fused_row_order.load(), before_off);
      }
      int64_t differ = count_differences(lse_rows, lse_off);
      for (int64_t i = 0; i < out_rows.numel(); ++i) differ += out_rows.data()[i].bits != out_off.data()[i].bits;
      EXPECT_EQ(differ, 0) << "row order against the requests";
    }
  max_bytes.store(saved);
}

TEST(EnginePrecision, BFloat16CacheInRowOrderBitwise) { check_row_order_16bit<bfloat16>(3301); }
TEST(EnginePrecision, Float16CacheInRowOrderBitwise) { check_row_order_16bit<float16>(3302); }
