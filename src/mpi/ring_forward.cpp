// Ring attention, forward (ring_attention.hpp): K/V blocks travel the ring while each rank
// runs the engine on the block in hand; the partial (O, L) of each engine call merge into
// the rank's running result through their log-sum-exp, in double, in the ring's order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/engine.hpp"
#include "ring_common.hpp"

namespace attnlab::mpi {
namespace {
using namespace detail;

constexpr int kKvTag = 1;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(e^a + e^b) without overflow: the larger plus log1p of the smaller's ratio.
double log_add_exp(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}

// The running result of this rank's rows: O and L in double.
struct Partial {
  std::vector<double> out, lse;
  int64_t n, dv, heads;

  Partial(const Ring& ring, int64_t rows)
      : out(static_cast<size_t>(ring.B * ring.Hq * rows * ring.dv), 0.0),
        lse(static_cast<size_t>(ring.B * ring.Hq * rows), kNegInf), n(rows), dv(ring.dv), heads(ring.Hq) {}

  // Folds in an engine call's (o, l) for rows [q0, q0 + o.seq()).
  void merge(const Tensor<float>& o, const Tensor<float>& l, int64_t q0) {
    const int64_t rows = o.size(Axis::seq);
    for (int64_t b = 0; b < o.size(Axis::batch); ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rows; ++i) {
          const double lb = l(b, h, i, 0);
          if (lb == kNegInf) continue;  // the call saw no key for this row
          const size_t r = static_cast<size_t>((b * heads + h) * n + q0 + i);
          const double la = lse[r], L = log_add_exp(la, lb);
          const double wa = la == kNegInf ? 0.0 : std::exp(la - L), wb = std::exp(lb - L);
          double* acc = &out[r * static_cast<size_t>(dv)];
          const float* ob = &o(b, h, i, 0);
          for (int64_t c = 0; c < dv; ++c) acc[c] = wa * acc[c] + wb * static_cast<double>(ob[c]);
          lse[r] = L;
        }
  }

  // The sink of head h joins every row's softmax once, here: it adds to L and carries no value.
  void add_sinks(std::span<const float> sinks) {
    for (size_t r = 0; r < lse.size(); ++r) {
      const double sink = sinks[static_cast<size_t>((static_cast<int64_t>(r) / n) % heads)];
      const double L = log_add_exp(lse[r], sink), w = lse[r] == kNegInf ? 0.0 : std::exp(lse[r] - L);
      for (int64_t c = 0; c < dv; ++c) out[r * static_cast<size_t>(dv) + static_cast<size_t>(c)] *= w;
      lse[r] = L;
    }
  }
};

// W: the element type K and V travel in. 16-bit inputs travel as they came (half the bytes
// of float32) and are widened per block, exactly: the engine sees the same floats either way.
template <class W>
void forward_core(const Ring& ring, Tensor<float>& q, const Tensor<W>& k, const Tensor<W>& v,
                  Tensor<float>& out, Tensor<float>& lse, const ComputeConfig& config, RingStats* stats) {
  constexpr bool kWide = std::is_same_v<W, float>;
  const MPI_Datatype wire = kWide ? MPI_FLOAT : MPI_UINT16_T;
  const int64_t n = ring.rows(ring.rank);
  if (const std::vector<double> s = row_scales(ring); !s.empty()) scale_rows(q, s);
  int64_t longest = 0;
  for (int r = 0; r < ring.size; ++r) longest = std::max(longest, ring.rows(r));
  const int64_t per_row = ring.B * ring.Hkv * (ring.d + ring.dv);
  std::vector<W> cur(static_cast<size_t>(longest * per_row)), next(cur.size());
  std::vector<float> widened(kWide ? 0 : cur.size());
  std::copy(k.data(), k.data() + k.numel(), cur.begin());
  std::copy(v.data(), v.data() + v.numel(), cur.begin() + k.numel());

  Partial acc(ring, n);
  std::vector<MPI_Request> requests;
  std::vector<int64_t> key_lengths;
  for (int step = 0; step < ring.size; ++step) {
    const int src = ring.source(step);
    const int64_t n_src = ring.rows(src);
    if (step + 1 < ring.size) {  // the next block is on its way while this one is computed
      requests.resize(2);
      MPI_Isend(cur.data(), message_count(n_src * per_row), wire, ring.next(), kKvTag, ring.comm, &requests[0]);
      MPI_Irecv(next.data(), message_count(ring.rows(ring.source(step + 1)) * per_row), wire, ring.prev(),
                kKvTag, ring.comm, &requests[1]);
      if (stats != nullptr) stats->bytes_sent += n_src * per_row * static_cast<int64_t>(sizeof(W));
    }
    const double t0 = now();
    float* block = nullptr;
    if constexpr (kWide) {
      block = cur.data();
    } else {
      for (int64_t e = 0; e < n_src * per_row; ++e) widened[static_cast<size_t>(e)] = cur[static_cast<size_t>(e)].to_float();
      block = widened.data();
    }
    const TensorView<float> kb = packed(block, ring.B, ring.Hkv, n_src, ring.d);
    const TensorView<float> vb = packed(block + kb.numel(), ring.B, ring.Hkv, n_src, ring.dv);
    for (const BlockCall& call : block_calls(ring, src)) {
      Tensor<float> o({ring.B, ring.Hq, call.nq, ring.dv}), l({ring.B, ring.Hq, call.nq, 1});
      engine::attention_forward<float>(rows(q.view(), call.q0, call.nq), rows(kb, call.k0, call.nk),
                                       rows(vb, call.k0, call.nk), block_options(ring, call, key_lengths),
                                       {o.view(), l.view()}, config);
      acc.merge(o, l, call.q0);
    }
    if (stats != nullptr) stats->compute_seconds += now() - t0;
    wait(requests, stats);
    std::swap(cur, next);
  }
  if (!ring.sinks.empty()) acc.add_sinks(ring.sinks);
  for (size_t e = 0; e < acc.out.size(); ++e) out.data()[e] = static_cast<float>(acc.out[e]);
  for (size_t r = 0; r < acc.lse.size(); ++r) lse.data()[r] = static_cast<float>(acc.lse[r]);
}

template <class T>
void forward(MPI_Comm comm, const RingLayout& layout, ConstView<T> q, ConstView<T> k, ConstView<T> v,
             const AttentionOptions<float>& options, TensorView<T> out, TensorView<float> lse,
             const ComputeConfig& config, RingStats* stats) {
  Tensor<float> qf = to_float(q), kf = to_float(k), vf = to_float(v);
  const Argument args[] = {argument("q", q), argument("k", k), argument("v", v), argument("out", out),
                           argument("lse", lse)};
  const FiniteInput finite[] = {{"q", &qf}, {"k", &kf}, {"v", &vf}};
  const Ring ring = prepare(comm, layout, args, options, finite);
  Tensor<float> of(out.shape()), lf(lse.shape());
  if constexpr (std::is_same_v<T, float>) {
    forward_core(ring, qf, kf, vf, of, lf, config, stats);
  } else {
    kf = {}, vf = {};
    forward_core(ring, qf, contiguous(k), contiguous(v), of, lf, config, stats);
  }
  store(of, out);
  store(lf, lse);
}

}  // namespace

template <class T>
typename engine::EngineElement<T>::returns ring_attention_forward(MPI_Comm comm, const RingLayout& layout,
                                                                  ConstView<T> q, ConstView<T> k, ConstView<T> v,
                                                                  const AttentionOptions<Accum<T>>& options,
                                                                  const ForwardOutputs<T>& outputs,
                                                                  const ComputeConfig& config, RingStats* stats) {
  if (outputs.diagnostics || outputs.dropout_mask.present())
    throw Error("ring attention: diagnostics and the dropout mask are not supported (ask for out and lse only)");
  forward(comm, layout, q, k, v, options, outputs.out, outputs.lse, config, stats);
}

#define ATTNLAB_INSTANTIATE(T)                                                                                   \
  template void ring_attention_forward<T>(MPI_Comm, const RingLayout&, ConstView<T>, ConstView<T>, ConstView<T>, \
                                          const AttentionOptions<float>&, const ForwardOutputs<T>&,              \
                                          const ComputeConfig&, RingStats*);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(bfloat16)
ATTNLAB_INSTANTIATE(float16)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab::mpi
