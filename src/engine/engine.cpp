// The engine's entry points (attnlab/engine.hpp): validation shared with the
// reference, the thread count, the diagnostics' shapes, and the choice of forward
// kernel (decode_path.hpp); the work is done by the fused kernels in
// flash_kernels.cpp (tiled) and decode_kernels.cpp (decode).
#include "attnlab/engine.hpp"

#include <new>
#include <optional>
#include <fmt/format.h>
#include <omp.h>

#include "core/attention_checks.hpp"
#include "engine/decode_kernels.hpp"
#include "engine/decode_path.hpp"
#include "engine/flash_kernels.hpp"

namespace attnlab::engine {
namespace {

int resolve_threads(const ComputeConfig& config) {
  check_threads(config.threads, "engine: threads");
  return config.threads == 0 ? omp_get_max_threads() : config.threads;
}

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

// The applied dropout mask (for tests) starts at 0: the kernels write the keys they compute.
void clear_applied_mask(const AttentionOptions<float>& o) {
  const TensorView<uint8_t> m = o.dropout.applied_mask;
  if (!m.present()) return;
  for (int64_t b = 0; b < m.batch(); ++b)
    for (int64_t h = 0; h < m.heads(); ++h)
      for (int64_t i = 0; i < m.seq(); ++i)
        for (int64_t j = 0; j < m.dim(); ++j) m(b, h, i, j) = 0;
}

thread_local ForwardPath last_path = ForwardPath::tiled;

void throw_if_interrupted(const Plan& plan) {
  if (plan.stop.stopped()) throw Interrupted("attention: interrupted by the caller (ComputeConfig::interrupt)");
}

}  // namespace

void attention_forward(ConstView<float> q, ConstView<float> k, ConstView<float> v,
                       const AttentionOptions<float>& options, TensorView<float> out, TensorView<float> lse,
                       const RowDiagnostics<float>* diagnostics, const ComputeConfig& config) {
  // The path from the lengths alone (if the shapes are wrong, check_forward_args says so).
  last_path = choose_forward_path(q.seq(), k.seq(), diagnostics != nullptr, options.dropout.present());
  const bool decode = last_path == ForwardPath::decode;
  // The decode path reads K and V once, at the memory's speed: a separate pass to check
  // their values would double its time. Its kernel reports whether it met a non-finite
  // value (or a score that overflowed) instead; only then are k and v searched, after
  // it, for the culprit and the same message (check_deferred_values).
  const auto dims =
      detail::check_forward_args(q, k, v, options, out, lse, decode ? detail::ValueChecks::q_only : detail::ValueChecks::all);
  if (diagnostics != nullptr) detail::check_diagnostics(*diagnostics, dims);
  Plan plan(dims, q, k, v, options, resolve_threads(config), &config.interrupt);
  std::optional<BlockMask> own_block_mask;
  bool kv_suspect = false;
  out_of_memory_as_error([&] {
    clear_applied_mask(options);
    if (decode) {
      kv_suspect = decode_forward(plan, out, lse);
    } else {
      attach_block_mask(plan, own_block_mask);
      flash_forward(plan, out, lse, diagnostics);
    }
  });
  tile_counts().forward.fetch_add(plan.tiles_computed.load(), std::memory_order_relaxed);
  throw_if_interrupted(plan);
  if (decode) detail::check_deferred_values(k, v, options, kv_suspect);
  // With the input check off, NaN inputs make NaN scores too: the caller opted out of both checks.
  if (!options.check_finite) return;
  if (const int64_t row = plan.overflowed_rows.first(); row != RowErrorLog::kNone)
    throw Error(fmt::format("attention: scores of row [{}, {}, {}] overflow float32 (|scale·q·k| > 3.4e38); "
                            "scale the inputs down or use the double-precision reference",
                            row / (dims.Hq * dims.Nq), row / dims.Nq % dims.Hq, row % dims.Nq));
  detail::check_result_finite<float>(out, "out");
}

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv,
                        const ComputeConfig& config) {
  engine::attention_backward(q, k, v, out, lse, grad_out, options, dq, dk, dv, config, std::span<float>());
}

void attention_backward(ConstView<float> q, ConstView<float> k, ConstView<float> v, ConstView<float> out,
                        ConstView<float> lse, ConstView<float> grad_out, const AttentionOptions<float>& options,
                        TensorView<float> dq, TensorView<float> dk, TensorView<float> dv, const ComputeConfig& config,
                        std::span<float> dsinks) {
  const auto dims = detail::check_backward_args(q, k, v, out, lse, grad_out, options, dq, dk, dv, dsinks);
  Plan plan(dims, q, k, v, options, resolve_threads(config), &config.interrupt);
  std::optional<BlockMask> own_block_mask;
  out_of_memory_as_error([&] {
    attach_block_mask(plan, own_block_mask);
    flash_backward(plan, out, lse, grad_out, dq, dk, dv, dsinks.empty() ? nullptr : dsinks.data());
  });
  tile_counts().backward.fetch_add(plan.tiles_computed.load(), std::memory_order_relaxed);
  throw_if_interrupted(plan);
  // Finite inputs can still overflow float in dO·v or dS·k: say so, never return NaN.
  if (options.check_finite) detail::check_result_finite<float>(dq, "dq");
  if (options.check_finite) detail::check_result_finite<float>(dk, "dk");
  if (options.check_finite) detail::check_result_finite<float>(dv, "dv");
}

std::string target_name() { return flash_target_name(); }

TileCounts& tile_counts() {
  static TileCounts counts;
  return counts;
}

ForwardPath last_forward_path() { return last_path; }

}  // namespace attnlab::engine
