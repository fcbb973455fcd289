#pragma once
// Programmable masks and scores (FlexAttention's mask_mod and score_mod), forward
// and backward, in the reference and the engine.
//
//   mask_mod(b, h, q, k) -> bool        true = row q of (batch b, query head h) may see key k
//   score_mod(s, b, h, q, k) -> s'      a new score for a visible key (after the scale,
//                                       softcap and ALiBi; before the additive mask;
//                                       see attention_variants.hpp for the order)
//   d_score_mod(s, b, h, q, k) -> ds'/ds  its derivative, for the backward
//
// q and k are the indices into the tensors (with packed sequences, into the packed
// tensor: a document mask compares the documents of q and k). The callables must
// be pure, thread-safe and must not throw (the engine calls them from several
// threads, any number of times, in any order); score_mod must return a finite value
// or −inf.
//
// Writing one: wrap a lambda (or any callable) with make_mask_mod / make_score_mod
// and point the options at it; the object must outlive the call.
//
//   auto doc = attnlab::make_mask_mod([&](int64_t, int64_t, int64_t q, int64_t k) {
//     return document[q] == document[k] && k <= q;           // causal within a document
//   });
//   auto tanh_cap = attnlab::make_score_mod(
//       [](auto s, int64_t, int64_t, int64_t, int64_t) { return 30 * std::tanh(s / 30); },
//       [](auto s, int64_t, int64_t, int64_t, int64_t) { auto t = std::tanh(s / 30); return 1 - t * t; });
//   options.mask_mod = &doc;
//   options.score_mod = &tanh_cap;
//
// How it runs. The kernels call one virtual function per row of a tile (up to 256
// keys); its body, instantiated here in the caller's translation unit, is a loop over
// the keys in which the callable is inlined: no call per element. Before the kernel,
// the engine classifies every tile (64 query rows × 256 keys) of mask_mod as empty,
// full or partial (a BlockMask, FlexAttention's idea): empty tiles are skipped, full
// ones need no mask evaluation, only partial ones evaluate mask_mod per element.
// Building the BlockMask evaluates mask_mod once per (b, h, q, k); build it once with
// BlockMask::build and pass it in options.block_mask to reuse it across calls (and,
// when mask_mod depends on neither b nor h, build it with batch = heads = 1).
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "attnlab/export.hpp"

namespace attnlab {

class MaskMod {
 public:
  virtual ~MaskMod() = default;
  // keep[j] = 1 if mask_mod(b, h, i, j0 + j), else 0, for j in [0, n).
  virtual void keep_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, uint8_t* keep) const = 0;
  // s[j] = −inf where mask_mod(b, h, i, j0 + j) is false, for j in [0, n).
  virtual void mask_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s) const = 0;
  virtual void mask_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s) const = 0;
};

class ScoreMod {
 public:
  virtual ~ScoreMod() = default;
  // s[j] = score_mod(s[j], b, h, i, j0 + j) for j in [0, n).
  virtual void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s) const = 0;
  virtual void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s) const = 0;
  // The same, and ds[j] = d_score_mod(s[j], ...) at the old s[j] (the backward).
  virtual void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s, float* ds) const = 0;
  virtual void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s, double* ds) const = 0;
};

// A MaskMod whose per-row loops inline `F`: bool f(int64_t b, int64_t h, int64_t q, int64_t k).
template <class F>
class MaskModFn final : public MaskMod {
 public:
  explicit MaskModFn(F f) : f_(std::move(f)) {}
  void keep_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, uint8_t* keep) const override {
    for (int64_t j = 0; j < n; ++j) keep[j] = f_(b, h, i, j0 + j) ? 1 : 0;
  }
  void mask_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s) const override {
    mask(b, h, i, j0, n, s);
  }
  void mask_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s) const override {
    mask(b, h, i, j0, n, s);
  }

 private:
  template <class T>
  void mask(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, T* s) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) s[j] = f_(b, h, i, j0 + j) ? s[j] : kNegInf;
  }
  F f_;
};

// A ScoreMod whose per-row loops inline `F` (the new score) and `DF` (its derivative
// in s), both called as g(s, int64_t b, int64_t h, int64_t q, int64_t k) with s float
// in the engine and double in the reference (a generic lambda, `auto s`, serves both).
template <class F, class DF>
class ScoreModFn final : public ScoreMod {
 public:
  ScoreModFn(F f, DF df) : f_(std::move(f)), df_(std::move(df)) {}
  void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s) const override {
    score(b, h, i, j0, n, s);
  }
  void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s) const override {
    score(b, h, i, j0, n, s);
  }
  void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* s, float* ds) const override {
    score(b, h, i, j0, n, s, ds);
  }
  void score_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, double* s, double* ds) const override {
    score(b, h, i, j0, n, s, ds);
  }

 private:
  template <class T>
  void score(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, T* s) const {
    for (int64_t j = 0; j < n; ++j) s[j] = static_cast<T>(f_(s[j], b, h, i, j0 + j));
  }
  template <class T>
  void score(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, T* s, T* ds) const {
    for (int64_t j = 0; j < n; ++j) {
      const T x = s[j];
      ds[j] = static_cast<T>(df_(x, b, h, i, j0 + j));
      s[j] = static_cast<T>(f_(x, b, h, i, j0 + j));
    }
  }
  F f_;
  DF df_;
};

template <class F>
MaskModFn<F> make_mask_mod(F f) {
  return MaskModFn<F>(std::move(f));
}

template <class F, class DF>
ScoreModFn<F, DF> make_score_mod(F f, DF df) {
  return ScoreModFn<F, DF>(std::move(f), std::move(df));
}

// mask_mod classified per tile of the engine (block_rows() query rows × block_cols()
// keys): empty (no key visible), full (every key visible) or partial. Shape
// [batch, heads, ⌈Nq/rows⌉, ⌈Nk/cols⌉]; batch or heads of 1 broadcast (the mask_mod
// is then evaluated at b = 0 or h = 0 only). The engine checks the shape against the
// call's; the reference ignores the BlockMask (it evaluates mask_mod everywhere).
class ATTNLAB_API BlockMask {
 public:
  enum class Block : uint8_t { empty = 0, partial = 1, full = 2 };

  BlockMask() = default;
  // Evaluates mask_mod over [batch, heads, Nq, Nk] (OpenMP, `threads` as ComputeConfig:
  // 0 = all cores). Throws Error for sizes below 1.
  static BlockMask build(const MaskMod& mask_mod, int64_t batch, int64_t heads, int64_t Nq, int64_t Nk,
                         int threads = 0);

  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t query_len() const { return nq_; }
  int64_t key_len() const { return nk_; }
  int64_t query_blocks() const { return qblocks_; }
  int64_t key_blocks() const { return kblocks_; }
  static int64_t block_rows();  // the engine's query tile (64)
  static int64_t block_cols();  // the engine's key tile (256)
  bool present() const { return !blocks_.empty(); }
  // The block of query tile qt and key tile kt for (b, h), broadcasting size-1 axes.
  Block at(int64_t b, int64_t h, int64_t qt, int64_t kt) const {
    const int64_t bb = batch_ == 1 ? 0 : b, hh = heads_ == 1 ? 0 : h;
    return static_cast<Block>(blocks_[static_cast<size_t>(((bb * heads_ + hh) * qblocks_ + qt) * kblocks_ + kt)]);
  }
  int64_t count(Block kind) const;  // how many blocks are of this kind

 private:
  int64_t batch_ = 0, heads_ = 0, nq_ = 0, nk_ = 0, qblocks_ = 0, kblocks_ = 0;
  std::vector<uint8_t> blocks_;  // [batch, heads, query_blocks, key_blocks]
};

}  // namespace attnlab
