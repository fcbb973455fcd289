// float32 rows rounded to bfloat16 or float16 (round_rows.hpp), compiled once per SIMD target
// and chosen at run time. Each lane does float16.hpp's from_float in the same integer steps
// (and, for float16's subnormals, the same float add), so the bits are from_float's on every
// target; the tail takes from_float itself. from_float branches, so a loop over it is not
// vectorised: docs/engine.md, "bfloat16 and float16", has the cost of one.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/round_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <type_traits>

#include "engine/round_rows.hpp"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DU = hn::ScalableTag<uint32_t>;
using VU = hn::Vec<DU>;

// Whether a > b, for bit patterns below 2^31 (a float's magnitude): a signed compare, which
// every target has.
HWY_INLINE hn::Mask<DU> Above(VU a, uint32_t b) {
  const hn::RebindToSigned<DU> di;
  return hn::RebindMask(DU(), hn::Gt(hn::BitCast(di, a), hn::Set(di, static_cast<int32_t>(b))));
}

// bfloat16::from_float's bits in the low half of each lane.
HWY_INLINE VU Bfloat16Bits(VU x) {
  const DU du;
  const VU magnitude = hn::And(x, hn::Set(du, 0x7fffffffu));
  const VU odd = hn::And(hn::ShiftRight<16>(x), hn::Set(du, 1u));
  const VU rounded = hn::Add(x, hn::Add(hn::Set(du, 0x7fffu), odd));  // carries into the exponent, up to inf
  const VU quiet_nan = hn::Or(x, hn::Set(du, 0x00400000u));            // (x >> 16) | 0x40
  return hn::ShiftRight<16>(hn::IfThenElse(Above(magnitude, 0x7f800000u), quiet_nan, rounded));
}

// float16::from_float's bits in the low half of each lane: its three cases computed in every
// lane and one kept.
HWY_INLINE VU Float16Bits(VU x) {
  const DU du;
  const hn::RebindToFloat<DU> df;
  const VU sign = hn::And(hn::ShiftRight<16>(x), hn::Set(du, 0x8000u));
  const VU m = hn::And(x, hn::Set(du, 0x7fffffffu));
  // ≥ 65536, inf or NaN: ±inf, or a quiet NaN keeping the payload's top bits.
  const VU nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(m), hn::Set(du, 0x3ffu)));
  const VU huge = hn::IfThenElse(Above(m, 0x7f800000u), nan, hn::Set(du, 0x7c00u));
  // Below 2^-14: the float adder rounds to a multiple of 2^-24.
  const VU sum = hn::BitCast(du, hn::Add(hn::BitCast(df, m), hn::Set(df, 0.5f)));
  const VU tiny = hn::Sub(sum, hn::Set(du, 0x3f000000u));
  // Otherwise the exponent rebiased by an add whose carry rounds.
  const VU odd = hn::And(hn::ShiftRight<13>(m), hn::Set(du, 1u));
  const VU normal = hn::ShiftRight<13>(hn::Add(m, hn::Add(hn::Set(du, 0xc8000fffu), odd)));
  const VU r = hn::IfThenElse(Above(m, 0x477fffffu), huge,
                              hn::IfThenElse(Above(m, 0x387fffffu), normal, tiny));
  return hn::Or(sign, r);
}

template <class E>
void RoundRowsImpl(const float* src, E* dst, int64_t n) {
  const DU du;
  const hn::Rebind<uint16_t, DU> d16;
  const auto L = static_cast<int64_t>(hn::Lanes(du));
  const auto* in = reinterpret_cast<const uint32_t*>(src);
  auto* out = reinterpret_cast<uint16_t*>(dst);
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const VU x = hn::LoadU(du, in + j);
    const VU bits = std::is_same_v<E, float16> ? Float16Bits(x) : Bfloat16Bits(x);
    hn::StoreU(hn::TruncateTo(d16, bits), d16, out + j);
  }
  for (; j < n; ++j) dst[j] = E::from_float(src[j]);
}

}  // namespace

void RoundRowsBf16(const float* src, bfloat16* dst, int64_t n) { RoundRowsImpl(src, dst, n); }
void RoundRowsF16(const float* src, float16* dst, int64_t n) { RoundRowsImpl(src, dst, n); }
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnlab::engine {

HWY_EXPORT(RoundRowsBf16);
HWY_EXPORT(RoundRowsF16);

void round_rows(const float* src, bfloat16* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(RoundRowsBf16)(src, dst, n); }
void round_rows(const float* src, float16* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(RoundRowsF16)(src, dst, n); }

}  // namespace attnlab::engine
#endif  // HWY_ONCE
