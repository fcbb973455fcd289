#pragma once
// Which keys a query row sees: the masking semantics of attention_options.hpp and
// attention_variants.hpp, in one place, used by the reference, the engine's kernels and
// tile skipping, and validation. A key j is visible to row i of (batch b, head h) when
// it lies in the row's key range [key_begin, key_end), which causality, key padding, the
// sliding window and packed sequences leave, and the boolean mask and mask_mod (if any)
// allow it. (An additive −inf removes a key from the softmax too, but as a score, not here.)
//
// Within one batch entry, key_begin and key_end never decrease as i grows (each is a
// clamp of the row's diagonal, and packed sequences are in order): the rows of a query
// tile that see any key of a key tile are a contiguous run, and the key tiles a query
// tile sees are a contiguous run. The engine's tile skipping rests on this.
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

// The sequence row i of batch b belongs to, and the frame its causal mask, window and
// ALiBi are written in (attention_variants.hpp): keys [key0, key0 + n_keys) exist for the
// row, and diag is its bottom-right diagonal, i_local + n_keys − n_q, as a key index.
struct RowFrame {
  int64_t seq = 0;      // the batch entry, or the packed sequence (cu_seqlens) holding the row
  int64_t key0 = 0;     // the sequence's first key
  int64_t n_keys = 0;   // its keys (after padding)
  int64_t i_local = 0;  // the row's index within its sequence
  int64_t shift = 0;    // query_offset − key_offset: the row's index as a key index, less i_local
  int64_t diag = 0;     // key0 + i_local + shift + n_keys − n_q
};

template <class T>
inline bool is_packed(const AttentionOptions<T>& o) {
  return !o.cu_seqlens_q.empty();
}

// Sequences of the call: packed ones, or one per batch entry (the n_seq of alibi_slopes).
template <class T>
inline int64_t sequence_count(const AttentionDims& dims, const AttentionOptions<T>& o) {
  return is_packed(o) ? static_cast<int64_t>(o.cu_seqlens_q.size()) - 1 : dims.B;
}

template <class T>
inline RowFrame row_frame(const AttentionDims& dims, const AttentionOptions<T>& o, int64_t b, int64_t i) {
  RowFrame f;
  int64_t n_q = dims.Nq;
  if (!is_packed(o)) {
    f.seq = b;
    f.n_keys = o.key_lengths.empty() ? dims.Nk : o.key_lengths[static_cast<size_t>(b)];
    f.i_local = i;
  } else {
    // The last sequence starting at or before i (empty sequences before it are passed over).
    const auto& cq = o.cu_seqlens_q;
    const auto s = static_cast<size_t>(std::upper_bound(cq.begin(), cq.end(), i) - cq.begin()) - 1;
    f.seq = static_cast<int64_t>(s);
    f.key0 = o.cu_seqlens_k[s];
    f.n_keys = o.cu_seqlens_k[s + 1] - f.key0;
    f.i_local = i - cq[s];
    n_q = cq[s + 1] - cq[s];
  }
  f.shift = o.query_offset - o.key_offset;
  f.diag = f.key0 + f.i_local + f.shift + f.n_keys - n_q;
  return f;
}

// The keys [begin, end) that causality, padding, the window and packing leave row i;
// begin ≤ end always (an empty range sits inside the row's sequence).
struct KeyRange {
  int64_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};

inline KeyRange key_range(const RowFrame& f, Causal causal, const Window& window) {
  const int64_t seq_end = f.key0 + f.n_keys;
  int64_t lo = f.key0, hi = seq_end;
  if (causal == Causal::top_left) hi = std::min(hi, f.key0 + f.i_local + f.shift + 1);
  if (causal == Causal::bottom_right) hi = std::min(hi, f.diag + 1);
  // Written so that no sum overflows, whatever the window (|diag| ≤ 2^54: offsets are at
  // most 2^53). With offsets the diagonal may lie past the sequence's keys: lo is clamped.
  if (window.left >= 0 && f.diag - f.key0 > window.left) lo = std::min(f.diag - window.left, seq_end);
  if (window.right >= 0 && window.right < seq_end - f.diag) hi = std::min(hi, f.diag + window.right + 1);
  return {lo, std::max(lo, hi)};
}

template <class T>
inline KeyRange key_range(const AttentionDims& dims, const AttentionOptions<T>& o, int64_t b, int64_t i) {
  return key_range(row_frame(dims, o, b, i), o.causal, o.window);
}

// Keys at or past key_end are masked for row i (and, with a window or packed sequences,
// those before key_begin).
template <class T>
inline int64_t key_end(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t i) {
  return key_range(dims, options, b, i).end;
}

template <class T>
inline int64_t key_begin(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t i) {
  return key_range(dims, options, b, i).begin;
}

// ALiBi's slope for query head h of the row's sequence (alibi_slopes is [Hq] or [n_seq, Hq]).
template <class T>
inline T alibi_slope(const AttentionDims& dims, const AttentionOptions<T>& o, int64_t seq, int64_t h) {
  const auto n = static_cast<int64_t>(o.alibi_slopes.size());
  return o.alibi_slopes[static_cast<size_t>(n == dims.Hq ? h : seq * dims.Hq + h)];
}

// The mask row [b, h, i, :] with broadcasting over size-1 batch/head axes, or
// nullptr when the mask is absent. Elements are mask.stride(Axis::dim) apart.
template <class M>
inline const M* mask_row(ConstView<M> mask, int64_t b, int64_t h, int64_t i) {
  if (!mask.present()) return nullptr;
  return mask.row(mask.batch() == 1 ? 0 : b, mask.heads() == 1 ? 0 : h, i);
}

// Calls f(j) for every key j of row i's key range that the boolean mask and mask_mod
// allow, in increasing order; stops early when f returns true. Returns whether it stopped.
template <class T, class F>
inline bool for_each_visible_key(const AttentionDims& dims, const AttentionOptions<T>& o, int64_t b, int64_t h,
                                 int64_t i, F&& f) {
  const KeyRange r = key_range(dims, o, b, i);
  const uint8_t* bm = mask_row(o.bool_mask, b, h, i);
  const int64_t st = o.bool_mask.stride(Axis::dim);
  constexpr int64_t kChunk = 256;
  uint8_t keep[kChunk];
  for (int64_t j0 = r.begin; j0 < r.end; j0 += kChunk) {
    const int64_t n = std::min(kChunk, r.end - j0);
    if (o.mask_mod != nullptr) o.mask_mod->keep_row(b, h, i, j0, n, keep);
    for (int64_t j = j0; j < j0 + n; ++j) {
      if (bm != nullptr && bm[j * st] == 0) continue;
      if (o.mask_mod != nullptr && keep[j - j0] == 0) continue;
      if (f(j)) return true;
    }
  }
  return false;
}

// Number of keys row i may see (everything but the additive mask): the n of the
// log-n-aware scale policies.
template <class T>
inline int64_t visible_keys(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t h,
                            int64_t i) {
  if (options.bool_mask.present() || options.mask_mod != nullptr) {
    int64_t n = 0;
    for_each_visible_key(dims, options, b, h, i, [&](int64_t) { return ++n, false; });
    return n;
  }
  const KeyRange r = key_range(dims, options, b, i);
  return r.end - r.begin;
}

// True if row i of (b, h) sees a key whose additive mask value (if any) is not −inf: a
// row whose forward L cannot be −inf (the backward checks a given lse against it).
template <class T>
inline bool has_unmasked_key(const AttentionDims& dims, const AttentionOptions<T>& options, int64_t b, int64_t h,
                             int64_t i) {
  const T* am = mask_row(options.additive_mask, b, h, i);
  const int64_t st = options.additive_mask.stride(Axis::dim);
  return for_each_visible_key(dims, options, b, h, i,
                              [&](int64_t j) { return am == nullptr || am[j * st] != -INFINITY; });
}

}  // namespace attnlab::detail
