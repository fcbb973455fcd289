#pragma once
// The tiled forward's and backward's products on AVX512_BF16's VDPBF16PS for bfloat16 inputs: each
// instruction adds, in 16 float lanes, the products of 16 pairs of bfloat16 values, twice
// the multiply-adds of a float32 FMA at the same issue rate on Zen 5 (docs/tuning.md, "The
// bfloat16 dot-product peak"). Operands are packed in the pair-interleaved layout the
// instruction wants: the two bfloat16 values that one lane multiplies are adjacent.
// Products are exact in float32; sums are float32, pair by pair.
//
// Intrinsics live here only (Debian 12's Highway 1.0.3 has no target with AVX512_BF16);
// the functions that run them are compiled for that instruction set alone and must be
// called only where cpu_has_bf16_dot_products() (plan.hpp) is true.
#include <cstdint>

#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::engine::bf16 {

// A bfloat16 pair as one 32-bit word: the first value in the low half (the element order
// in memory), as VDPBF16PS reads a lane.
inline uint32_t pair_word(bfloat16 lo, bfloat16 hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}

// The row stride, in words, of a pair-packed B operand whose rows are `width` words long
// (a multiple of 16): one cache line more where the room allows it (`padded`), so that
// consecutive rows start in different L1 sets. Rows of 1 KiB (a key tile of 256) or
// 512 B (dv = 128) otherwise fall into a quarter or half of L1's 64 sets, which a
// product's 64 or 128 rows of B then overflow.
inline int64_t pair_row_stride(int64_t width, bool padded) { return padded ? width + 16 : width; }

// Keys [j0, j0 + n) of x[b, h] as the B operand of S = Q·Kᵀ: word (c, j) at
// dst[c·rs + j] holds the pair of dims 2c, 2c + 1 of key j0 + j, for c < ceil(d/2), j < w;
// zero for j in [n, w) and for dim d when d is odd.
void pack_key_pairs(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t w, int64_t rs,
                    int64_t d, uint32_t* dst);

// Rows [j0, j0 + n) of x[b, h] (values) as the B operand of O += P·V: word (t, c) at
// dst[t·rs + c] holds column c of rows j0 + 2t and j0 + 2t + 1, for t < ceil(n/2),
// c < cols_pad; zero for c in [cols, cols_pad) and for the row past an odd n.
void pack_value_pairs(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols,
                      int64_t cols_pad, int64_t rs, uint32_t* dst);

// Rows [i0, i0 + rows) of x[b, h] (queries) as the A operand: bfloat16 rows of
// `cols_pad` values (cols_pad even), zero past `cols`.
void pack_rows(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t cols, int64_t cols_pad,
               bfloat16* dst);

// dst[r·dst_rs + c] = src[r·src_rs + c] rounded to bfloat16 (to nearest even), r < rows,
// c < cols (cols a multiple of 16): P for its product, as FlashAttention rounds it.
void round_rows(const float* src, int64_t src_rs, int64_t rows, int64_t cols, bfloat16* dst, int64_t dst_rs);

// Rows [0, rows) of src (float32, row stride src_rs) rounded to bfloat16 (to nearest even)
// as the B operand of a product over them: word (t, c) at dst[t·dst_rs + c] holds column c
// of rows 2t and 2t + 1, for t < ceil(rows/2), c < cols (a multiple of 16); zero for the
// row past an odd count. P for dVᵀ += dOᵀ·P and dS for dKᵀ += Qᵀ·dS.
void round_row_pairs(const float* src, int64_t src_rs, int64_t rows, int64_t cols, uint32_t* dst, int64_t dst_rs);

// The bfloat16 matrix src [rows × cols] (row stride src_rs) transposed into dst [cols ×
// rows_pad] (row stride dst_rs), zero in columns [rows, rows_pad): Qᵀ and dOᵀ as A operands.
void transpose(const bfloat16* src, int64_t src_rs, int64_t rows, int64_t cols, int64_t rows_pad, bfloat16* dst,
               int64_t dst_rs);

// C[M × N] (+)= A[M × K] · B[K × N], N a multiple of 16. A: bfloat16 rows at A + r·a_rs
// (element K readable when K is odd: it is multiplied by zero). B: pair words,
// B[t·b_rs + n] holding rows 2t and 2t + 1 of column n (pack_key_pairs, pack_value_pairs);
// when K is odd the last pair's second row is not read. float32 sums, in the order of k.
void gemm(int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t a_rs, const uint32_t* B, int64_t b_rs, float* C,
          int64_t c_rs, bool accumulate);

}  // namespace attnlab::engine::bf16
