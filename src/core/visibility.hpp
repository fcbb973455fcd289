#pragma once
// Which keys a query row sees: the masking semantics of attention_options.hpp, in one
// place, used by the reference, the engine's kernels and tile skipping, and validation.
// A key j is visible to row i of (batch b, head h) when it lies in the prefix that
// causality and key padding leave, [0, key_end), and the boolean mask (if any) allows it.
// (An additive −inf removes a key from the softmax too, but as a score, not here.)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::detail {

// The validated sizes of one attention call (the names of attention_options.hpp).
struct AttentionDims {
  int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nk = 0, d = 0, dv = 0;
  int64_t group() const { return Hq / Hkv; }  // query heads per key/value head
};

// Keys visible to row i of batch b by causality and padding alone form the
// prefix [0, key_end): everything at or past key_end is masked for this row.
template <class T>
inline int64_t key_end(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t i) {
  const int64_t n_keys = options.key_lengths.empty() ? dims.Nk : options.key_lengths[static_cast<size_t>(b)];
  int64_t end = n_keys;
  if (options.causal == Causal::top_left) end = std::min(end, i + 1);
  if (options.causal == Causal::bottom_right) end = std::min(end, i + (n_keys - dims.Nq) + 1);
  return std::max<int64_t>(end, 0);
}

// The mask row [b, h, i, :] with broadcasting over size-1 batch/head axes, or
// nullptr when the mask is absent. Elements are mask.stride(kDim) apart.
template <class M>
inline const M* mask_row(ConstView<M> mask, int64_t b, int64_t h, int64_t i) {
  if (!mask.present()) return nullptr;
  return mask.row(mask.batch() == 1 ? 0 : b, mask.heads() == 1 ? 0 : h, i);
}

// Number of keys row i may see (causality, padding and the boolean mask): the n
// of the log-n-aware scale policies.
template <class T>
inline int64_t visible_keys(const AttentionDims& dims, const AttentionOptions<T>& options,
                            int64_t b, int64_t h, int64_t i) {
  const int64_t end = key_end(dims, options, b, i);
  const uint8_t* bm = mask_row(options.bool_mask, b, h, i);
  if (bm == nullptr) return end;
  const int64_t st = options.bool_mask.stride(kDim);
  int64_t n = 0;
  for (int64_t j = 0; j < end; ++j) n += bm[j * st] != 0;
  return n;
}

// True if row i of (b, h) sees a key whose additive mask value (if any) is not −inf: a
// row whose forward L cannot be −inf (the backward checks a given lse against it).
template <class T>
inline bool has_unmasked_key(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t h,
                             int64_t i) {
  const int64_t end = key_end(dims, options, b, i);
  const uint8_t* bm = mask_row(options.bool_mask, b, h, i);
  const T* am = mask_row(options.additive_mask, b, h, i);
  for (int64_t j = 0; j < end; ++j)
    if ((bm == nullptr || bm[j * options.bool_mask.stride(kDim)] != 0) &&
        (am == nullptr || am[j * options.additive_mask.stride(kDim)] != -INFINITY))
      return true;
  return false;
}

}  // namespace attnlab::detail
