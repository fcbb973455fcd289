#pragma once
// Dropout's random bits: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011), the counter-based generator PyTorch and FlashAttention
// use for dropout. A counter-based generator is a pure function of (key, counter), so
// the keep bit of any (b, h, i, j) can be computed by whoever needs it, in any order:
// the backward regenerates the forward's mask, every thread count draws the same bits,
// and the reference (this scalar code) and the engine (a SIMD copy of it in
// engine/philox-inl.h, tested to be bitwise equal) agree exactly.
//
// The keep bit of key j for row i of (batch b, head h):
//     words = Philox4x32-10(counter = (j / 4, i, h, b), key = (seed_lo, seed_hi))
//     keep  = words[j % 4] >= threshold(p),  threshold(p) = ⌊p · 2³²⌋
// so P(keep) = 1 − ⌊p·2³²⌋/2³², within 2⁻³² of 1 − p. Indices past 2³² wrap (no
// attention call comes near that).
#include <array>
#include <cmath>
#include <cstdint>

namespace attnlab::detail {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key increments (Weyl)

// Philox-4x32 with 10 rounds: Random123's philox4x32_10 (its known-answer vectors are tested).
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// Keep iff the word is at least this: ⌊p · 2³²⌋ (p in [0, 1), so it fits).
inline uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::floor(std::ldexp(p, 32))); }

// The random word of (b, h, i, j) (see the top of the file).
inline uint32_t dropout_word(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j) {
  const auto words = philox4x32_10({static_cast<uint32_t>(j >> 2), static_cast<uint32_t>(i),
                                    static_cast<uint32_t>(h), static_cast<uint32_t>(b)},
                                   {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return words[static_cast<size_t>(j & 3)];
}

inline bool dropout_keep(uint64_t seed, uint32_t threshold, int64_t b, int64_t h, int64_t i, int64_t j) {
  return dropout_word(seed, b, h, i, j) >= threshold;
}

}  // namespace attnlab::detail
