// The bfloat16 dot-product peak: each thread runs kChains independent chains of
// VDPBF16PS on 512-bit vectors (AVX512_BF16), each lane adding a pair of bfloat16
// products: 64 FLOPs per instruction (32 multiply-adds), twice the float32 FMA's 32.
// kChains = 12, the FMA probe's chain count on AVX-512 (peak_flops.cpp), so that the two
// figures differ only by the instruction.
// The chains are twelve named vectors, not an array, under a target that has AVX512_BF16,
// so that the compiler keeps them in registers: an array of chains fed to inline asm
// under target("avx512f") alone was kept on the stack, and each instruction then sat
// between a load and a store, timing store-to-load forwarding instead (about 150 GFLOP/s
// a thread on Zen 5, against about 390 for the registers). `objdump -d` of the loop shows
// only register operands (docs/tuning.md, "The bfloat16 dot-product peak").
// a = b = 2⁻¹⁰ in every bfloat16 lane: each instruction adds 2·2⁻²⁰ to a lane, which
// stays finite and normal over any run. Runs only where the CPU has the instruction
// (cpuid, __builtin_cpu_supports); elsewhere the probe reports that it is not available.
#include <immintrin.h>

#include <cstdint>

#include "peak_flops.hpp"

namespace attnlab::bench {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

constexpr int kChains = 12;

__attribute__((target("avx512f,avx512bf16"), noinline)) float Bf16DotLoop(int64_t iters) {
  const __m512bh ab = (__m512bh)_mm512_set1_epi32(0x3a803a80);  // bfloat16 2⁻¹⁰ in every half
  // Distinct starting values: twelve identical chains would be computed once.
  __m512 x0 = _mm512_set1_ps(0.0f), x1 = _mm512_set1_ps(1.0f), x2 = _mm512_set1_ps(2.0f), x3 = _mm512_set1_ps(3.0f),
         x4 = _mm512_set1_ps(4.0f), x5 = _mm512_set1_ps(5.0f), x6 = _mm512_set1_ps(6.0f), x7 = _mm512_set1_ps(7.0f),
         x8 = _mm512_set1_ps(8.0f), x9 = _mm512_set1_ps(9.0f), x10 = _mm512_set1_ps(10.0f), x11 = _mm512_set1_ps(11.0f);
  for (int64_t i = 0; i < iters; ++i) {
    x0 = _mm512_dpbf16_ps(x0, ab, ab);
    x1 = _mm512_dpbf16_ps(x1, ab, ab);
    x2 = _mm512_dpbf16_ps(x2, ab, ab);
    x3 = _mm512_dpbf16_ps(x3, ab, ab);
    x4 = _mm512_dpbf16_ps(x4, ab, ab);
    x5 = _mm512_dpbf16_ps(x5, ab, ab);
    x6 = _mm512_dpbf16_ps(x6, ab, ab);
    x7 = _mm512_dpbf16_ps(x7, ab, ab);
    x8 = _mm512_dpbf16_ps(x8, ab, ab);
    x9 = _mm512_dpbf16_ps(x9, ab, ab);
    x10 = _mm512_dpbf16_ps(x10, ab, ab);
    x11 = _mm512_dpbf16_ps(x11, ab, ab);
  }
  const __m512 s = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                    _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7))),
      _mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)));
  return _mm512_cvtss_f32(s);
}

}  // namespace

std::optional<Peak> measure_bf16_dot_peak(int threads, double seconds, int trials) {
  if (!__builtin_cpu_supports("avx512bf16")) return std::nullopt;
  Peak peak = measure_loop_peak(Bf16DotLoop, 64.0 * kChains, threads, seconds, trials);
  peak.target = "AVX512_BF16";
  peak.lanes = 16;
  peak.chains = kChains;
  return peak;
}
#else
std::optional<Peak> measure_bf16_dot_peak(int, double, int) { return std::nullopt; }
#endif

}  // namespace attnlab::bench
