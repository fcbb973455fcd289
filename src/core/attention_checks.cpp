#include "core/attention_checks.hpp"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

namespace attnlab::detail {
namespace {

std::string shape_str(const Shape& s) { return to_string(s); }

// Largest element offset a view can touch, or throws if it overflows int64.
template <class V>
int64_t max_offset(const V& x, const char* name) {
  __extension__ typedef __int128 i128;  // exact overflow check for 4 products
  i128 off = 0, count = 1;
  for (int a = 0; a < 4; ++a) {
    if (x.shape()[a] < 0) throw Error(fmt::format("{}: negative size in shape {}", name, shape_str(x.shape())));
    if (x.strides()[a] < 0) throw Error(fmt::format("{}: negative stride {} on axis {}", name, x.strides()[a], a));
    count *= x.shape()[a];
    if (x.shape()[a] > 0) off += static_cast<i128>(x.shape()[a] - 1) * x.strides()[a];
  }
  if (count > INT64_MAX / 16 || off > INT64_MAX / 16)
    throw Error(fmt::format("{}: shape {} is too large", name, shape_str(x.shape())));
  return static_cast<int64_t>(off);
}

template <class V>
void require_present(const V& x, const char* name) {
  if (!x.present()) throw Error(fmt::format("{}: missing (null data pointer)", name));
}

template <class V>
void require_nonempty(const V& x, const char* name) {
  for (int a = 0; a < 4; ++a)
    if (x.shape()[a] <= 0)
      throw Error(fmt::format("{}: empty tensor, shape {} (every axis must be at least 1)", name,
                              shape_str(x.shape())));
}

template <class V>
void require_shape(const V& x, const Shape& want, const char* name) {
  require_present(x, name);
  if (x.shape() != want)
    throw Error(fmt::format("{}: shape {} should be {}", name, shape_str(x.shape()), shape_str(want)));
}

// A writable view must not map two distinct indices to one element, or results
// would depend on the order of writes.
template <class V>
void require_no_self_overlap(const V& x, const char* name) {
  std::array<int, 4> axes{0, 1, 2, 3};
  std::sort(axes.begin(), axes.end(), [&](int a, int b) { return x.strides()[a] < x.strides()[b]; });
  int64_t extent = 1;  // elements spanned by the axes placed so far
  for (int a : axes) {
    if (x.shape()[a] <= 1) continue;
    if (x.strides()[a] < extent)
      throw Error(fmt::format("{}: strides [{}, {}, {}, {}] make distinct elements overlap", name, x.strides()[0],
                              x.strides()[1], x.strides()[2], x.strides()[3]));
    extent = x.strides()[a] * (x.shape()[a] - 1) + extent;
  }
}

struct Span {
  const char* name;
  const void* lo;
  const void* hi;  // one past the last byte
};

template <class V>
Span span_of(const V& x, const char* name) {
  using E = typename V::value_type;
  const auto* p = reinterpret_cast<const char*>(x.data());
  return {name, p, p + (max_offset(x, name) + 1) * static_cast<int64_t>(sizeof(E))};
}

void require_disjoint(const Span& out, std::initializer_list<Span> others) {
  for (const Span& o : others) {
    if (o.lo == nullptr) continue;
    if (out.lo < o.hi && o.lo < out.hi) throw Error(fmt::format("{}: memory overlaps {}", out.name, o.name));
  }
}

template <class M>
void check_mask_shape(ConstView<M> mask, const AttentionDims& d, const char* name) {
  if (!mask.present()) return;
  max_offset(mask, name);
  const Shape s = mask.shape();
  const bool ok = (s[0] == 1 || s[0] == d.B) && (s[1] == 1 || s[1] == d.Hq) && s[2] == d.Nq && s[3] == d.Nk;
  if (!ok)
    throw Error(fmt::format("{}: shape {} does not broadcast to [B, Hq, Nq, Nk] = [{}, {}, {}, {}]", name,
                            shape_str(s), d.B, d.Hq, d.Nq, d.Nk));
}

template <class T>
void check_additive_values(ConstView<T> mask) {
  if (!mask.present()) return;
  for (int64_t b = 0; b < mask.batch(); ++b)
    for (int64_t h = 0; h < mask.heads(); ++h)
      for (int64_t i = 0; i < mask.seq(); ++i)
        for (int64_t j = 0; j < mask.dim(); ++j) {
          const T x = mask(b, h, i, j);
          if (std::isnan(x) || x == INFINITY)
            throw Error(fmt::format("additive_mask: value {} at [{}, {}, {}, {}] (only finite values and -inf "
                                    "are allowed)", x, b, h, i, j));
        }
}

// One offset array of packed sequences (cu_seqlens_q or _k): from 0 to `total`, never decreasing.
void check_cu_seqlens(std::span<const int64_t> cu, int64_t total, const char* name, const char* total_name) {
  if (cu.size() < 2)
    throw Error(fmt::format("{}: {} entries; expected n_seq + 1 >= 2 (offsets of the packed sequences)", name,
                            cu.size()));
  if (cu[0] != 0) throw Error(fmt::format("{}: starts at {}; the first offset must be 0", name, cu[0]));
  for (size_t s = 1; s < cu.size(); ++s)
    if (cu[s] < cu[s - 1])
      throw Error(fmt::format("{}: decreases from {} to {} at entry {} (offsets must not decrease)", name, cu[s - 1],
                              cu[s], s));
  if (cu.back() != total)
    throw Error(fmt::format("{}: ends at {}, but {} is {} (the last offset is the total length)", name, cu.back(),
                            total_name, total));
}

template <class T>
void check_finite_values(std::span<const T> x, const char* name) {
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) throw Error(fmt::format("{}: non-finite value {} at [{}]", name, x[i], i));
}

}  // namespace

// The options of attention_variants.hpp and score_mod.hpp.
template <class T>
void check_variants(const AttentionOptions<T>& o, const AttentionDims& d) {
  if (o.window.left < -1 || o.window.right < -1)
    throw Error(fmt::format("window: ({}, {}) has a side below -1 (-1 means unbounded on that side)", o.window.left,
                            o.window.right));
  if (o.softcap && !(std::isfinite(*o.softcap) && *o.softcap > 0))
    throw Error(fmt::format("softcap: {} must be a positive finite number (leave it empty for no softcap)",
                            *o.softcap));
  // The engine computes in float: c must survive the conversion (1e-320 would become 0).
  if (o.softcap && !std::isnormal(static_cast<T>(*o.softcap)))
    throw Error(fmt::format("softcap: {} is outside the range of {}", *o.softcap,
                            sizeof(T) == 4 ? "float32 (about 1.2e-38 to 3.4e38)" : "float64"));
  // 2^53: positions stay exact in a double (the reference's ALiBi) and no sum of them overflows.
  constexpr int64_t kMaxOffset = int64_t{1} << 53;
  for (auto [value, name] : {std::pair{o.query_offset, "query_offset"}, std::pair{o.key_offset, "key_offset"}}) {
    if (value < 0 || value > kMaxOffset)
      throw Error(fmt::format("{}: {} is outside [0, 2^53] (the position of the call's first {} in the sequence)", name,
                              value, name[0] == 'q' ? "query row" : "key"));
    if (value != 0 && !o.cu_seqlens_q.empty())
      throw Error(
          fmt::format("{}: cannot be combined with cu_seqlens (each packed sequence starts at its own row 0)", name));
  }
  if (o.cu_seqlens_q.empty() != o.cu_seqlens_k.empty())
    throw Error(fmt::format("cu_seqlens_{}: missing; packed sequences need both cu_seqlens_q and cu_seqlens_k",
                            o.cu_seqlens_q.empty() ? "q" : "k"));
  if (is_packed(o)) {
    if (d.B != 1)
      throw Error(fmt::format("cu_seqlens_q: packed sequences take batch 1 (q [1, Hq, total_q, d]), got batch {}",
                              d.B));
    if (!o.key_lengths.empty())
      throw Error("key_lengths: cannot be combined with cu_seqlens (each packed sequence's keys are given by "
                  "cu_seqlens_k)");
    if (o.cu_seqlens_q.size() != o.cu_seqlens_k.size())
      throw Error(fmt::format("cu_seqlens_k: {} entries, but cu_seqlens_q has {} (one offset per sequence, plus one)",
                              o.cu_seqlens_k.size(), o.cu_seqlens_q.size()));
    check_cu_seqlens(o.cu_seqlens_q, d.Nq, "cu_seqlens_q", "total_q (q's seq)");
    check_cu_seqlens(o.cu_seqlens_k, d.Nk, "cu_seqlens_k", "total_k (k's seq)");
  }
  if (!o.alibi_slopes.empty()) {
    const int64_t n_seq = sequence_count(d, o), n = static_cast<int64_t>(o.alibi_slopes.size());
    if (n != d.Hq && n != n_seq * d.Hq)
      throw Error(fmt::format("alibi_slopes: {} value{}; expected Hq = {} (one per query head) or {} = {} x {} (per "
                              "{} and query head)", n, n == 1 ? "" : "s", d.Hq, n_seq * d.Hq, n_seq, d.Hq,
                              is_packed(o) ? "packed sequence" : "batch entry"));
    check_finite_values(o.alibi_slopes, "alibi_slopes");
    // A bias beyond float's range at the farthest key would be blamed on the scores
    // (|scale·q·k|): the slope is named here, with its reach and the limit.
    const double reach = static_cast<double>(std::max(d.Nq + o.query_offset, d.Nk + o.key_offset));
    constexpr double kLimit = std::numeric_limits<float>::max() / 4;
    for (size_t i = 0; i < o.alibi_slopes.size(); ++i)
      if (std::abs(static_cast<double>(o.alibi_slopes[i])) * reach > kLimit)
        throw Error(fmt::format("alibi_slopes: {} at [{}] times the farthest key distance ({}) is beyond {:.3g} (a "
                                "quarter of float32's range, which scores must stay within)",
                                o.alibi_slopes[i], i, reach, kLimit));
  }
  if (!o.sinks.empty()) {
    if (static_cast<int64_t>(o.sinks.size()) != d.Hq)
      throw Error(fmt::format("sinks: {} value{}; expected one per query head (Hq = {})", o.sinks.size(),
                              o.sinks.size() == 1 ? "" : "s", d.Hq));
    check_finite_values(o.sinks, "sinks");
  }
  if (!(o.dropout.p >= 0.0 && o.dropout.p < 1.0))
    throw Error(fmt::format("dropout_p: {} is outside [0, 1)", o.dropout.p));
  if (o.block_mask != nullptr) {
    const BlockMask& bm = *o.block_mask;
    if (o.mask_mod == nullptr) throw Error("block_mask: given without the mask_mod it was built from");
    const bool ok = (bm.batch() == 1 || bm.batch() == d.B) && (bm.heads() == 1 || bm.heads() == d.Hq) &&
                    bm.query_len() == d.Nq && bm.key_len() == d.Nk;
    if (!ok)
      throw Error(fmt::format("block_mask: built for [{}, {}, {}, {}], which does not broadcast to [B, Hq, Nq, Nk] = "
                              "[{}, {}, {}, {}]", bm.batch(), bm.heads(), bm.query_len(), bm.key_len(), d.B, d.Hq,
                              d.Nq, d.Nk));
  }
}

namespace {

template <class E, class T>
AttentionDims check_inputs(ConstView<E> q, ConstView<E> k, ConstView<E> v, const AttentionOptions<T>& options,
                           ValueChecks values = ValueChecks::all) {
  // Emptiness first: an empty tensor usually has no data pointer either, and
  // "empty" is the message that helps.
  require_nonempty(q, "q");
  require_nonempty(k, "k");
  require_nonempty(v, "v");
  require_present(q, "q");
  require_present(k, "k");
  require_present(v, "v");
  max_offset(q, "q");
  max_offset(k, "k");
  max_offset(v, "v");
  AttentionDims d;
  d.B = q.batch();
  d.Hq = q.heads();
  d.Nq = q.seq();
  d.d = q.dim();
  d.Hkv = k.heads();
  d.Nk = k.seq();
  d.dv = v.dim();
  if (k.batch() != d.B) throw Error(fmt::format("k: batch {} does not match q's {}", k.batch(), d.B));
  if (v.batch() != d.B) throw Error(fmt::format("v: batch {} does not match q's {}", v.batch(), d.B));
  if (k.dim() != d.d) throw Error(fmt::format("k: head dim {} does not match q's {}", k.dim(), d.d));
  if (v.heads() != d.Hkv) throw Error(fmt::format("v: {} heads does not match k's {}", v.heads(), d.Hkv));
  if (v.seq() != d.Nk) throw Error(fmt::format("v: seq {} does not match k's {}", v.seq(), d.Nk));
  if (d.Hq % d.Hkv != 0)
    throw Error(fmt::format("q: {} heads is not a multiple of k's {} key/value heads", d.Hq, d.Hkv));
  check_mask_shape(options.bool_mask, d, "bool_mask");
  check_mask_shape(options.additive_mask, d, "additive_mask");
  if (!options.key_lengths.empty()) {
    if (static_cast<int64_t>(options.key_lengths.size()) != d.B)
      throw Error(fmt::format("key_lengths: {} entries, expected one per batch ({})", options.key_lengths.size(), d.B));
    for (size_t b = 0; b < options.key_lengths.size(); ++b)
      if (options.key_lengths[b] < 0 || options.key_lengths[b] > d.Nk)
        throw Error(fmt::format("key_lengths: value {} for batch {} is outside [0, {}]", options.key_lengths[b], b, d.Nk));
  }
  check_variants(options, d);
  if (options.check_finite) {
    check_finite(q, "q");
    if (values == ValueChecks::all) {
      check_finite(k, "k");
      check_finite(v, "v");
      check_additive_values(options.additive_mask);
    }
  }
  return d;
}

// Element-type helpers: whether a value is finite, and its value for a message.
template <class T>
bool is_finite_value(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isfinite(x);
  } else {
    return x.is_finite();
  }
}
template <class T>
double value_of(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(x);
  } else {
    return static_cast<double>(x.to_float());
  }
}
// The bits of T and its exponent field (all ones: inf or NaN).
template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
// x's bits: a 16-bit type's field as it is (the vectoriser does not take a bit_cast of the struct).
template <class T>
constexpr BitsOf<T> bits_of(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::bit_cast<BitsOf<T>>(x);
  else return x.bits;
}
template <class T>
constexpr BitsOf<T> exponent_mask() {
  if constexpr (std::is_same_v<T, float>) return 0x7f800000u;
  if constexpr (std::is_same_v<T, double>) return 0x7ff0000000000000u;
  if constexpr (std::is_same_v<T, bfloat16>) return 0x7f80u;
  if constexpr (std::is_same_v<T, float16>) return 0x7c00u;
}

// The position of the first NaN or ±inf of x, if any. The checks run on every
// engine call, over every input and output: written element by element with an
// early exit they took 6 % of the forward at N = 2048, d = 64. So each row is
// first scanned branch-free on the exponent bits, which the compiler
// vectorises, and only a row that fails is searched element by element.
template <class T>
std::optional<std::array<int64_t, 4>> first_non_finite(ConstView<T> x) {
  using Bits = BitsOf<T>;
  constexpr Bits kExponent = exponent_mask<T>();
  const int64_t n = x.dim(), st = x.stride(Axis::dim);
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t h = 0; h < x.heads(); ++h)
      for (int64_t i = 0; i < x.seq(); ++i) {
        const T* r = x.row(b, h, i);
        Bits bad = 0;
        if (st == 1) {
          for (int64_t j = 0; j < n; ++j) bad |= ((bits_of(r[j]) & kExponent) == kExponent);
        } else {
          for (int64_t j = 0; j < n; ++j) bad |= !is_finite_value(r[j * st]);
        }
        if (bad == 0) continue;
        for (int64_t j = 0; j < n; ++j)
          if (!is_finite_value(r[j * st])) return std::array<int64_t, 4>{b, h, i, j};
      }
  return std::nullopt;
}

}  // namespace

template <class T>
void check_finite(ConstView<T> x, const char* name) {
  if (const auto at = first_non_finite(x)) {
    const auto [b, h, i, j] = *at;
    throw Error(fmt::format("{}: non-finite value {} at [{}, {}, {}, {}]", name, value_of(x(b, h, i, j)), b, h, i, j));
  }
}

template <class T>
void check_result_finite(ConstView<T> x, const char* name) {
  if (const auto at = first_non_finite(x)) {
    const auto [b, h, i, j] = *at;
    throw Error(fmt::format("attention: {} overflows {} at [{}, {}, {}, {}] (an intermediate such as dO·v "
                            "or the sum of p·v left the type's range); scale the inputs down{}",
                            name, type_name(static_cast<const T*>(nullptr)), b, h, i, j,
                            std::is_same_v<T, float>    ? " or use the double-precision reference"
                            : std::is_same_v<T, double> ? ""
                                                        : " or compute in float32 (bfloat16 has float32's range)"));
  }
}

template <class E, class T>
void check_deferred_values(ConstView<E> k, ConstView<E> v, const AttentionOptions<T>& options, bool k_and_v) {
  if (!options.check_finite) return;
  if (k_and_v) {
    check_finite(k, "k");
    check_finite(v, "v");
  }
  check_additive_values(options.additive_mask);
}

template <class E, class T>
AttentionDims check_forward_args(ConstView<E> q, ConstView<E> k, ConstView<E> v, const AttentionOptions<T>& options,
                                 TensorView<E> out, TensorView<T> lse, ValueChecks values) {
  const AttentionDims d = check_inputs(q, k, v, options, values);
  require_shape(out, {d.B, d.Hq, d.Nq, d.dv}, "out");
  require_shape(lse, {d.B, d.Hq, d.Nq, 1}, "lse");
  require_no_self_overlap(out, "out");
  require_no_self_overlap(lse, "lse");
  const Span so = span_of(out, "out"), sl = span_of(lse, "lse");
  require_disjoint(so, {span_of(q, "q"), span_of(k, "k"), span_of(v, "v"), sl});
  require_disjoint(sl, {span_of(q, "q"), span_of(k, "k"), span_of(v, "v")});
  return d;
}

template <class E, class T>
AttentionDims check_backward_args(ConstView<E> q, ConstView<E> k, ConstView<E> v, ConstView<E> out, ConstView<T> lse,
                                  ConstView<E> grad_out, const AttentionOptions<T>& options, TensorView<E> dq,
                                  TensorView<E> dk, TensorView<E> dv, std::span<T> dsinks) {
  const AttentionDims d = check_inputs(q, k, v, options);
  if (!dsinks.empty() && options.sinks.empty())
    throw Error("dsinks: given, but options.sinks is empty (there is no sink to differentiate)");
  if (!dsinks.empty() && static_cast<int64_t>(dsinks.size()) != d.Hq)
    throw Error(fmt::format("dsinks: {} value{}; expected one per query head (Hq = {})", dsinks.size(),
                            dsinks.size() == 1 ? "" : "s", d.Hq));
  require_shape(out, {d.B, d.Hq, d.Nq, d.dv}, "out");
  require_shape(lse, {d.B, d.Hq, d.Nq, 1}, "lse");
  require_shape(grad_out, {d.B, d.Hq, d.Nq, d.dv}, "grad_out");
  require_shape(dq, q.shape(), "dq");
  require_shape(dk, k.shape(), "dk");
  require_shape(dv, v.shape(), "dv");
  max_offset(out, "out");
  max_offset(lse, "lse");
  max_offset(grad_out, "grad_out");
  require_no_self_overlap(dq, "dq");
  require_no_self_overlap(dk, "dk");
  require_no_self_overlap(dv, "dv");
  const std::initializer_list<Span> inputs = {span_of(q, "q"), span_of(k, "k"), span_of(v, "v"),
                                              span_of(out, "out"), span_of(lse, "lse"),
                                              span_of(grad_out, "grad_out")};
  const Span sq = span_of(dq, "dq"), sk = span_of(dk, "dk"), sv = span_of(dv, "dv");
  require_disjoint(sq, inputs);
  require_disjoint(sk, inputs);
  require_disjoint(sv, inputs);
  require_disjoint(sq, {sk, sv});
  require_disjoint(sk, {sv});
  if (options.check_finite) {
    check_finite(grad_out, "grad_out");
    check_finite(out, "out");
  }
  // L is a log-sum-exp: finite, or −inf for a fully masked row. NaN or +inf would
  // silently poison every recomputed probability of the row.
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h)
      for (int64_t i = 0; i < d.Nq; ++i) {
        const T L = lse(b, h, i, 0);
        if (std::isnan(L) || L == INFINITY)
          throw Error(fmt::format("lse: value {} at [{}, {}, {}, 0] (a log-sum-exp is finite, or -inf for a "
                                  "fully masked row)", L, b, h, i));
        // −inf says "no key visible": it would pass back zero gradients without a word, so
        // it must be true. Checked only on such rows (rare), against the visibility rules.
        if (L == -INFINITY && !options.sinks.empty())
          throw Error(fmt::format("lse: -inf at [{}, {}, {}, 0], but with sinks every row's L is at least its sink "
                                  "(pass the forward's lse)", b, h, i));
        // A score_mod may return −inf: then a row that sees keys can have L = −inf, and only
        // the scores would tell. Not checked.
        if (L == -INFINITY && options.score_mod == nullptr && has_unmasked_key(d, options, b, h, i))
          throw Error(fmt::format("lse: -inf at [{}, {}, {}, 0], but that row sees a key (-inf is only for a fully "
                                  "masked row; pass the forward's lse)", b, h, i));
      }
  return d;
}

void check_dropout_mask(TensorView<uint8_t> mask, const AttentionDims& d) {
  if (!mask.present()) return;
  require_shape(mask, {d.B, d.Hq, d.Nq, d.Nk}, "dropout mask");
  max_offset(mask, "dropout mask");
  require_no_self_overlap(mask, "dropout mask");
}

template <class T>
void check_row_output(const TensorView<T>& x, const AttentionDims& d, const char* name) {
  if (!x.present()) return;
  const Shape want{d.B, d.Hq, d.Nq, 1};
  if (x.shape() != want)
    throw Error(fmt::format("{}: shape {} should be {}", name, to_string(x.shape()), to_string(want)));
  max_offset(x, name);  // negative strides, or an offset past int64
}

#define ATTNLAB_INSTANTIATE(E, T)                                                                                  \
  template void check_finite<E>(ConstView<E>, const char*);                                                         \
  template void check_result_finite<E>(ConstView<E>, const char*);                                                  \
  template AttentionDims check_forward_args<E, T>(ConstView<E>, ConstView<E>, ConstView<E>, const AttentionOptions<T>&, \
                                                  TensorView<E>, TensorView<T>, ValueChecks);                      \
  template void check_deferred_values<E, T>(ConstView<E>, ConstView<E>, const AttentionOptions<T>&, bool);           \
  template AttentionDims check_backward_args<E, T>(ConstView<E>, ConstView<E>, ConstView<E>, ConstView<E>,           \
                                                   ConstView<T>, ConstView<E>, const AttentionOptions<T>&,           \
                                                   TensorView<E>, TensorView<E>, TensorView<E>, std::span<T>);
template void check_variants<float>(const AttentionOptions<float>&, const AttentionDims&);
template void check_variants<double>(const AttentionOptions<double>&, const AttentionDims&);
template void check_row_output<float>(const TensorView<float>&, const AttentionDims&, const char*);
template void check_row_output<double>(const TensorView<double>&, const AttentionDims&, const char*);
ATTNLAB_INSTANTIATE(float, float)
ATTNLAB_INSTANTIATE(double, double)
ATTNLAB_INSTANTIATE(bfloat16, float)
ATTNLAB_INSTANTIATE(float16, float)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab::detail
