// Ring attention, backward (ring_attention.hpp): the K/V blocks travel the ring as in the
// forward, and with each block its dK/dV accumulator: a rank computes its rows'
// contribution to the block in hand while the accumulator so far arrives from the previous
// rank, adds it (earlier ranks' sum + its own, a fixed order) and sends it on; after P hops
// the accumulator is home. dQ sums this rank's calls in the ring's order, in double.
#include <algorithm>
#include <cmath>

#include "attnlab/engine.hpp"
#include "ring_common.hpp"

namespace attnlab::mpi {
namespace {
using namespace detail;

constexpr int kKvTag = 1, kGradTag = 2;

// dsinks_h = −Σ_i exp(sink_h − L_i)·D_i over every rank's rows, D_i = dO_i·O_i: this rank's
// sums gathered and added in rank order, so every rank has the same bits.
void sink_gradients(const Ring& ring, const Tensor<float>& out, const Tensor<float>& lse,
                    const Tensor<float>& grad_out, std::span<float> dsinks) {
  std::vector<double> mine(static_cast<size_t>(ring.Hq), 0.0);
  for (int64_t b = 0; b < ring.B; ++b)
    for (int64_t h = 0; h < ring.Hq; ++h)
      for (int64_t i = 0; i < out.size(Axis::seq); ++i) {
        double D = 0;
        for (int64_t c = 0; c < ring.dv; ++c)
          D += static_cast<double>(grad_out(b, h, i, c)) * static_cast<double>(out(b, h, i, c));
        mine[static_cast<size_t>(h)] -= std::exp(ring.sinks[static_cast<size_t>(h)] - static_cast<double>(lse(b, h, i, 0))) * D;
      }
  std::vector<double> all(mine.size() * static_cast<size_t>(ring.size));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                MPI_DOUBLE, ring.comm);
  for (int64_t h = 0; h < ring.Hq; ++h) {
    double sum = 0;
    for (int r = 0; r < ring.size; ++r) sum += all[static_cast<size_t>(r * ring.Hq + h)];
    dsinks[static_cast<size_t>(h)] = static_cast<float>(sum);
  }
}

// dst[rows k0 .. k0 + n) of a packed [B, heads, n_block, dim] region += part [B, heads, n, dim].
void add_rows(float* dst, int64_t n_block, int64_t k0, const Tensor<float>& part) {
  const int64_t heads = part.size(Axis::heads), n = part.size(Axis::seq), dim = part.size(Axis::dim);
  for (int64_t b = 0; b < part.size(Axis::batch); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        float* row = dst + ((b * heads + h) * n_block + k0 + i) * dim;
        const float* p = &part(b, h, i, 0);
        for (int64_t c = 0; c < dim; ++c) row[c] += p[c];
      }
}

struct Gradients {
  Tensor<float> dq, dk, dv;
};

void backward_core(const Ring& ring, Tensor<float>& q, const Tensor<float>& k, const Tensor<float>& v,
                   const Tensor<float>& out, const Tensor<float>& lse, const Tensor<float>& grad_out, Gradients& g,
                   const ComputeConfig& config, RingStats* stats) {
  const int64_t n = ring.rows(ring.rank);
  const std::vector<double> scales = row_scales(ring);
  if (!scales.empty()) scale_rows(q, scales);
  int64_t longest = 0;
  for (int r = 0; r < ring.size; ++r) longest = std::max(longest, ring.rows(r));
  const int64_t per_row = ring.B * ring.Hkv * (ring.d + ring.dv);
  const size_t block = static_cast<size_t>(longest * per_row);
  std::vector<float> cur(block), next(block), grads(block), grads_in(block), grads_out(block);
  std::copy(k.data(), k.data() + k.numel(), cur.begin());
  std::copy(v.data(), v.data() + v.numel(), cur.begin() + k.numel());

  std::vector<double> dq(static_cast<size_t>(q.numel()), 0.0);
  std::vector<MPI_Request> kv_requests, in_request, out_request;
  std::vector<int64_t> key_lengths;
  for (int step = 0; step < ring.size; ++step) {
    const int src = ring.source(step);
    const int64_t n_src = ring.rows(src), count = n_src * per_row;
    if (step + 1 < ring.size) {
      kv_requests.resize(2);
      MPI_Isend(cur.data(), message_count(count), MPI_FLOAT, ring.next(), kKvTag, ring.comm, &kv_requests[0]);
      MPI_Irecv(next.data(), message_count(ring.rows(ring.source(step + 1)) * per_row), MPI_FLOAT, ring.prev(),
                kKvTag, ring.comm, &kv_requests[1]);
      if (stats != nullptr) stats->bytes_sent += count * static_cast<int64_t>(sizeof(float));
    }
    if (step > 0) {  // the earlier ranks' sum for this block, arriving while we compute
      in_request.resize(1);
      MPI_Irecv(grads_in.data(), message_count(count), MPI_FLOAT, ring.prev(), kGradTag, ring.comm, &in_request[0]);
    }
    const double t0 = now();
    std::fill(grads.begin(), grads.begin() + count, 0.0f);
    const int64_t k_elems = ring.B * ring.Hkv * n_src * ring.d;
    const TensorView<float> kb = packed(cur.data(), ring.B, ring.Hkv, n_src, ring.d);
    const TensorView<float> vb = packed(cur.data() + k_elems, ring.B, ring.Hkv, n_src, ring.dv);
    for (const BlockCall& call : block_calls(ring, src)) {
      Tensor<float> dq_part({ring.B, ring.Hq, call.nq, ring.d}), dk_part({ring.B, ring.Hkv, call.nk, ring.d}),
          dv_part({ring.B, ring.Hkv, call.nk, ring.dv});
      engine::attention_backward<float>(rows(q.view(), call.q0, call.nq), rows(kb, call.k0, call.nk),
                                        rows(vb, call.k0, call.nk), rows(out.view(), call.q0, call.nq),
                                        rows(lse.view(), call.q0, call.nq), rows(grad_out.view(), call.q0, call.nq),
                                        block_options(ring, call, key_lengths),
                                        {dq_part.view(), dk_part.view(), dv_part.view()}, config);
      for (int64_t b = 0; b < ring.B; ++b)
        for (int64_t h = 0; h < ring.Hq; ++h)
          for (int64_t i = 0; i < call.nq; ++i)
            for (int64_t c = 0; c < ring.d; ++c)
              dq[static_cast<size_t>(((b * ring.Hq + h) * n + call.q0 + i) * ring.d + c)] += dq_part(b, h, i, c);
      add_rows(grads.data(), n_src, call.k0, dk_part);
      add_rows(grads.data() + k_elems, n_src, call.k0, dv_part);
    }
    if (stats != nullptr) stats->compute_seconds += now() - t0;
    if (step > 0) {
      wait(in_request, stats);
      for (int64_t e = 0; e < count; ++e) grads[static_cast<size_t>(e)] = grads_in[static_cast<size_t>(e)] + grads[static_cast<size_t>(e)];
    }
    wait(out_request, stats);  // the previous accumulator has left before its buffer is reused
    std::swap(grads, grads_out);
    if (ring.size > 1) {
      out_request.resize(1);
      MPI_Isend(grads_out.data(), message_count(count), MPI_FLOAT, ring.next(), kGradTag, ring.comm, &out_request[0]);
      if (stats != nullptr) stats->bytes_sent += count * static_cast<int64_t>(sizeof(float));
    }
    wait(kv_requests, stats);
    std::swap(cur, next);
  }
  const float* home = grads_out.data();  // one rank: its own block's gradients
  if (ring.size > 1) {
    in_request.resize(1);
    MPI_Irecv(grads_in.data(), message_count(n * per_row), MPI_FLOAT, ring.prev(), kGradTag, ring.comm, &in_request[0]);
    wait(in_request, stats);
    wait(out_request, stats);
    home = grads_in.data();
  }
  std::copy(home, home + g.dk.numel(), g.dk.data());
  std::copy(home + g.dk.numel(), home + g.dk.numel() + g.dv.numel(), g.dv.data());
  // The prescaled rows' dQ carries their scale (∂(s·q)/∂q = s).
  const int64_t row_elems = ring.Hq * ring.d;
  for (size_t e = 0; e < dq.size(); ++e) {
    const int64_t b = static_cast<int64_t>(e) / (row_elems * n), i = (static_cast<int64_t>(e) / ring.d) % n;
    const double s = scales.empty() ? 1.0 : scales[static_cast<size_t>(b * n + i)];
    g.dq.data()[e] = static_cast<float>(s * dq[e]);
  }
}

template <class T>
void backward(MPI_Comm comm, const RingLayout& layout, ConstView<T> q, ConstView<T> k, ConstView<T> v,
              ConstView<T> out, ConstView<float> lse, ConstView<T> grad_out, const AttentionOptions<float>& options,
              TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, const ComputeConfig& config,
              std::span<float> dsinks, RingStats* stats) {
  Tensor<float> qf = to_float(q), kf = to_float(k), vf = to_float(v), of = to_float(out), lf = to_float(lse),
                gf = to_float(grad_out);
  const Argument args[] = {argument("q", q),     argument("k", k),     argument("v", v),
                           argument("out", out), argument("lse", lse), argument("grad_out", grad_out),
                           argument("dq", dq),   argument("dk", dk),   argument("dv", dv),
                           {"dsinks", Shape{1, 1, 1, static_cast<int64_t>(dsinks.size())}, true}};
  // Every input, on every rank, before any exchange: out as the engine checks it, lse always.
  const FiniteInput finite[] = {{"q", &qf},        {"k", &kf},   {"v", &vf},
                                {"grad_out", &gf}, {"out", &of}, {"lse", &lf, true}};
  const Ring ring = prepare(comm, layout, args, options, finite);
  Gradients g{Tensor<float>(dq.shape()), Tensor<float>(dk.shape()), Tensor<float>(dv.shape())};
  backward_core(ring, qf, kf, vf, of, lf, gf, g, config, stats);
  if (!dsinks.empty()) sink_gradients(ring, of, lf, gf, dsinks);
  store(g.dq, dq);
  store(g.dk, dk);
  store(g.dv, dv);
}

}  // namespace

template <class T>
typename engine::EngineElement<T>::returns ring_attention_backward(
    MPI_Comm comm, const RingLayout& layout, ConstView<T> q, ConstView<T> k, ConstView<T> v, ConstView<T> out,
    ConstView<Accum<T>> lse, ConstView<T> grad_out, const AttentionOptions<Accum<T>>& options,
    const BackwardOutputs<T>& grads, const ComputeConfig& config, RingStats* stats) {
  backward(comm, layout, q, k, v, out, lse, grad_out, options, grads.dq, grads.dk, grads.dv, config, grads.dsinks,
           stats);
}

#define ATTNLAB_INSTANTIATE(T)                                                                               \
  template void ring_attention_backward<T>(                                                                  \
      MPI_Comm, const RingLayout&, ConstView<T>, ConstView<T>, ConstView<T>, ConstView<T>, ConstView<float>, \
      ConstView<T>, const AttentionOptions<float>&, const BackwardOutputs<T>&, const ComputeConfig&, RingStats*);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(bfloat16)
ATTNLAB_INSTANTIATE(float16)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab::mpi
