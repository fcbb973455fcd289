// The bfloat16 dot-product peak: each thread runs kChains independent chains of
// VDPBF16PS on 512-bit vectors (AVX512_BF16), each lane adding a pair of bfloat16
// products. 12 chains reach what 24 do (Zen 4: 117 GFLOP/s per core either way, and 111
// with 24, the registers all but full): one 512-bit instruction every two cycles there,
// 32 FLOPs per cycle, the float32 FMA's own rate.
// a = b = 2⁻¹⁰ in every bfloat16 lane: each instruction adds 2·2⁻²⁰ to a lane, which
// stays finite and normal over any run. FLOPs = 64 per instruction (32 multiply-adds).
// Issued by inline asm, as the engine does (decode_target-inl.h): Debian's Highway 1.0.3 has no
// AVX512_BF16 target; the loop runs only where the CPU has it.
#include <immintrin.h>

#include <cstdint>

#include "peak_flops.hpp"

namespace attnlab::bench {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

constexpr int kChains = 12;

__attribute__((target("avx512f"))) float Bf16DotLoop(int64_t iters) {
  const __m512 ab = _mm512_castsi512_ps(_mm512_set1_epi32(0x3a803a80));  // bfloat16 2⁻¹⁰ in every half
  __m512 x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 32
    for (int c = 0; c < kChains; ++c) asm volatile("vdpbf16ps %1, %1, %0" : "+v"(x[c]) : "v"(ab));
  __m512 s = x[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, x[c]);
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
