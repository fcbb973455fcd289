// Attention over a KVCache with the float32 engine. Per sequence, kv_cache_attention picks
// (decode_strategy.hpp's choose_cache_step, the cache axis):
// - the engine's decode path itself, reading the blocks in place through the block table
//   (Plan::kv_blocks, decode_work-inl.h), where its fused step takes the call in place (K and V
//   of one type, blocks of any size: a group of 8 keys across a block's end is copied; softcap
//   and ALiBi are its treatments too), and for the calls with more rows that the decode path
//   takes (chunked prefill). float32, float16 and bfloat16 rows are read as they are, int8, int4
//   and fp8 rows decoded in registers (row_codec-inl.h); K and V of two types have each tile
//   decoded to float32 first. The result is bitwise the engine's on the same values held as
//   float32 tensors (gather()'s);
// - otherwise, up to 8 query rows per K/V head: the cache's fused step, work items of (K/V
//   head, chunk of kCacheChunkBlocks blocks), each reading its blocks in place and dequantizing
//   in registers (kv_cache_decode_kernels.cpp), in parallel; then each row's partials merged in
//   chunk order, the sink included. The split depends on the lengths only, so the result is the
//   same bitwise for any thread count;
// - otherwise the blocks dequantized into contiguous scratch (core/kv_cache_calls.hpp) and one
//   ordinary engine call.
// Threads: the decode path's grain (decode_path.hpp's decode_threads) applies to each sequence,
// so a sequence of at most 2 MiB of K and V gets no team of its own; when a call holds several
// such sequences that together read more, they run side by side, one thread each (a batch of
// short sequences: 1.5-2.3x, docs/tuning.md). Either way each sequence's bits are its own.
// A cache that rotates or centres its rows (kv_cache.hpp, "Outliers"): the queries are rotated
// and each output row rotated back. Centred keys k − μ lose each row's q·μ from their scores,
// which the softmax does not see (a shift): lse gets it back and a sink's logit gives it up, in
// the engine with a sink per query head (so not with sinks and several rows a head), in the
// cache's step per row. Softcap is no shift: with centred keys the gathered path, where
// gather() has restored the caller's rows.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <span>
#include <vector>

#include "attnlab/engine.hpp"
#include "attnlab/kv_cache.hpp"
#include "core/kv_cache_access.hpp"
#include "core/kv_cache_calls.hpp"
#include "core/visibility.hpp"
#include "engine/decode_kernels.hpp"
#include "engine/decode_path.hpp"
#include "engine/decode_strategy.hpp"
#include "engine/kv_cache_decode.hpp"
#include "engine/plan.hpp"
#include "engine/row_end.hpp"

namespace attnlab {

namespace {

// The block table's type of rows of a cache type (the two enumerations list the same types).
engine::RowType row_type(CacheType t) { return static_cast<engine::RowType>(t); }
static_assert(static_cast<int>(CacheType::bfloat16) == static_cast<int>(engine::RowType::bf16) &&
              static_cast<int>(CacheType::int8) == static_cast<int>(engine::RowType::int8) &&
              static_cast<int>(CacheType::fp8_e4m3) == static_cast<int>(engine::RowType::fp8_e4m3));

// How this sequence, n query rows a head against len positions, is read (the cache axis,
// decode_strategy.hpp's choose_cache_step).
engine::CacheStep cache_step(const detail::CacheLayerView& cv, const detail::CacheTransforms& tf, int64_t hq, int64_t n,
                             int64_t len, const AttentionOptions<float>& o) {
  bool fp8_scales_fit = true;  // the codec's 256 × scale is a float (engine::kFp8MaxHeadScale)
  for (int64_t h = 0; h < cv.kv_heads; ++h)
    fp8_scales_fit = fp8_scales_fit && (cv.key_type != CacheType::fp8_e4m3 || cv.key_scales[h] <= engine::kFp8MaxHeadScale) &&
                     (cv.value_type != CacheType::fp8_e4m3 || cv.value_scales[h] <= engine::kFp8MaxHeadScale);
  const bool decode_path =
      fp8_scales_fit && engine::choose_forward_path(1, hq, cv.kv_heads, n, len, false, false) == engine::ForwardPath::decode;
  bool fused_in_place = false;  // K and V of one type read in place by the fused step
  if (decode_path && cv.key_type == cv.value_type) {
    engine::DecodeShape c;
    c.Hkv = cv.kv_heads, c.rows = hq / cv.kv_heads * n, c.Nk = len, c.d = cv.head_dim, c.dv = cv.value_dim;
    c.dv_pad = cv.value_dim, c.block_run_bytes = cv.block_tokens * cv.key_row;
    c.k_row_bytes = cv.key_row, c.v_row_bytes = cv.value_row;
    const engine::RowType t = row_type(cv.key_type);
    c.type = engine::element_of(t);
    if (is_code(t)) c.codes = t;
    fused_in_place = engine::decode_strategy_for(c).fused;
  }
  return engine::choose_cache_step(decode_path, fused_in_place, hq / cv.kv_heads * n, cv.head_dim, cv.value_dim,
                                   tf.key_center != nullptr, n > 1 && !o.sinks.empty(), o.softcap.has_value());
}

// A view of no data that gives the plan K's or V's shape and the element type it reads.
engine::Operand shape_only(engine::ElementType t, const Shape& shape) {
  switch (t) {
    case engine::ElementType::bf16: return ConstView<bfloat16>(nullptr, shape);
    case engine::ElementType::f16: return ConstView<float16>(nullptr, shape);
    case engine::ElementType::f32: break;
  }
  return ConstView<float>(nullptr, shape);
}

// The engine's decode path over the sequence's blocks: q [1, Hq, n, d], out, lse likewise.
void engine_sequence(const detail::CacheLayerView& cv, std::span<const int32_t> blocks, int64_t seq_index, int64_t len,
                     ConstView<float> q, const AttentionOptions<float>& o, TensorView<float> out, TensorView<float> lse,
                     const detail::CacheTransforms& tf, int threads, const ComputeConfig& config) {
  const int64_t hq = q.heads(), group = hq / cv.kv_heads, n = q.seq(), d = cv.head_dim, dv = cv.value_dim;
  const int64_t T = cv.block_tokens;
  // The queries as the stored keys are: rotated with them (a copy), and checked here, where the
  // engine's entry would check them.
  Tensor<float> qs({1, hq, n, d});
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < n; ++i) {
      float* r = qs.data() + (h * n + i) * d;
      for (int64_t c = 0; c < d; ++c) {
        r[c] = q(0, h, i, c);
        if (o.check_finite && !std::isfinite(r[c]))
          throw Error(fmt::format("kv_cache_attention: q[{}, {}, {}] = {} (check_finite)", seq_index, h, i, r[c]));
      }
      if (tf.key_rotation != nullptr) tf.key_rotation->rotate(r);
    }
  detail::AttentionDims dims;
  dims.B = 1, dims.Hq = hq, dims.Hkv = cv.kv_heads, dims.Nq = n, dims.Nk = len, dims.d = d, dims.dv = dv;
  // Centred keys k − μ: each row's scores lack shift = scale_i·q·μ (in double). The softmax does
  // not see it; lse gets it back below and a sink's logit gives it up (one row a head: checked).
  std::vector<double> shift(static_cast<size_t>(hq * n), 0.0);
  AttentionOptions<float> options = o;
  std::vector<float> sinks(o.sinks.begin(), o.sinks.end());
  if (tf.key_center != nullptr) {
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const detail::KeyRange kr = detail::key_range(dims, o, 0, i);
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += static_cast<double>(qs.data()[(h * n + i) * d + c]) * tf.key_center[(h / group) * d + c];
        shift[static_cast<size_t>(h * n + i)] = static_cast<double>(static_cast<float>(o.scale(d, kr.end - kr.begin))) * dot;
      }
    for (size_t h = 0; h < sinks.size(); ++h)
      sinks[h] = static_cast<float>(static_cast<double>(o.sinks[h]) - shift[h * static_cast<size_t>(n)]);
    options.sinks = sinks;
  }
  engine::KVBlocks table;
  table.table = blocks.data(), table.block_keys = T, table.k = cv.pool + cv.layer_offset;
  table.v = table.k + cv.value_offset, table.block_bytes = cv.block_stride;
  table.k_head_bytes = T * cv.key_row, table.v_head_bytes = T * cv.value_row;
  table.k_row_bytes = cv.key_row, table.v_row_bytes = cv.value_row;
  table.k_type = row_type(cv.key_type), table.v_type = row_type(cv.value_type);
  table.k_head_scales = cv.key_scales, table.v_head_scales = cv.value_scales;
  // K and V give the plan their shapes and the element type its kernels read (float32 for
  // codes and decoded tiles); their rows come from the table.
  const engine::ElementType element =
      table.decodes_tiles() ? engine::ElementType::f32 : engine::element_of(table.k_type);
  engine::Plan plan(dims, qs.view(), shape_only(element, Shape{1, cv.kv_heads, len, d}),
                    shape_only(element, Shape{1, cv.kv_heads, len, dv}), options, threads, &config.interrupt);
  plan.kv_blocks = &table;
  engine::decode_forward(plan, out, lse);
  if (plan.stop.stopped()) throw Interrupted("kv_cache_attention: interrupted by the caller (ComputeConfig::interrupt)");
  if (o.check_finite && plan.overflowed_rows.first() != engine::RowErrorLog::kNone) {
    const int64_t row = plan.overflowed_rows.first();
    throw Error(engine::scores_overflow_message("kv_cache_attention", seq_index, row / n % hq, row % n));
  }
  std::vector<float> row(static_cast<size_t>(dv));
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < n; ++i) {
      float& l = lse.row(0, h, i)[0];
      if (std::isfinite(l)) l = static_cast<float>(static_cast<double>(l) + shift[static_cast<size_t>(h * n + i)]);
      if (tf.value_rotation == nullptr) continue;
      float* o_row = out.row(0, h, i);  // O is linear in V's rows: rotated back
      const int64_t st = out.stride(Axis::dim);
      for (int64_t c = 0; c < dv; ++c) row[static_cast<size_t>(c)] = o_row[c * st];
      tf.value_rotation->unrotate(row.data());
      for (int64_t c = 0; c < dv; ++c) o_row[c * st] = row[static_cast<size_t>(c)];
    }
  if (o.check_finite) detail::check_result_finite<float>(out, "out");
}

// The fused step for one sequence of `len` positions: q [1, Hq, n, d], out, lse likewise.
void fused_sequence(const KVCache& cache, const detail::CacheLayerView& cv, int64_t seq, int64_t seq_index, int64_t len,
                    ConstView<float> q, const AttentionOptions<float>& o, TensorView<float> out, TensorView<float> lse,
                    const detail::CacheTransforms& tf, int threads, const engine::StopRequest& stop) {
  using engine::CacheDecodeRows;
  using engine::CacheDecodeWork;
  const int64_t hq = q.heads(), hkv = cv.kv_heads, group = hq / hkv, n = q.seq(), rows = group * n;
  const int64_t d = cv.head_dim, dv = cv.value_dim, T = cv.block_tokens;
  const std::span<const int32_t> blocks = detail::KVCacheAccess::blocks(cache, seq);
  // Per K/V head: its rows (row r = g·n + i: query head h·group + g, the chunk's row i).
  std::vector<float> qs(static_cast<size_t>(hkv * rows * d));
  std::vector<CacheDecodeRows> heads(static_cast<size_t>(hkv));
  std::vector<double> shift(static_cast<size_t>(hkv * rows), 0.0);  // scale·q·μ per row (center_keys)
  int64_t span_begin = len, span_end = 0;
  for (int64_t h = 0; h < hkv; ++h) {
    CacheDecodeRows& hr = heads[static_cast<size_t>(h)];
    hr.rows = static_cast<int>(rows);
    hr.q = qs.data() + h * rows * d;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = h * group + r / n, i = r % n;
      const float* qi = q.row(0, head, i);
      for (int64_t c = 0; c < d; ++c) {
        const float x = qi[c * q.stride(Axis::dim)];
        if (o.check_finite && !std::isfinite(x))
          throw Error(fmt::format("kv_cache_attention: q[{}, {}, {}] = {} (check_finite)", seq_index, head, i, x));
        qs[static_cast<size_t>((h * rows + r) * d + c)] = x;
      }
      float* qr = qs.data() + (h * rows + r) * d;
      if (tf.key_rotation != nullptr) tf.key_rotation->rotate(qr);
      detail::RowFrame f;
      f.seq = seq_index, f.key0 = 0, f.n_keys = len, f.i_local = i, f.diag = i + len - n;
      const detail::KeyRange kr = detail::key_range(f, o.causal, o.window);
      hr.key_begin[r] = kr.begin, hr.key_end[r] = kr.end, hr.diag[r] = f.diag;
      hr.scale[r] = static_cast<float>(o.scale(d, kr.end - kr.begin));
      if (tf.key_center != nullptr) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qr[c]) * tf.key_center[h * d + c];
        shift[static_cast<size_t>(h * rows + r)] = static_cast<double>(hr.scale[r]) * dot;
      }
      hr.slope[r] = o.alibi_slopes.empty() ? 0.0f : o.alibi_slopes[static_cast<size_t>(head)];  // [Hq]: checked
      span_begin = std::min(span_begin, kr.begin), span_end = std::max(span_end, kr.end);
    }
  }
  // The fixed split: chunks of kCacheChunkBlocks blocks on the block grid, over the span any row sees.
  const int64_t chunk = engine::kCacheChunkBlocks * T;
  const int64_t c0 = span_begin / chunk, c1 = (span_end + chunk - 1) / chunk, n_chunks = std::max<int64_t>(0, c1 - c0);
  const int64_t items = hkv * n_chunks;
  std::vector<float> m(static_cast<size_t>(items * rows)), l(m.size()), acc(static_cast<size_t>(items * rows * dv));
  const float softcap = o.softcap ? static_cast<float>(*o.softcap) : 0.0f;
  // The caller's interrupt: asked here on the calling thread, then by thread 0 between work
  // items (the thread that may call it); once true, no further item starts.
  stop();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1 && items > 1)
  for (int64_t it = 0; it < items; ++it) {
    if (stop()) continue;
    const int64_t h = it / n_chunks, c = c0 + it % n_chunks;
    CacheDecodeWork w;
    w.cache = &cv, w.blocks = blocks.data(), w.head = h;
    w.key_begin = std::max(span_begin, c * chunk), w.key_end = std::min(span_end, (c + 1) * chunk);
    w.softcap = softcap, w.queries = &heads[static_cast<size_t>(h)];
    w.m = m.data() + it * rows, w.l = l.data() + it * rows, w.acc = acc.data() + it * rows * dv;
    engine::cache_decode_chunk(w);
  }
  if (stop.stopped()) throw Interrupted("kv_cache_attention: interrupted by the caller (ComputeConfig::interrupt)");
  // Each row's chunks in order, then the sink (a logit with no value row): the decode paths'
  // one merge, and one finish (engine/row_end.hpp).
  std::vector<float> row(static_cast<size_t>(dv));
  for (int64_t h = 0; h < hkv; ++h)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = h * group + r / n, i = r % n, at0 = h * n_chunks * rows + r;
      // The kernel's scores lack shift = scale·q·μ (center_keys): the sink's logit loses it
      // too, and L gets it back.
      const double row_shift = shift[static_cast<size_t>(h * rows + r)];
      const double given_sink = o.sinks.empty() ? 0.0 : o.sinks[static_cast<size_t>(head)];
      const float sink = o.sinks.empty() ? -std::numeric_limits<float>::infinity()
                                         : static_cast<float>(given_sink - row_shift);
      std::fill(row.begin(), row.end(), 0.0f);  // a row no chunk reaches (its sink alone) sums nothing
      const engine::MergedRow mr = engine::cache_merge_row(n_chunks, m.data() + at0, l.data() + at0, rows,
                                                                acc.data() + at0 * dv, rows * dv, dv, sink, row.data());
      if (tf.value_rotation != nullptr) tf.value_rotation->unrotate(row.data());  // O is linear in the rows
      const engine::RowEnd e = engine::finish_row(mr.m, mr.l, false, row.data(), dv, out.row(0, head, i),
                                                  out.stride(Axis::dim));
      lse.row(0, head, i)[0] = e.empty ? e.lse : static_cast<float>(static_cast<double>(e.lse) + row_shift);
      // Finite inputs can still overflow a score (|q|, |k| near float's limits): the engine's
      // error (with check_finite off: NaN in, NaN out).
      if (e.overflow && o.check_finite)
        throw Error(engine::scores_overflow_message("kv_cache_attention", seq_index, head, i));
    }
  if (o.check_finite) detail::check_result_finite<float>(out, "out");  // as the engine: sums beyond float
}

}  // namespace

void kv_cache_attention(const KVCache& cache, int64_t layer, std::span<const int64_t> seqs, ConstView<float> q,
                        const AttentionOptions<float>& options, const ForwardOutputs<float>& outputs,
                        std::span<const int64_t> query_lengths, const ComputeConfig& config) {
  detail::check_kv_cache_outputs(outputs);
  const int threads = team_size(config.threads, "kv_cache_attention: threads");
  const std::vector<detail::CachedSequence<float>> calls =
      detail::cached_sequences<float>(cache, layer, seqs, q, options, outputs.out, outputs.lse, query_lengths);
  const detail::CacheLayerView cv = detail::KVCacheAccess::layer(cache, layer);
  // Each sequence's step and team. A sequence too small for a team of its own (the decode
  // path's grain, kSmallDecodeBytes) still belongs to a call that may not be: such sequences
  // run side by side, one thread each, when together they exceed the grain.
  struct Planned {
    detail::CacheTransforms tf;
    engine::CacheStep step;
    int team;
    int64_t bytes;
  };
  std::vector<Planned> plans;
  std::vector<size_t> side_by_side;
  int64_t side_by_side_bytes = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const detail::CachedSequence<float>& s = calls[i];
    const detail::CacheTransforms tf = detail::KVCacheAccess::transforms(cache, s.seq, layer);
    const engine::CacheStep step = cache_step(cv, tf, s.q.heads(), s.q.seq(), s.len, options);
    const int64_t bytes = engine::decode_kv_bytes(s.len * cv.kv_heads, cv.key_row, cv.value_row);
    plans.push_back({tf, step, engine::decode_threads(threads, bytes), bytes});
    if (step != engine::CacheStep::gather && plans.back().team == 1)
      side_by_side.push_back(i), side_by_side_bytes += bytes;
  }
  if (threads == 1 || side_by_side.size() < 2 || side_by_side_bytes <= engine::kSmallDecodeBytes) side_by_side.clear();

  const engine::StopRequest stop(&config.interrupt);  // one for the call: its 10 ms rate spans the sequences
  auto run = [&](size_t i, int team, const engine::StopRequest& sequence_stop, const ComputeConfig& sequence_config) {
    const detail::CachedSequence<float>& s = calls[i];
    const detail::CacheTransforms& tf = plans[i].tf;
    switch (plans[i].step) {
      case engine::CacheStep::engine:
        engine_sequence(cv, detail::KVCacheAccess::blocks(cache, s.seq), s.index, s.len, s.q, options, s.out, s.lse, tf,
                        team, sequence_config);
        break;
      case engine::CacheStep::cache:
        fused_sequence(cache, cv, s.seq, s.index, s.len, s.q, options, s.out, s.lse, tf, team, sequence_stop);
        break;
      case engine::CacheStep::gather: {
        const auto [k, v] = detail::gathered_sequence(cache, layer, s.seq, s.len);
        engine::attention_forward<float>(s.q, k, v, options, {s.out, s.lse}, sequence_config);
        break;
      }
    }
  };
  // Any sequence's error is reported as the first in seqs' order would have been, whichever
  // thread met it first (exceptions cannot leave an OpenMP region).
  std::vector<std::exception_ptr> errors(calls.size());
  // Asked once here, before any sequence: on a busy machine the other thread may take every
  // side-by-side sequence before the calling thread takes one, and ask nothing in between.
  stop();
  if (!side_by_side.empty() && !stop.stopped()) {
    // The longest first, handed out one at a time: the team finishes together. Only the
    // calling thread (OpenMP's thread 0 here) asks the caller's interrupt, between sequences;
    // the sequences themselves ask nothing.
    std::stable_sort(side_by_side.begin(), side_by_side.end(),
                     [&](size_t a, size_t b) { return plans[a].bytes > plans[b].bytes; });
    ComputeConfig quiet = config;
    quiet.interrupt = nullptr;
    const engine::StopRequest never(nullptr);
    const auto n = static_cast<int64_t>(side_by_side.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t j = 0; j < n; ++j) {
      if (stop()) continue;
      const size_t i = side_by_side[static_cast<size_t>(j)];
      try {
        run(i, 1, never, quiet);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
  std::vector<bool> done_side_by_side(calls.size(), false);
  for (size_t i : side_by_side) done_side_by_side[i] = true;
  for (size_t i = 0; i < calls.size() && !stop.stopped(); ++i) {
    if (done_side_by_side[i]) continue;
    try {
      run(i, plans[i].team, stop, config);
    } catch (...) {
      errors[i] = std::current_exception();
      break;
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  if (stop.stopped()) throw Interrupted("kv_cache_attention: interrupted by the caller (ComputeConfig::interrupt)");
}

}  // namespace attnlab
