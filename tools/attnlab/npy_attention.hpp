#pragma once
// Shared by `attnlab attention` and `attnlab attention-backward` (cmd_attention*.cpp):
// attention arguments read from .npy files and results written back as .npy.
//
// q [B, Hq, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv], or the same without the
// batch axis ([H, N, d], read as B = 1). float32 files run on the engine, float64
// files on the double reference, float16 files ('<f2') and, with --bf16, bfloat16 stored
// as uint16 ('<u2', NumPy having no bfloat16) on the engine in that type (computed in
// float32; the lse and the mask in float32); q, k and v must share one dtype, and the
// outputs have it (bfloat16 written as '<u2' again). The mask (bool:
// True = attend; float: added to the scaled scores) is [Nq, Nk], [H|1, Nq, Nk] or
// [B|1, H|1, Nq, Nk], size-1 axes broadcast without copies.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/error.hpp"
#include "attnlab/atomic_files.hpp"
#include "attnlab/npy.hpp"
#include "attnlab/tensor.hpp"
#include "cli_values.hpp"

namespace attnlab::cli {

// The flags both commands share.
struct AttentionFlags {
  std::string q, k, v, mask;
  bool bf16 = false;  // '<u2' files hold bfloat16 bit patterns
  std::string scale = "inv_sqrt_d";
  bool causal = false;
  std::string causal_align;  // empty: top_left; given without --causal, an error (it would do nothing)
  int threads = 0;
  // The variants (attention_variants.hpp); their values are checked by the library.
  std::vector<int64_t> window;  // empty, or left,right
  double softcap = 0;
  CLI::Option* softcap_flag = nullptr;  // given at all (0 is an error, not "off")
  std::vector<double> alibi_slopes, sinks;
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  double dropout_p = 0;
  uint64_t seed = 0;

  void add_to(CLI::App& app) {
    app.add_option("--q", q, "query .npy: [B, Hq, Nq, d] or [Hq, Nq, d], float16, float32 or float64 (or bfloat16 with --bf16)")
        ->required();
    app.add_option("--k", k, "key .npy: [B, Hkv, Nk, d] (Hq a multiple of Hkv)")->required();
    app.add_option("--v", v, "value .npy: [B, Hkv, Nk, dv]")->required();
    app.add_flag("--bf16", bf16,
                 "q, k, v (and grad-out) are bfloat16 stored as uint16 '<u2' (e.g. torch: t.view(torch.int16).numpy()"
                 ".view('<u2')); outputs are written so too");
    app.add_option("--mask", mask, "mask .npy, broadcast to [B, Hq, Nq, Nk]: bool (True = attend) or float (added)");
    app.add_option("--scale", scale,
                   "a number, or inv_sqrt_d (default), none, inv_d, entropy_invariant, ssmax, ssmax:S");
    app.add_flag("--causal", causal, "causal masking (PyTorch's is_causal: query i sees keys j <= i)");
    app.add_option("--causal-align", causal_align,
                   "with --causal: top_left (PyTorch; the default) or bottom_right (FlashAttention-2: the last query sees every key)")
        ->check(CLI::IsMember({"top_left", "bottom_right"}));
    app.add_option("--threads", threads, "engine threads for float32 (0 = all cores)")->check(in_range(0, kMaxThreads));
    add_list_option(app, "--window", window,
                    "sliding window LEFT,RIGHT (FlashAttention's window_size: query i sees keys i + Nk - Nq - LEFT .. "
                    "i + Nk - Nq + RIGHT; -1 = unbounded)",
                    2);
    softcap_flag = app.add_option("--softcap", softcap, "logit softcap C > 0: s <- C tanh(s / C) (Gemma 2)");
    add_list_option(app, "--alibi-slopes", alibi_slopes,
                    "ALiBi slopes, comma-separated: one per query head, or per batch entry (or sequence) and head");
    add_list_option(app, "--sinks", sinks, "attention sinks, comma-separated: one logit per query head (gpt-oss)");
    add_list_option(app, "--cu-seqlens-q", cu_seqlens_q,
                    "packed sequences (batch 1): query offsets 0,...,total_q, comma-separated (FlashAttention's varlen)");
    add_list_option(app, "--cu-seqlens-k", cu_seqlens_k, "packed sequences: key offsets 0,...,total_k");
    app.add_option("--dropout-p", dropout_p, "dropout on the probabilities, in [0, 1) (PyTorch's dropout_p)");
    add_seed_option(app, "--seed", seed, "dropout's seed (the backward must be given the forward's)");
  }
};

inline int rank_of(const npy::Array& a) { return static_cast<int>(a.shape.size()); }

inline Shape shape4(const npy::Array& a) {
  Shape s{1, 1, 1, 1};
  for (int i = 0; i < rank_of(a); ++i) s[4 - rank_of(a) + i] = a.shape[static_cast<size_t>(i)];
  return s;
}

// The type of the options, the lse and dsinks for element type T: float for float and the
// 16-bit types (the engine computes in float32), double for double.
template <class T>
using ScalarOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The array's values as a tensor of T, whose dtype the caller has checked (float16 and
// uint16 arrays hold 16-bit patterns).
template <class T>
Tensor<T> to_tensor(npy::Array&& a) {
  Tensor<T> t(shape4(a));
  if constexpr (std::is_same_v<T, float>) {
    t.storage().assign(a.f32.begin(), a.f32.end());  // a copy into 64-byte-aligned storage
  } else if constexpr (std::is_same_v<T, double>) {
    t.storage().assign(a.f64.begin(), a.f64.end());
  } else {
    for (size_t i = 0; i < a.u16.size(); ++i) t.storage()[i] = T::from_bits(a.u16[i]);
  }
  return t;
}

// q, k, v and the options, in element type T (options in ScalarOf<T>).
template <class T>
struct AttentionProblem {
  int rank = 4;  // rank of the input files (3 or 4): outputs have the same
  npy::DType dtype = npy::DType::float32;  // of the input files
  Tensor<T> q, k, v;
  Tensor<uint8_t> bool_mask;  // one of the masks, possibly broadcast views over it
  Tensor<ScalarOf<T>> additive_mask;
  std::vector<ScalarOf<T>> alibi_slopes, sinks;  // behind options' spans (a move keeps their buffers)
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  AttentionOptions<ScalarOf<T>> options;
  ComputeConfig config;
};

inline void require_rank(const npy::Array& a, const std::string& path, const char* name) {
  if (rank_of(a) != 3 && rank_of(a) != 4)
    throw Error(fmt::format("{}: {} has {} dimensions; expected [B, H, N, d] or [H, N, d]", path, name, rank_of(a)));
}

template <class M>
ConstView<M> broadcast_mask(const Tensor<M>& m, const Shape& scores, const std::string& path) {
  const Shape s = m.shape();
  Shape strides = contiguous_strides(s);
  Shape full = s;
  static const char* names[] = {"batch", "heads", "query length", "key length"};
  for (int a = 0; a < 4; ++a) {
    if (s[a] == scores[a]) continue;
    if (s[a] != 1)
      throw Error(fmt::format("{}: mask {} {} does not broadcast to {} (scores are [{}, {}, {}, {}])", path, names[a],
                              s[a], scores[a], scores[0], scores[1], scores[2], scores[3]));
    full[a] = scores[a];
    strides[a] = 0;
  }
  return ConstView<M>(m.data(), full, strides);
}

template <class T>
AttentionProblem<T> make_problem(const AttentionFlags& f, npy::Array&& q, npy::Array&& k, npy::Array&& v) {
  AttentionProblem<T> p;
  p.rank = rank_of(q);
  p.dtype = q.dtype;
  p.q = to_tensor<T>(std::move(q));
  p.k = to_tensor<T>(std::move(k));
  p.v = to_tensor<T>(std::move(v));
  p.options.scale = ScalePolicy::parse(f.scale);
  if (!f.causal && !f.causal_align.empty())
    throw Error("--causal-align: given without --causal (it says how causal masking aligns; add --causal)");
  p.options.causal = f.causal ? parse_causal(f.causal_align.empty() ? "top_left" : f.causal_align.c_str()) : Causal::none;
  p.config.threads = f.threads;
  if (!f.window.empty()) p.options.window = {f.window[0], f.window[1]};
  if (f.softcap_flag != nullptr && f.softcap_flag->count() > 0) p.options.softcap = f.softcap;
  p.alibi_slopes.assign(f.alibi_slopes.begin(), f.alibi_slopes.end());
  p.sinks.assign(f.sinks.begin(), f.sinks.end());
  p.cu_seqlens_q = f.cu_seqlens_q;
  p.cu_seqlens_k = f.cu_seqlens_k;
  p.options.alibi_slopes = p.alibi_slopes;
  p.options.sinks = p.sinks;
  p.options.cu_seqlens_q = p.cu_seqlens_q;
  p.options.cu_seqlens_k = p.cu_seqlens_k;
  p.options.dropout.p = f.dropout_p;
  p.options.dropout.seed = f.seed;
  if (!f.mask.empty()) {
    npy::Array m = npy::load(f.mask);
    const int mr = rank_of(m);
    if (mr < 2 || mr > 4)
      throw Error(fmt::format("{}: mask has {} dimensions; expected [Nq, Nk], [H, Nq, Nk] or [B, H, Nq, Nk]", f.mask, mr));
    const Shape scores{p.q.size(Axis::batch), p.q.size(Axis::heads), p.q.size(Axis::seq), p.k.size(Axis::seq)};
    if (m.dtype == npy::DType::boolean) {
      p.bool_mask = Tensor<uint8_t>(shape4(m));
      p.bool_mask.storage().assign(m.b8.begin(), m.b8.end());
      p.options.bool_mask = broadcast_mask(p.bool_mask, scores, f.mask);
    } else {
      if (m.dtype == npy::DType::uint16)
        throw Error(fmt::format("{}: mask of dtype uint16; expected bool or float (float16, float32, float64)", f.mask));
      p.additive_mask = Tensor<ScalarOf<T>>(shape4(m));
      auto& dst = p.additive_mask.storage();
      if (m.dtype == npy::DType::float32) dst.assign(m.f32.begin(), m.f32.end());
      else if (m.dtype == npy::DType::float64) dst.assign(m.f64.begin(), m.f64.end());
      else
        for (size_t i = 0; i < m.u16.size(); ++i) dst[i] = float16::from_bits(m.u16[i]).to_float();
      p.options.additive_mask = broadcast_mask(p.additive_mask, scores, f.mask);
    }
  }
  return p;
}

// Loads q, k, v, checks ranks and dtypes, and calls run<T>(problem) with T = float, double,
// float16 or bfloat16 (uint16 files with --bf16).
template <class Run>
void with_problem(const AttentionFlags& f, Run&& run) {
  npy::Array q = npy::load(f.q), k = npy::load(f.k), v = npy::load(f.v);
  require_rank(q, f.q, "q");
  require_rank(k, f.k, "k");
  require_rank(v, f.v, "v");
  if (rank_of(k) != rank_of(q) || rank_of(v) != rank_of(q))
    throw Error(fmt::format("q, k and v must have the same number of dimensions ({}, {}, {})", rank_of(q), rank_of(k),
                            rank_of(v)));
  for (const auto& [a, path] : {std::pair{&q, &f.q}, std::pair{&k, &f.k}, std::pair{&v, &f.v}}) {
    if (a->dtype == npy::DType::boolean)
      throw Error(fmt::format("{}: dtype bool; expected float16, float32 or float64 (or bfloat16 as uint16 with --bf16)",
                              *path));
    if (a->dtype == npy::DType::uint16 && !f.bf16)
      throw Error(fmt::format("{}: dtype uint16; if it holds bfloat16 values, add --bf16", *path));
    if (a->dtype != npy::DType::uint16 && f.bf16)
      throw Error(fmt::format("{}: dtype {}; --bf16 reads bfloat16 stored as uint16 '<u2'", *path,
                              npy::to_string(a->dtype)));
  }
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    throw Error(fmt::format("q, k and v must share one dtype (got {}, {}, {})", npy::to_string(q.dtype),
                            npy::to_string(k.dtype), npy::to_string(v.dtype)));
  switch (q.dtype) {
    case npy::DType::float32: return run(make_problem<float>(f, std::move(q), std::move(k), std::move(v)));
    case npy::DType::float64: return run(make_problem<double>(f, std::move(q), std::move(k), std::move(v)));
    case npy::DType::float16: return run(make_problem<float16>(f, std::move(q), std::move(k), std::move(v)));
    case npy::DType::uint16: return run(make_problem<bfloat16>(f, std::move(q), std::move(k), std::move(v)));
    case npy::DType::boolean: break;
  }
}

// The .npy bytes of a [B, H, N, x] result in the inputs' rank; drop_last removes a
// trailing unit axis (lse is written as [B, H, Nq]).
template <class T>
std::string encode_result(const Tensor<T>& t, int rank, bool drop_last = false) {
  std::vector<int64_t> shape(t.shape().end() - rank, t.shape().end());
  if (drop_last) shape.pop_back();
  return npy::encode(std::span<const T>(t.storage()), shape);
}

// The input files of a run (q, k, v, mask): an output that is one of them is refused
// (atomic_files.hpp), so that a run never overwrites what it read.
inline std::vector<std::string> input_files(const AttentionFlags& f) { return {f.q, f.k, f.v, f.mask}; }

}  // namespace attnlab::cli
