#pragma once
// `attnlab attention … --context-parallel` and `attnlab attention-backward … --context-parallel`
// under mpirun: rank 0 (the lead) reads the .npy files as without the flag, sends each
// rank its zigzag shard of the sequence (attnlab/ring_attention.hpp), every rank runs
// the ring, and the lead gathers the results and writes them as without the flag. The
// other ranks (followers) read and write nothing. Self-attention only (Nq = Nk), float32
// and 16-bit files; options as the ring takes them (--scale, --causal, --softcap, --sinks).
// Built without MPI, the flag is an error.
#include <functional>
#include <string>
#include <vector>

#include "npy_attention.hpp"

namespace attnlab::cli::cp {

// Runs a command under MPI: `lead` on rank 0 (it reads the files, calls lead_*, writes),
// `follow` (a follow_*) on the others. The flags the ring cannot take are an error on every
// rank; when the lead fails before the ring, the followers stop with its message.
void run(const AttentionFlags& f, const std::function<void()>& lead, const std::function<void()>& follow);

// The lead's side: p as read from the files; writes the whole results.
template <class T>
void lead_forward(const AttentionFlags& f, const AttentionProblem<T>& p, Tensor<T>& out, Tensor<ScalarOf<T>>& lse);
template <class T>
void lead_backward(const AttentionFlags& f, const AttentionProblem<T>& p, const Tensor<T>& grad_out, Tensor<T>& dq,
                   Tensor<T>& dk, Tensor<T>& dv, std::vector<ScalarOf<T>>& dsinks);

// A follower's side of the same commands (dsinks: whether --dsinks was asked for).
void follow_forward(const AttentionFlags& f);
void follow_backward(const AttentionFlags& f, bool dsinks);

}  // namespace attnlab::cli::cp

// The lead's functions for every element type the commands read (in namespace cp).
#define ATTNLAB_CP_INSTANTIATE(T)                                                                                  \
  template void lead_forward<T>(const AttentionFlags&, const AttentionProblem<T>&, Tensor<T>&,                    \
                                Tensor<ScalarOf<T>>&);                                                            \
  template void lead_backward<T>(const AttentionFlags&, const AttentionProblem<T>&, const Tensor<T>&, Tensor<T>&, \
                                 Tensor<T>&, Tensor<T>&, std::vector<ScalarOf<T>>&);
#define ATTNLAB_CP_INSTANTIATE_ALL \
  ATTNLAB_CP_INSTANTIATE(float) ATTNLAB_CP_INSTANTIATE(double) ATTNLAB_CP_INSTANTIATE(float16) ATTNLAB_CP_INSTANTIATE(bfloat16)
