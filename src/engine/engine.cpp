// The engine's entry points (attnlab/engine.hpp): validation shared with the
// reference, the thread count, the diagnostics' shapes, and the choice of forward
// kernel (decode_path.hpp); the work is done by the fused kernels in
// flash_forward_kernels.cpp and flash_backward_kernels.cpp (tiled) and decode_kernels.cpp (decode).
#include "attnlab/engine.hpp"

#include <algorithm>
#include <new>
#include <optional>
#include <type_traits>
#include <fmt/format.h>

#include "core/attention_checks.hpp"
#include "engine/decode_kernels.hpp"
#include "engine/decode_path.hpp"
#include "engine/round_rows.hpp"
#include "engine/row_end.hpp"
#include "engine/flash_kernels.hpp"
#include "engine/machine_caches.hpp"
#include "engine/scratch_cache.hpp"
#include "engine/testing/engine_probe.hpp"

namespace attnlab::engine {
namespace {

int resolve_threads(const ComputeConfig& config) { return team_size(config.threads, "engine: threads"); }

// The kernels' own buffers (std::vector, new[]) throw std::bad_alloc: report it as the
// scratch does, an OutOfMemory error, never a bare bad_alloc or an abort.
template <class F>
void out_of_memory_as_error(F&& f) {
  try {
    f();
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("attention: out of memory allocating the engine's working buffers");
  }
}

// mask_mod's BlockMask for a call whose caller gave none: built here, kept by the caller's frame.
void attach_block_mask(Plan& plan, std::optional<BlockMask>& own) {
  if (plan.mask_mod == nullptr || plan.block_mask != nullptr) return;
  const auto& dm = plan.dims;
  own = BlockMask::build(*plan.mask_mod, dm.B, dm.Hq, dm.Nq, dm.Nk, plan.threads);
  plan.block_mask = &*own;
}

// The applied dropout mask starts at 0: the kernels write the keys they compute.
void clear_dropout_mask(TensorView<uint8_t> m) {
  if (!m.present()) return;
  for (int64_t b = 0; b < m.batch(); ++b)
    for (int64_t h = 0; h < m.heads(); ++h)
      for (int64_t i = 0; i < m.seq(); ++i)
        for (int64_t j = 0; j < m.dim(); ++j) m(b, h, i, j) = 0;
}

// A test's probe, if one is installed: its switches for this call, and the counter of its
// tile pairs (of the forward or the backward).
// Whether the tiled kernels take bfloat16 inputs' products on VDPBF16PS (a test's switch may
// turn them off).
template <class E>
bool bf16_products_for() {
  return std::is_same_v<E, bfloat16> && cpu_has_bf16_dot_products() && decode_switches().bf16_dots;
}

void throw_if_interrupted(const Plan& plan) {
  if (plan.stop.stopped()) throw Interrupted("attention: interrupted by the caller (ComputeConfig::interrupt)");
}

// A row whose scores overflowed float32 has no answer in float: the first such row, named.
void throw_if_scores_overflowed(const Plan& plan) {
  const int64_t row = plan.overflowed_rows.first();
  if (row == RowErrorLog::kNone) return;
  const auto& dm = plan.dims;
  throw Error(scores_overflow_message("attention", row / (dm.Hq * dm.Nq), row / dm.Nq % dm.Hq, row % dm.Nq));
}

// Forward and backward for every element type E of q, k, v (float, bfloat16, float16).
// The kernels read 16-bit inputs converting on load (plan.hpp's Operand) and compute in
// float32; a 16-bit result (out; dq, dk, dv) is computed into a float32 buffer and
// rounded to E once, at the end: dq in particular is summed over key tiles in float32
// (never in a 16-bit buffer). lse, the options and dsinks are float for every E.
template <class E>
constexpr bool kIsFloat = std::is_same_v<E, float>;

// dst = src rounded to E (round to nearest even): a row at a time where both rows are
// unit-stride (round_rows.hpp), else element by element; the same bits either way.
template <class E>
void round_into(ConstView<float> src, TensorView<E> dst) {
  const bool rows = src.stride(Axis::dim) == 1 && dst.stride(Axis::dim) == 1;
  for (int64_t b = 0; b < dst.batch(); ++b)
    for (int64_t h = 0; h < dst.heads(); ++h)
      for (int64_t i = 0; i < dst.seq(); ++i) {
        if (rows) {
          round_rows(src.row(b, h, i), dst.row(b, h, i), dst.dim());
          continue;
        }
        for (int64_t j = 0; j < dst.dim(); ++j) dst(b, h, i, j) = E::from_float(src(b, h, i, j));
      }
}

// The float32 buffer a kernel writes for the result `x`: x itself when E is float,
// else `own` (allocated here).
template <class E>
TensorView<float> float_result(TensorView<E> x, Tensor<float>& own) {
  if constexpr (kIsFloat<E>) {
    return x;
  } else {
    out_of_memory_as_error([&] { own = Tensor<float>(x.shape()); });
    return own.view();
  }
}

template <class E>
void forward_impl(ConstView<E> q, ConstView<E> k, ConstView<E> v, const AttentionOptions<float>& options,
                  const ForwardOutputs<E>& outputs, const ComputeConfig& config) {
  const TensorView<E> out = outputs.out;
  const TensorView<float> lse = outputs.lse;
  const RowDiagnostics<float>* diagnostics = outputs.diagnostics ? &*outputs.diagnostics : nullptr;
  // The path from the shapes alone (if they are wrong, check_forward_args says so).
  const ForwardPath path = choose_forward_path(q.batch(), q.heads(), k.heads(), q.seq(), k.seq(),
                                               diagnostics != nullptr, options.dropout.present());
  const bool decode = path == ForwardPath::decode;
  // The decode path reads K and V once, at the memory's speed: a separate pass to check
  // their values would double its time. Its kernel reports whether it met a non-finite
  // value (or a score that overflowed) instead; only then are k and v searched, after
  // it, for the culprit and the same message (check_deferred_values).
  const auto dims =
      detail::check_forward_args(q, k, v, options, out, lse, decode ? detail::ValueChecks::q_only : detail::ValueChecks::all);
  detail::check_dropout_mask(outputs.dropout_mask, dims);
  if (diagnostics != nullptr) detail::check_diagnostics(*diagnostics, dims);
  const int team = resolve_threads(config);
  constexpr auto kBytes = static_cast<int64_t>(sizeof(E));
  const int64_t kv_bytes = decode_kv_bytes(dims.B * dims.Hkv * dims.Nk, dims.d * kBytes, dims.dv * kBytes);
  Plan plan(dims, q, k, v, options, decode ? decode_threads(team, kv_bytes) : team, &config.interrupt);
  plan.dropout_mask = outputs.dropout_mask;
  if (EngineProbe* probe = installed_engine_probe()) probe->last_path.store(path, std::memory_order_relaxed);
  plan.bf16_products = bf16_products_for<E>();
  Tensor<float> own_out;
  const TensorView<float> out32 = float_result(out, own_out);
  std::optional<BlockMask> own_block_mask;
  bool kv_suspect = false;
  out_of_memory_as_error([&] {
    clear_dropout_mask(plan.dropout_mask);
    if (decode) {
      kv_suspect = decode_forward(plan, out32, lse);
    } else {
      attach_block_mask(plan, own_block_mask);
      flash_forward(plan, out32, lse, diagnostics);
    }
  });
  throw_if_interrupted(plan);
  if (decode) detail::check_deferred_values(k, v, options, kv_suspect);
  if (options.check_finite) {
    throw_if_scores_overflowed(plan);
    detail::check_result_finite<float>(out32, "out");
  }
  // With the input check off, NaN inputs make NaN scores too: the caller opted out of both checks.
  if constexpr (!kIsFloat<E>) {
    round_into<E>(out32, out);
    if (options.check_finite) detail::check_result_finite<E>(out, "out");  // float16's range
  }
}

template <class E>
void backward_impl(ConstView<E> q, ConstView<E> k, ConstView<E> v, ConstView<E> out, ConstView<float> lse,
                   ConstView<E> grad_out, const AttentionOptions<float>& options, const BackwardOutputs<E>& grads,
                   const ComputeConfig& config) {
  const TensorView<E> dq = grads.dq, dk = grads.dk, dv = grads.dv;
  const std::span<float> dsinks = grads.dsinks;
  const auto dims = detail::check_backward_args(q, k, v, out, lse, grad_out, options, dq, dk, dv, dsinks);
  Plan plan(dims, q, k, v, options, resolve_threads(config), &config.interrupt);
  plan.bf16_products = bf16_products_for<E>();
  Tensor<float> own_dq, own_dk, own_dv;
  const TensorView<float> dq32 = float_result(dq, own_dq), dk32 = float_result(dk, own_dk),
                          dv32 = float_result(dv, own_dv);
  std::optional<BlockMask> own_block_mask;
  out_of_memory_as_error([&] {
    attach_block_mask(plan, own_block_mask);
    flash_backward(plan, Operand(out), lse, Operand(grad_out), dq32, dk32, dv32,
                   dsinks.empty() ? nullptr : dsinks.data());
  });
  throw_if_interrupted(plan);
  // Finite inputs can still overflow float in q·k, dO·v or dS·k: say so, never return NaN.
  if (options.check_finite) {
    throw_if_scores_overflowed(plan);
    detail::check_result_finite<float>(dq32, "dq");
    detail::check_result_finite<float>(dk32, "dk");
    detail::check_result_finite<float>(dv32, "dv");
  }
  if constexpr (!kIsFloat<E>) {
    round_into<E>(dq32, dq);
    round_into<E>(dk32, dk);
    round_into<E>(dv32, dv);
    if (options.check_finite) {  // float16's range
      detail::check_result_finite<E>(dq, "dq");
      detail::check_result_finite<E>(dk, "dk");
      detail::check_result_finite<E>(dv, "dv");
    }
  }
}

}  // namespace

template <class T>
typename EngineElement<T>::returns attention_forward(ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                     const AttentionOptions<Accum<T>>& options,
                                                     const ForwardOutputs<T>& outputs, const ComputeConfig& config) {
  forward_impl(q, k, v, options, outputs, config);
}

template <class T>
typename EngineElement<T>::returns attention_backward(ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out,
                                                      ConstView<Accum<T>> lse, ConstView<T> grad_out,
                                                      const AttentionOptions<Accum<T>>& options,
                                                      const BackwardOutputs<T>& grads, const ComputeConfig& config) {
  backward_impl(q, k, v, out, lse, grad_out, options, grads, config);
}

#define ATTNLAB_INSTANTIATE(T)                                                                                    \
  template ATTNLAB_API void attention_forward<T>(ConstView<T>, ConstView<T>, ConstView<T>,                        \
                                                 const AttentionOptions<float>&, const ForwardOutputs<T>&,        \
                                                 const ComputeConfig&);                                           \
  template ATTNLAB_API void attention_backward<T>(ConstView<T>, ConstView<T>, ConstView<T>, ConstView<T>,         \
                                                  ConstView<float>, ConstView<T>, const AttentionOptions<float>&, \
                                                  const BackwardOutputs<T>&, const ComputeConfig&);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(bfloat16)
ATTNLAB_INSTANTIATE(float16)
#undef ATTNLAB_INSTANTIATE

std::string target_name() { return flash_target_name(); }

int64_t last_level_cache_bytes() {
  static const int64_t bytes = machine::find_last_level_cache(machine::this_machine()).bytes;
  return bytes;
}

void release_cached_memory() { empty_scratch_cache(); }

bool cpu_has_bf16_dot_products() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

DecodeSwitches default_decode_switches() {
  DecodeSwitches s;
  s.beside_loads_max_kv_bytes = last_level_cache_bytes();
  if (const TunedReadsTable* tuned = tuned_reads_in_use()) s.tuned_reads = *tuned;
  return s;
}

DecodeSwitches decode_switches() {
  const EngineProbe* probe = installed_engine_probe();
  return probe != nullptr ? probe->switches() : default_decode_switches();
}

std::atomic<EngineProbe*>& engine_probe_slot() {
  static std::atomic<EngineProbe*> probe{nullptr};
  return probe;
}

EngineProbe* installed_engine_probe() { return engine_probe_slot().load(std::memory_order_acquire); }

}  // namespace attnlab::engine
