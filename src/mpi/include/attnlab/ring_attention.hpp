#pragma once
// Context-parallel (ring) attention over MPI (Liu et al. 2023, "Ring Attention"): the
// sequence is sharded across the ranks of a communicator, batch and heads whole. Each
// rank keeps its shard of Q (and dO); the K/V shards travel around the ring (rank r sends
// to r + 1, receives from r − 1) with non-blocking sends and receives, overlapped with the
// engine's compute on the block in hand. Partial results merge through their log-sum-exp
// in double, in a fixed order, so a run is bitwise repeatable for a given rank count and
// thread count. In the backward the dK/dV accumulators travel the ring with their block
// and arrive home after P hops.
//
// Self-attention only: the global q, k and v have the same sequence length N and the same
// sharding. Each rank's out, lse, dq, dk and dv are its shard of the one-process result.
//
// Layout (RingLayout): the sequence is cut into 2P chunks; rank r holds chunks r and
// 2P − 1 − r, in that order (the zigzag assignment). Under a causal mask chunk c sees c
// chunks before it and itself, so every rank gets chunks c and 2P − 1 − c: the same
// (2P − 1) + 1 chunk pairs of work, balanced to a chunk. Striping (row i on rank i mod P)
// balances as well but leaves every block half-masked at the granularity of single rows,
// so no block can run as a plain unmasked call and a tile-skipping engine skips nothing;
// zigzag keeps every block either fully visible, fully masked (skipped) or the causal
// diagonal of one chunk with itself (docs/scale-out.md).
//
// Options, against the one-process semantics (attention_options.hpp):
//   supported  every scale policy, causal (top_left; bottom_right equals it without key
//              padding), key padding, GQA/MQA, softcap, sinks (added once, in the final
//              merge; dsinks summed over ranks in rank order), the sliding window and ALiBi
//              (without key padding: each block call is placed in the sequence by its
//              query_offset and key_offset, so both are measured from the global diagonal),
//              check_finite; float32, bfloat16 and float16 (16-bit inputs are converted to
//              float32 once, the ring runs in float32, outputs are rounded once at the end:
//              the engine's own rule for 16-bit types).
//   rejected   (an Error on every rank) bool and additive masks, packed sequences, dropout,
//              mask_mod/score_mod/block_mask (each is defined on a full [Nq, Nk] mask or
//              layout, or on the block's local (b, h, i, j)); the window or ALiBi with key
//              padding (their diagonal moves with each batch entry's key length); nonzero
//              query_offset/key_offset (the ring places the blocks itself).
//
// Errors: shapes, options and (with check_finite) non-finite inputs are checked
// collectively before any data moves: every rank throws the same attnlab::Error naming
// the offending rank and its shape. A failure inside the ring on one rank (out of memory,
// an interrupt) leaves the others waiting in MPI: callers end the job with MPI_Abort
// (`attnlab … --context-parallel` does; under mpi4py, `python3 -m mpi4py script.py` aborts
// on an uncaught exception). A rank that dies is Open MPI's to report: mpirun ends the job.
#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::mpi {

// Which rows of the global sequence each rank holds: 2P chunks, rank r has chunks r and
// 2P − 1 − r (its shard is chunk r's rows, then chunk 2P − 1 − r's).
struct RingLayout {
  std::vector<int64_t> chunk_lengths;  // 2P entries, ≥ 0

  // Balanced: chunk c has ⌊N/2P⌋ rows, one more for c < N mod 2P.
  static RingLayout zigzag(int64_t n, int ranks);
  // Any chunk lengths (2P of them, each ≥ 0): uneven and empty shards.
  static RingLayout from_chunks(std::vector<int64_t> lengths);

  int ranks() const { return static_cast<int>(chunk_lengths.size() / 2); }
  int64_t total() const;
  int64_t chunk_start(int chunk) const;
  int first_chunk(int rank) const { return rank; }
  int second_chunk(int rank) const { return 2 * ranks() - 1 - rank; }
  int64_t shard_length(int rank) const;
  // The global row of row `local` of rank's shard.
  int64_t global_row(int rank, int64_t local) const;
};

// Time one rank spent, for measuring the overlap: compute is the engine's calls and
// the merges; wait is blocked in MPI waiting for blocks that were not there yet.
struct RingStats {
  double compute_seconds = 0;
  double wait_seconds = 0;
  int64_t bytes_sent = 0;
};

// q [B, Hq, n_r, d], k [B, Hkv, n_r, d], v [B, Hkv, n_r, dv] on rank r, n_r =
// layout.shard_length(r); outputs.out [B, Hq, n_r, dv], outputs.lse [B, Hq, n_r, 1] (no
// diagnostics, no dropout mask). options as for attention_forward on the whole sequence
// (key_lengths global). T: float, bfloat16 or float16 (engine::EngineElement). Collective.
template <class T>
typename engine::EngineElement<T>::returns ring_attention_forward(MPI_Comm comm, const RingLayout& layout,
                                                                  ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                                  const AttentionOptions<Accum<T>>& options,
                                                                  const ForwardOutputs<T>& outputs,
                                                                  const ComputeConfig& config = {},
                                                                  RingStats* stats = nullptr);

// Given this rank's shards of the forward's out and lse and of dO, writes its shards of
// grads.dq, dk, dv (overwritten), and with sinks grads.dsinks [Hq] (the global gradient, on
// every rank; an empty span skips it). Collective.
template <class T>
typename engine::EngineElement<T>::returns ring_attention_backward(
    MPI_Comm comm, const RingLayout& layout, ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out,
    ConstView<Accum<T>> lse, ConstView<T> grad_out, const AttentionOptions<Accum<T>>& options,
    const BackwardOutputs<T>& grads, const ComputeConfig& config = {}, RingStats* stats = nullptr);

}  // namespace attnlab::mpi
