#pragma once
// Additive (Bahdanau) attention for the training model: the score of query row i against
// key row j of the same sequence is e_ij = aᵀ tanh(q_i + k_j), then p_i = softmax(e_i) and
// o_i = Σ_j p_ij v_j. No scale: tanh keeps each term in [−1, 1] and a's initialisation,
// N(0, 1/d_k), keeps the sum's spread of order 1 at every d_k (claim C9's point).
// Sums in double, one thread. The forward keeps tanh(q_i + k_j) ([B·Nq, N, d_k]) for the
// backward: tanh is most of the cost.
#include <cstdint>
#include <vector>

namespace attnlab::train {

struct AdditiveShape {
  int64_t B = 0, Nq = 0, N = 0, dk = 0, dv = 0;  // query rows per sequence are its last Nq positions
};

// What the forward keeps: the scores e and weights p [B·Nq, N], and tanh(q_i + k_j) [B·Nq, N, d_k].
template <class T>
struct AdditiveCache {
  std::vector<double> scores, probs;
  std::vector<T> tanh;
};

// q [B·Nq, dk], k [B·N, dk], v [B·N, dv], a [dk] → out [B·Nq, dv], and the cache.
template <class T>
void additive_forward(const AdditiveShape& s, const T* q, const T* k, const T* v, const T* a, T* out,
                      AdditiveCache<T>& cache);

// Given dout [B·Nq, dv] and the forward's cache: dq, dk, dv (overwritten) and da (accumulated).
template <class T>
void additive_backward(const AdditiveShape& s, const T* v, const T* a, const AdditiveCache<T>& cache, const T* dout,
                       T* dq, T* dk, T* dv, T* da);

}  // namespace attnlab::train
