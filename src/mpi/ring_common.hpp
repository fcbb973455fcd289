#pragma once
// What the ring's forward and backward share: the collective checks, the plan of engine
// calls for a block, the per-row scale, sub-views and conversions, MPI waits with timing.
#include <mpi.h>

#include <optional>
#include <type_traits>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/ring_attention.hpp"

namespace attnlab::mpi::detail {

// An argument of the call as every rank's check sees it: its name, shape and presence.
struct Argument {
  const char* name;
  Shape shape;
  bool present;
};

// A float copy of an input whose values prepare checks, and its name: with check_finite, every
// value finite; a log-sum-exp (the backward's lse) always, as the engine's backward does: NaN
// and +inf refused, -inf only on a row that sees no key and has no sink.
struct FiniteInput {
  const char* name;
  const Tensor<float>* tensor;
  bool log_sum_exp = false;
};

// The call, checked on every rank alike.
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  const RingLayout* layout = nullptr;
  int64_t B = 0, Hq = 0, Hkv = 0, d = 0, dv = 0;
  bool causal = false;
  std::vector<int64_t> key_lengths;  // global; empty = none
  ScalePolicy scale{};
  // Scale policies that depend on the visible key count: q is pre-multiplied by each
  // row's scale (its global count) and the blocks run with scale 1.
  bool prescale = false;
  std::optional<double> softcap;
  std::vector<float> sinks;
  // Measured from each row's global diagonal: every block call is placed by its offsets.
  Window window{};
  std::vector<float> alibi_slopes;

  bool positional() const { return window.present() || !alibi_slopes.empty(); }

  int next() const { return (rank + 1) % size; }
  int prev() const { return (rank + size - 1) % size; }
  int64_t rows(int r) const { return layout->shard_length(r); }
  // The rank whose K/V block this rank holds at step t of the ring.
  int source(int step) const { return (rank - step % size + size) % size; }
};

// Collective: gathers every rank's argument shapes, options and finiteness, and throws the
// same Error on every rank if any is wrong. args: q, k, v first, then the rest in the
// order of expected_shape's names.
Ring prepare(MPI_Comm comm, const RingLayout& layout, std::span<const Argument> args,
             const AttentionOptions<float>& options, std::span<const FiniteInput> finite_inputs);

// One engine call of a step: this rank's rows [q0, q0 + nq) against rows [k0, k0 + nk)
// of the block it holds; diagonal = a chunk against itself (causal, top-left).
struct BlockCall {
  int64_t q0, nq, k0, nk;
  int64_t key_start;  // the global row of the call's first key (for key padding)
  bool diagonal;
  // Where the call sits in the sequence (AttentionOptions::query_offset, key_offset), for the
  // window and ALiBi.
  int64_t query_offset = 0, key_offset = 0;
};
std::vector<BlockCall> block_calls(const Ring& ring, int source);

// The options of one call; key_lengths is its storage.
AttentionOptions<float> block_options(const Ring& ring, const BlockCall& call, std::vector<int64_t>& key_lengths);

// With prescale, each row's scale [B · n_rank] (0 for a row that sees no key); else empty.
std::vector<double> row_scales(const Ring& ring);
// t[b, h, i, :] *= scale[b · n + i] (rounded to float).
void scale_rows(Tensor<float>& t, const std::vector<double>& scale);

// Rows [r0, r0 + n) of a view.
template <class T>
TensorView<T> rows(TensorView<T> t, int64_t r0, int64_t n) {
  Shape s = t.shape();
  s[static_cast<int>(Axis::seq)] = n;
  return {t.data() + r0 * t.stride(Axis::seq), s, t.strides()};
}

// A contiguous float copy (empty for a shape with a negative size: prepare names it).
template <class T>
Tensor<float> to_float(ConstView<T> x) {
  for (int64_t s : x.shape())
    if (s < 0) return {};
  Tensor<float> y(x.shape());
  float* o = y.data();
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t h = 0; h < x.heads(); ++h)
      for (int64_t i = 0; i < x.seq(); ++i)
        for (int64_t c = 0; c < x.dim(); ++c) {
          if constexpr (std::is_same_v<T, float>)
            *o++ = x(b, h, i, c);
          else
            *o++ = x(b, h, i, c).to_float();
        }
  return y;
}

// A contiguous copy in the same type (shapes checked by prepare).
template <class T>
Tensor<T> contiguous(ConstView<T> x) {
  Tensor<T> y(x.shape());
  T* o = y.data();
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t h = 0; h < x.heads(); ++h)
      for (int64_t i = 0; i < x.seq(); ++i)
        for (int64_t c = 0; c < x.dim(); ++c) *o++ = x(b, h, i, c);
  return y;
}

template <class T>
void store(const Tensor<float>& x, TensorView<T> y) {
  const float* s = x.data();
  for (int64_t b = 0; b < y.batch(); ++b)
    for (int64_t h = 0; h < y.heads(); ++h)
      for (int64_t i = 0; i < y.seq(); ++i)
        for (int64_t c = 0; c < y.dim(); ++c) {
          if constexpr (std::is_same_v<T, float>)
            y(b, h, i, c) = *s++;
          else
            y(b, h, i, c) = T::from_float(*s++);
        }
}

template <class T>
Argument argument(const char* name, const TensorView<T>& x) {
  return {name, x.shape(), x.data() != nullptr || x.numel() == 0};
}

// A contiguous view of shape [B, heads, n, dim] at the start of `data`.
inline TensorView<float> packed(float* data, int64_t B, int64_t heads, int64_t n, int64_t dim) {
  return {data, Shape{B, heads, n, dim}};
}

// The element count of an MPI message (prepare has checked that a block fits in an int).
int message_count(int64_t elements);

// Waits for the requests, adding the time blocked to stats.
void wait(std::vector<MPI_Request>& requests, RingStats* stats);

double now();

}  // namespace attnlab::mpi::detail
