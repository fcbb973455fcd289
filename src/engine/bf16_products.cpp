// bfloat16 products on VDPBF16PS (bf16_products.hpp): the packing into pairs, P's
// rounding, and the register-blocked product.
#include "engine/bf16_products.hpp"

#include <algorithm>
#include <cstring>

#include "attnlab/tensor.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTNLAB_BF16_PRODUCTS 1
#endif

namespace attnlab::engine::bf16 {

void pack_key_pairs(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t w, int64_t rs_out,
                    int64_t d, uint32_t* dst) {
  const int64_t pairs = (d + 1) / 2, st = x.stride(Axis::dim), rs = x.stride(Axis::seq);
  const bfloat16* src = n > 0 ? x.row(b, h, j0) : nullptr;
  // Eight key rows at a time, as the float32 packing (tile_ops-inl.h, PackTransposed):
  // their lines stay in L1 while every pair of dims is read from them.
  constexpr int64_t kRows = 8;
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    for (int64_t c = 0; c < pairs; ++c) {
      uint32_t* out = dst + c * rs_out;
      const bool whole = 2 * c + 1 < d;
      for (int64_t j = r0; j < r1; ++j) {
        const bfloat16* key = src + j * rs;
        out[j] = pair_word(key[2 * c * st], whole ? key[(2 * c + 1) * st] : bfloat16{});
      }
    }
  }
  for (int64_t c = 0; c < pairs; ++c) std::fill(dst + c * rs_out + n, dst + c * rs_out + w, 0u);
}

void pack_value_pairs(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t cols,
                      int64_t cols_pad, int64_t rs, uint32_t* dst) {
  const int64_t st = x.stride(Axis::dim);
  for (int64_t t = 0; 2 * t < n; ++t) {
    const bfloat16* r0 = x.row(b, h, j0 + 2 * t);
    const bfloat16* r1 = 2 * t + 1 < n ? x.row(b, h, j0 + 2 * t + 1) : nullptr;
    uint32_t* out = dst + t * rs;
    for (int64_t c = 0; c < cols; ++c) out[c] = pair_word(r0[c * st], r1 != nullptr ? r1[c * st] : bfloat16{});
    std::fill(out + cols, out + cols_pad, 0u);
  }
}

void pack_rows(ConstView<bfloat16> x, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t cols, int64_t cols_pad,
               bfloat16* dst) {
  const int64_t st = x.stride(Axis::dim);
  for (int64_t r = 0; r < rows; ++r) {
    const bfloat16* src = x.row(b, h, i0 + r);
    bfloat16* out = dst + r * cols_pad;
    if (st == 1) {
      std::memcpy(out, src, static_cast<size_t>(cols) * sizeof(bfloat16));
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = src[c * st];
    }
    std::fill(out + cols, out + cols_pad, bfloat16{});
  }
}

void transpose(const bfloat16* src, int64_t src_rs, int64_t rows, int64_t cols, int64_t rows_pad, bfloat16* dst,
               int64_t dst_rs) {
  for (int64_t c = 0; c < cols; ++c) {
    bfloat16* out = dst + c * dst_rs;
    for (int64_t r = 0; r < rows; ++r) out[r] = src[r * src_rs + c];
    std::fill(out + rows, out + rows_pad, bfloat16{});
  }
}

#ifdef ATTNLAB_BF16_PRODUCTS
// Everything below runs only where the CPU has AVX512_BF16 (the caller's check). Each function
// carries the target itself: clang ignores GCC's target pragma.
#define ATTNLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

namespace {

// Register blocking as the float32 microkernel's on AVX-512 (gemm-inl.h): 6 rows × 4
// vectors of C in 24 registers, 4 of B and a broadcast of A's pair.
constexpr int kRows = 6, kVecs = 4;

ATTNLAB_BF16_TARGET inline __m512i BroadcastPair(const bfloat16* a) {
  uint32_t word;
  std::memcpy(&word, a, sizeof(word));
  return _mm512_set1_epi32(static_cast<int>(word));
}

template <int R, int NV>
ATTNLAB_BF16_TARGET __attribute__((always_inline)) inline void Block(int64_t K, const bfloat16* A, int64_t a_rs, const uint32_t* B, int64_t b_rs, float* C, int64_t c_rs,
                  bool accumulate) {
  // C or zero by a masked load: a branch here made GCC keep the accumulators on the stack
  // between the loops.
  const __mmask16 keep = accumulate ? 0xffff : 0;
  __m512 c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_maskz_loadu_ps(keep, C + r * c_rs + 16 * v);
  // An odd K's last pair has no second row: B's half of it is loaded as zero (a masked
  // load, as fast as a plain one), and A's, a finite value, multiplies that zero.
  const int64_t pairs = (K + 1) / 2;
  const __mmask32 last = K % 2 != 0 ? 0x55555555u : 0xffffffffu;
  for (int64_t t = 0; t < pairs; ++t) {
    const uint32_t* bt = B + t * b_rs;
    const __mmask32 m = t + 1 < pairs ? 0xffffffffu : last;
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_epi16(m, bt + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512i ar = BroadcastPair(A + r * a_rs + 2 * t);
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], (__m512bh)ar, (__m512bh)bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * c_rs + 16 * v, c[r][v]);
}

template <int R>
ATTNLAB_BF16_TARGET __attribute__((always_inline)) inline void Rows(int nv, int64_t K, const bfloat16* A, int64_t a_rs, const uint32_t* B, int64_t b_rs, float* C,
                 int64_t c_rs, bool accumulate) {
  switch (nv) {
    case 1: return Block<R, 1>(K, A, a_rs, B, b_rs, C, c_rs, accumulate);
    case 2: return Block<R, 2>(K, A, a_rs, B, b_rs, C, c_rs, accumulate);
    case 3: return Block<R, 3>(K, A, a_rs, B, b_rs, C, c_rs, accumulate);
    default: return Block<R, 4>(K, A, a_rs, B, b_rs, C, c_rs, accumulate);
  }
}

}  // namespace

ATTNLAB_BF16_TARGET void round_rows(const float* src, int64_t src_rs, int64_t rows, int64_t cols, bfloat16* dst, int64_t dst_rs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * src_rs;
    bfloat16* d = dst + r * dst_rs;
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
      _mm512_storeu_si512(d + c, (__m512i)x);
    }
    for (; c < cols; c += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + c)));
  }
}

ATTNLAB_BF16_TARGET void round_row_pairs(const float* src, int64_t src_rs, int64_t rows, int64_t cols, uint32_t* dst, int64_t dst_rs) {
  for (int64_t t = 0; 2 * t < rows; ++t) {
    const float* r0 = src + 2 * t * src_rs;
    const float* r1 = 2 * t + 1 < rows ? r0 + src_rs : nullptr;
    uint32_t* out = dst + t * dst_rs;
    for (int64_t c = 0; c < cols; c += 16) {
      // Each value's bfloat16 bits widened to a 32-bit lane: the first row's in the low half.
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + c)));
      const __m512i hi = r1 != nullptr ? _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                                                               _mm512_loadu_ps(r1 + c))),
                                                           16)
                                       : _mm512_setzero_si512();
      _mm512_storeu_si512(out + c, _mm512_or_si512(lo, hi));
    }
  }
}

ATTNLAB_BF16_TARGET void gemm(int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t a_rs, const uint32_t* B, int64_t b_rs, float* C,
          int64_t c_rs, bool accumulate) {
  const int64_t nvec = N / 16;
  // Column chunks outside, so that a chunk's pairs of B stay in L1 while every row block passes.
  for (int64_t v0 = 0; v0 < nvec; v0 += kVecs) {
    const int nv = static_cast<int>(std::min<int64_t>(kVecs, nvec - v0));
    const uint32_t* Bc = B + v0 * 16;
    float* Cc = C + v0 * 16;
    int64_t r0 = 0;
    for (; r0 + kRows <= M; r0 += kRows) Rows<kRows>(nv, K, A + r0 * a_rs, a_rs, Bc, b_rs, Cc + r0 * c_rs, c_rs, accumulate);
    const bfloat16* Ar = A + r0 * a_rs;
    float* Cr = Cc + r0 * c_rs;
    switch (M - r0) {
      case 1: Rows<1>(nv, K, Ar, a_rs, Bc, b_rs, Cr, c_rs, accumulate); break;
      case 2: Rows<2>(nv, K, Ar, a_rs, Bc, b_rs, Cr, c_rs, accumulate); break;
      case 3: Rows<3>(nv, K, Ar, a_rs, Bc, b_rs, Cr, c_rs, accumulate); break;
      case 4: Rows<4>(nv, K, Ar, a_rs, Bc, b_rs, Cr, c_rs, accumulate); break;
      case 5: Rows<5>(nv, K, Ar, a_rs, Bc, b_rs, Cr, c_rs, accumulate); break;
      default: break;
    }
  }
}

#undef ATTNLAB_BF16_TARGET
#else
// Not an x86 compiler: no caller ever asks (cpu_has_bf16_dot_products() is false there).
void round_rows(const float*, int64_t, int64_t, int64_t, bfloat16*, int64_t) {}
void round_row_pairs(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) {}
void gemm(int64_t, int64_t, int64_t, const bfloat16*, int64_t, const uint32_t*, int64_t, float*, int64_t, bool) {}
#endif

}  // namespace attnlab::engine::bf16
