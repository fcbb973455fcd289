// How the decode kernels load a row of K or V as float32 vectors, whatever holds it: the row
// codec, one per element type. float32, bfloat16 and float16 rows are their values (LoadAsFloat);
// a quantized cache's rows (RowType, plan.hpp) are codes that the codec dequantizes in registers,
// to exactly the values the cache's gather writes (core/kv_quantize.cpp's decode_row), so the
// kernels' operations on them are those on the gathered float32 rows, bit for bit. Included
// once per SIMD target.
#if defined(ATTNLAB_ENGINE_ROW_CODEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNLAB_ENGINE_ROW_CODEC_INL_H_
#undef ATTNLAB_ENGINE_ROW_CODEC_INL_H_
#else
#define ATTNLAB_ENGINE_ROW_CODEC_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "engine/gemm-inl.h"  // DF, VF, LoadAsFloat
#include "engine/plan.hpp"

HWY_BEFORE_NAMESPACE();
namespace attnlab::engine::HWY_NAMESPACE {
namespace {

// Rows of float32, bfloat16 or float16: `row` is the row's first element.
template <class E>
struct RowCodec {
  static constexpr bool kLoadsPairs = false;  // Load a vector at a time (LoadTwo: see the codes')
  static RowCodec Of(const Plan&, bool /*keys*/, int64_t /*h*/) { return {}; }
  // Columns [c, c + Lanes) of the row as floats (c a multiple of the lanes).
  HWY_INLINE VF Load(const E* HWY_RESTRICT row, size_t c) const { return LoadAsFloat(row + c); }
  HWY_INLINE void LoadTwo(const E* HWY_RESTRICT row, size_t c, VF& a, VF& b) const {
    a = Load(row, c), b = Load(row, c + hn::Lanes(DF()));
  }
  // The byte of the row to ask for beside the load of columns [c, c + Lanes).
  HWY_INLINE size_t AskedByte(size_t c) const { return c * sizeof(E); }
  size_t RowBytes(size_t cols) const { return cols * sizeof(E); }
};

// Rows of a quantized cache (KVBlocks::k_type, v_type): `row` is the row's first byte; int8 and int4 rows
// end in their group scales (kv_quantize.hpp), fp8 rows take the K/V head's scale.
template <RowType C>
struct RowCodec<CodeByte<C>> {
  static constexpr size_t kGroup = 32;  // channels per scale (kv_quantize.hpp's kQuantGroup)
  size_t scales = 0;                    // int8, int4: the scales' first byte in the row
  size_t row_bytes = 0;
  size_t asked_eighths = 8;             // the row's bytes per 8 columns, rounded up (AskedByte)
  float scale_256 = 256.0f;             // fp8: 256 × the K/V head's scale

  // int4 loads columns two vectors at a time (LoadTwo): one load of bytes gives both, and
  // unpacking them together took half the instructions of a vector at a time.
  static constexpr bool kLoadsPairs = C == RowType::int4 && HWY_TARGET != HWY_SCALAR;
  static RowCodec Of(const Plan& p, bool keys, int64_t h) {
    const KVBlocks& t = *p.kv_blocks;
    RowCodec rc;
    const size_t cols = static_cast<size_t>(keys ? p.dims.d : p.dims.dv);
    rc.row_bytes = static_cast<size_t>(keys ? t.k_row_bytes : t.v_row_bytes);
    rc.scales = C == RowType::int4 ? (cols + 1) / 2 : cols;
    rc.asked_eighths = (8 * rc.row_bytes + cols - 1) / cols;
    if constexpr (C == RowType::fp8_e4m3) rc.scale_256 = 256.0f * (keys ? t.k_head_scales : t.v_head_scales)[h];
    return rc;
  }

  HWY_INLINE VF Load(const CodeByte<C>* HWY_RESTRICT row, size_t c) const {
    const DF df;
    const auto* bytes = reinterpret_cast<const uint8_t*>(row);
    if constexpr (C == RowType::int8) {
      const hn::Rebind<int8_t, DF> d8;
      const hn::RebindToSigned<DF> di;
      const VF codes = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(bytes) + c)));
      return hn::Mul(codes, hn::Set(df, GroupScale(bytes, c)));
    } else if constexpr (C == RowType::int4) {
      return Int4Values(Int4Codes(bytes, c), GroupScale(bytes, c));
    } else {
      // e4m3's exponent and mantissa placed in a float16's (sign kept) make a float16 worth
      // the code's value / 256, subnormals included, converted exactly; times 256·scale
      // (exact: a power of two, and scale ≤ float's max / 448) it rounds once, as the code's
      // value times the scale does in decode_row.
      const hn::Rebind<uint8_t, DF> d8;
      const hn::Rebind<uint16_t, DF> d16;
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto x = hn::PromoteTo(d16, hn::LoadU(d8, bytes + c));
      const auto h = hn::Or(hn::ShiftLeft<8>(hn::And(x, hn::Set(d16, 0x80))), hn::ShiftLeft<7>(hn::And(x, hn::Set(d16, 0x7F))));
      return hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, h)), hn::Set(df, scale_256));
    }
  }
  // Columns [c, c + 2·Lanes) as two vectors, a and b.
  HWY_INLINE void LoadTwo(const CodeByte<C>* HWY_RESTRICT row, size_t c, VF& a, VF& b) const {
    const size_t L = hn::Lanes(DF());
#if HWY_TARGET != HWY_SCALAR
    if constexpr (C == RowType::int4) {
      // Lanes bytes: their low nibbles (the even channels) and high ones (the odd)
      // interleaved back into channel order, a vector's codes each half.
      const auto* bytes = reinterpret_cast<const uint8_t*>(row);
      const hn::Rebind<uint8_t, DF> d8;
      const auto x = hn::LoadU(d8, bytes + c / 2), nibble = hn::Set(d8, 0xF);
      const auto low = hn::And(x, nibble), high = hn::And(hn::ShiftRight<4>(x), nibble);
      const hn::RebindToSigned<DF> di;
      const hn::RebindToUnsigned<DF> du;
      const float sa = GroupScale(bytes, c), sb = c % kGroup + L < kGroup ? sa : GroupScale(bytes, c + L);
      const auto ca = hn::BitCast(di, hn::PromoteTo(du, hn::InterleaveLower(d8, low, high)));
      const auto cb = hn::BitCast(di, hn::PromoteTo(du, hn::InterleaveUpper(d8, low, high)));
      if constexpr (hn::MaxLanes(DF()) == 16) {
        // A vector holds the 16 values (code − 8)·s of the group: each lane looks its own up.
        const DF df;
        const VF offsets = hn::Sub(hn::Iota(df, 0.0f), hn::Set(df, 8.0f));
        const VF ta = hn::Mul(offsets, hn::Set(df, sa));
        a = hn::TableLookupLanes(ta, hn::IndicesFromVec(df, ca));
        b = hn::TableLookupLanes(sb == sa ? ta : hn::Mul(offsets, hn::Set(df, sb)), hn::IndicesFromVec(df, cb));
      } else {
        a = Int4Values(ca, sa);
        b = Int4Values(cb, sb);
      }
      return;
    }
#endif
    a = Load(row, c), b = Load(row, c + L);
  }
  // Each load asks for the byte at its share of the row's end, so that the requests of a
  // row's loads cover its codes and, with the last, its scales. In eighths, not by a division
  // beside each load, which would bound the few-row step (docs/tuning.md, the row codec);
  // exact whenever the columns are whole groups of 32, else a byte or two past the row (a
  // request only).
  HWY_INLINE size_t AskedByte(size_t c) const { return (c + hn::Lanes(DF())) * asked_eighths / 8 - 1; }
  size_t RowBytes(size_t) const { return row_bytes; }

 private:
  // int4 codes (0..15) times the group's scale s, less 8s: decode_row's (code − 8)·s.
  static HWY_INLINE VF Int4Values(hn::Vec<hn::RebindToSigned<DF>> codes, float s) {
    const DF df;
#if HWY_NATIVE_FMA
    // code·s − 8s in one fused multiply-add: exact before its one rounding (8s is exact).
    return hn::MulAdd(hn::ConvertTo(df, codes), hn::Set(df, s), hn::Set(df, -8.0f * s));
#else
    return hn::Mul(hn::ConvertTo(df, hn::Sub(codes, hn::Set(hn::RebindToSigned<DF>(), 8))), hn::Set(df, s));
#endif
  }
  // The int4 codes of columns [c, c + Lanes) as integers: Lanes/2 bytes, each the even
  // channel's code (low nibble) and the odd one's (high); as 16-bit lanes, low | high << 8
  // is the codes in channel order, one a byte.
  static HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> Int4Codes(const uint8_t* row, size_t c) {
    const hn::RebindToSigned<DF> di;
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(di, (row[c / 2] >> (4 * (c % 2))) & 0xF);
#else
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Half<decltype(d16)> dh16;
    const hn::Rebind<uint8_t, decltype(dh16)> dh8;
    const auto x = hn::PromoteTo(dh16, hn::LoadU(dh8, row + c / 2));
    const auto pairs = hn::Or(hn::And(x, hn::Set(dh16, 0xF)), hn::ShiftLeft<8>(hn::ShiftRight<4>(x)));
    const hn::Repartition<uint8_t, decltype(dh16)> d8;
    return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::BitCast(d8, pairs)));
#endif
  }
  HWY_INLINE float GroupScale(const uint8_t* row, size_t c) const {
    float s;
    std::memcpy(&s, row + scales + 4 * (c / kGroup), sizeof(s));
    return s;
  }
};

// Rows [j0, j0 + n) of the block table's K (keys) or V of head h, of element type E, decoded
// into float rows of dst (dst_stride apart).
template <class E>
void DecodeBlockRowsOf(const Plan& p, bool keys, int64_t h, int64_t j0, int64_t n, float* dst, size_t dst_stride) {
  const KVBlocks& t = *p.kv_blocks;
  const RowCodec<E> rc = RowCodec<E>::Of(p, keys, h);
  const size_t cols = static_cast<size_t>(keys ? p.dims.d : p.dims.dv), L = hn::Lanes(DF());
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = reinterpret_cast<const E*>(keys ? t.key(h, j0 + j) : t.value(h, j0 + j));
    float* out = dst + static_cast<size_t>(j) * dst_stride;
    for (size_t c = 0; c < cols; c += L) hn::StoreU(rc.Load(row, c), DF(), out + c);
  }
}

// DecodeBlockRowsOf for the type K's (keys) or V's rows hold: a tile for the tile step, or every
// tile of a table whose tiles are decoded (KVBlocks::decodes_tiles), whose kernels read float rows.
void DecodeBlockRows(const Plan& p, bool keys, int64_t h, int64_t j0, int64_t n, float* dst, size_t dst_stride) {
  switch (keys ? p.kv_blocks->k_type : p.kv_blocks->v_type) {
    case RowType::f32: return DecodeBlockRowsOf<float>(p, keys, h, j0, n, dst, dst_stride);
    case RowType::bf16: return DecodeBlockRowsOf<bfloat16>(p, keys, h, j0, n, dst, dst_stride);
    case RowType::f16: return DecodeBlockRowsOf<float16>(p, keys, h, j0, n, dst, dst_stride);
    case RowType::int8: return DecodeBlockRowsOf<CodeByte<RowType::int8>>(p, keys, h, j0, n, dst, dst_stride);
    case RowType::int4: return DecodeBlockRowsOf<CodeByte<RowType::int4>>(p, keys, h, j0, n, dst, dst_stride);
    case RowType::fp8_e4m3: return DecodeBlockRowsOf<CodeByte<RowType::fp8_e4m3>>(p, keys, h, j0, n, dst, dst_stride);
  }
}

}  // namespace
}  // namespace attnlab::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNLAB_ENGINE_ROW_CODEC_INL_H_
