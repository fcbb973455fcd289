#pragma once
// Pieces of the engine's kernels, callable one at a time, for the microbenchmarks
// (bench/micro/) and the kernel tests (tests/engine/): never part of libattnlab.
// Built into the testing library attnlab_internals from the same per-target code
// (the -inl.h files) as the kernels themselves, so what is measured is what runs.
#include <cstddef>
#include <cstdint>

namespace attnlab::engine::testing {

// The register-blocked product C (+)= A·B (gemm-inl.h; N a multiple of 16).
void gemm_piece(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_ks, const float* B,
                size_t b_rs, float* C, size_t c_rs, bool accumulate);
// exp over n floats in place, n a multiple of 16 (exp-inl.h: the kernel's own exp for x ≤ 0).
void exp_piece(float* x, size_t n);
// softcap's tanh over n floats in place, n a multiple of 16 (tile_ops-inl.h: SoftcapTanh;
// a vector whose lanes are all below 1/2 in magnitude takes the polynomial).
void tanh_piece(float* x, size_t n);
// The forward's softmax step (forward_tile-inl.h), `steps` times: the scores s
// [rows × kBc, nc used] become probabilities with the running max and sum updated
// (s gets the last result). An unmasked tile of a problem with head dims 64.
void softmax_piece(float* s, int64_t rows, int64_t nc, int64_t steps);
// The decode path's work item (decode_chunk-inl.h), `steps` times on the same data: the
// first chunk of keys (at most decode_chunk_keys of Nk) of key/value head 0, for all the
// group·Nq query rows of its group; q [1, Hq, Nq, d], k and v [1, Hkv, Nk, d] contiguous,
// scale 1/√d, no mask. Its compute cost per key, with K and V in cache. With from_memory,
// the step the engine takes on a cache read from memory (decode_strategy.hpp).
void decode_chunk_piece(const float* q, const float* k, const float* v, int64_t Hq, int64_t Hkv, int64_t Nq,
                        int64_t Nk, int64_t d, int64_t steps, bool from_memory = false);
// The fused decoding step's online softmax on one block of 8 keys of `rows` rows (1 to 8;
// decode_fused_softmax-inl.h, FusedSoftmaxRows): s [rows × 8] raw scores in, P out; each row's scale,
// and its m, l, nan_score and O row (o [rows × dv_pad], dv_pad a multiple of 16) updated.
// With `by_rows` each row alone (FusedSoftmaxRow), as the rows below
// kFusedSoftmaxPairsMinRows go. Returns whether this target takes `rows` rows two at a
// time: where it does not, both ways are the same code.
bool fused_softmax_rows_piece(int rows, bool by_rows, float* s, const float* scale, float* m, float* l,
                              bool* nan_score, float* o, size_t dv_pad);
// The SIMD target these pieces were dispatched to (the same as the engine's).
const char* pieces_target_name();

}  // namespace attnlab::engine::testing
