// --context-parallel (context_parallel.hpp): the lead reads, scatters the zigzag shards,
// the ring runs on every rank, the lead gathers and writes.
#include "context_parallel.hpp"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <new>

#include "attnlab/ring_attention.hpp"
#include "mpi_world.hpp"

namespace attnlab::cli::cp {
namespace {

using mpi::RingLayout;

bool g_header_sent = false;

// What the lead tells the followers before any data: an error (status = the message's
// length, the message follows), or the element type, the files' rank and the shapes.
enum Field : int { kStatus, kType, kFileRank, kQ, kK = kQ + 4, kV = kK + 4, kFields = kV + 4 };
template <class T>
constexpr int64_t type_code() {
  return std::is_same_v<T, float> ? 0 : std::is_same_v<T, float16> ? 1 : 2;
}

std::vector<int64_t> header_of(int64_t type, int file_rank, const Shape& q, const Shape& k, const Shape& v) {
  std::vector<int64_t> h(kFields, 0);
  h[kType] = type;
  h[kFileRank] = file_rank;
  for (int a = 0; a < 4; ++a) h[kQ + a] = q[a], h[kK + a] = k[a], h[kV + a] = v[a];
  return h;
}

std::vector<int64_t> receive_header() {
  std::vector<int64_t> h(kFields);
  MPI_Bcast(h.data(), kFields, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (h[kStatus] != 0) {
    std::string message(static_cast<size_t>(h[kStatus]), ' ');
    MPI_Bcast(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    throw Error(message);
  }
  return h;
}

Shape shape_at(const std::vector<int64_t>& h, int field, int64_t rows) {
  return {h[static_cast<size_t>(field)], h[static_cast<size_t>(field) + 1], rows, h[static_cast<size_t>(field) + 3]};
}

// The ring's options from the flags: the same command line on every rank gives the same
// options, and the same error for a flag the ring cannot take.
struct RingOptions {
  AttentionOptions<float> options;
  std::vector<float> sinks, alibi_slopes;
  ComputeConfig config;
};
RingOptions ring_options(const AttentionFlags& f) {
  if (!f.mask.empty() || !f.cu_seqlens_q.empty() || !f.cu_seqlens_k.empty() || f.dropout_p != 0)
    throw Error(
        "--context-parallel: --mask, --cu-seqlens-q/k and --dropout-p are not supported across ranks (a "
        "whole [Nq, Nk] mask or layout, and dropout's generator on a block's local rows and keys)");
  RingOptions o;
  o.options.scale = ScalePolicy::parse(f.scale);
  if (f.causal) o.options.causal = parse_causal(f.causal_align.empty() ? "top_left" : f.causal_align.c_str());
  if (f.softcap_flag != nullptr && f.softcap_flag->count() > 0) o.options.softcap = f.softcap;
  o.sinks.assign(f.sinks.begin(), f.sinks.end());
  o.options.sinks = o.sinks;
  if (!f.window.empty()) o.options.window = {f.window[0], f.window[1]};
  o.alibi_slopes.assign(f.alibi_slopes.begin(), f.alibi_slopes.end());
  o.options.alibi_slopes = o.alibi_slopes;
  o.config.threads = f.threads;
  return o;
}

// An MPI type of one element of T (counts are then elements, not bytes).
template <class T>
MPI_Datatype element_type() {
  static MPI_Datatype type = [] {
    MPI_Datatype t;
    MPI_Type_contiguous(sizeof(T), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return t;
  }();
  return type;
}

// Rank r's rows of a whole tensor, in its shard's order; and back.
template <class T>
Tensor<T> rows_of(const Tensor<T>& whole, const RingLayout& layout, int r) {
  Tensor<T> s({whole.shape()[0], whole.shape()[1], layout.shard_length(r), whole.shape()[3]});
  for (int64_t b = 0; b < s.shape()[0]; ++b)
    for (int64_t h = 0; h < s.shape()[1]; ++h)
      for (int64_t i = 0; i < s.shape()[2]; ++i)
        std::copy_n(&whole(b, h, layout.global_row(r, i), 0), s.shape()[3], &s(b, h, i, 0));
  return s;
}
template <class T>
void put_rows(const Tensor<T>& s, const RingLayout& layout, int r, Tensor<T>& whole) {
  for (int64_t b = 0; b < s.shape()[0]; ++b)
    for (int64_t h = 0; h < s.shape()[1]; ++h)
      for (int64_t i = 0; i < s.shape()[2]; ++i)
        std::copy_n(&s(b, h, i, 0), s.shape()[3], &whole(b, h, layout.global_row(r, i), 0));
}

// The lead sends each follower its shard and keeps its own; a follower receives its shard.
template <class T>
Tensor<T> scatter(const Tensor<T>* whole, const Shape& mine, const RingLayout& layout) {
  const MpiWorld& s = mpi_world();
  if (s.rank != 0) {
    Tensor<T> t(mine);
    MPI_Recv(t.data(), static_cast<int>(t.numel()), element_type<T>(), 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return t;
  }
  for (int r = 1; r < s.size; ++r) {
    const Tensor<T> part = rows_of(*whole, layout, r);
    MPI_Send(part.data(), static_cast<int>(part.numel()), element_type<T>(), r, 0, MPI_COMM_WORLD);
  }
  return rows_of(*whole, layout, 0);
}

// The reverse: the lead puts every rank's shard into `whole`.
template <class T>
void gather(const Tensor<T>& mine, const RingLayout& layout, Tensor<T>* whole) {
  const MpiWorld& s = mpi_world();
  if (s.rank != 0) {
    MPI_Send(mine.data(), static_cast<int>(mine.numel()), element_type<T>(), 0, 1, MPI_COMM_WORLD);
    return;
  }
  put_rows(mine, layout, 0, *whole);
  for (int r = 1; r < s.size; ++r) {
    Tensor<T> part({mine.shape()[0], mine.shape()[1], layout.shard_length(r), mine.shape()[3]});
    MPI_Recv(part.data(), static_cast<int>(part.numel()), element_type<T>(), r, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    put_rows(part, layout, r, *whole);
  }
}

// The lead checks what only it can see, then tells the followers the problem.
template <class T>
void announce(const AttentionProblem<T>& p) {
  if (p.q.size(Axis::seq) != p.k.size(Axis::seq))
    throw Error("--context-parallel: self-attention only: q has " + std::to_string(p.q.size(Axis::seq)) +
                " rows and k " + std::to_string(p.k.size(Axis::seq)));
  const RingLayout layout = RingLayout::zigzag(p.q.size(Axis::seq), mpi_world().size);
  const int64_t widest =
      std::max({p.q.size(Axis::heads) * p.q.size(Axis::dim), p.q.size(Axis::heads) * p.v.size(Axis::dim)});
  if (layout.shard_length(0) * p.q.size(Axis::batch) * widest > INT_MAX)
    throw Error("--context-parallel: a shard of " + std::to_string(layout.shard_length(0)) +
                " rows is more than one MPI message holds; use more ranks");
  std::vector<int64_t> h = header_of(type_code<T>(), p.rank, p.q.shape(), p.k.shape(), p.v.shape());
  MPI_Bcast(h.data(), kFields, MPI_INT64_T, 0, MPI_COMM_WORLD);
  g_header_sent = true;
}

// Every rank's part of a run: its shards of q, k and v (from the lead), the ring's forward.
template <class T>
struct Ring {
  RingOptions o;
  RingLayout layout;
  int64_t n;
  Tensor<T> q, k, v, out;
  Tensor<float> lse;

  Ring(const AttentionFlags& f, const std::vector<int64_t>& h, const AttentionProblem<T>* p)
      : o(ring_options(f)),
        layout(RingLayout::zigzag(h[kQ + 2], mpi_world().size)),
        n(layout.shard_length(mpi_world().rank)),
        q(scatter(p ? &p->q : nullptr, shape_at(h, kQ, n), layout)),
        k(scatter(p ? &p->k : nullptr, shape_at(h, kK, n), layout)),
        v(scatter(p ? &p->v : nullptr, shape_at(h, kV, n), layout)),
        out({q.shape()[0], q.shape()[1], n, v.shape()[3]}),
        lse({q.shape()[0], q.shape()[1], n, 1}) {}

  void forward() {
    mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), o.options,
                                {out.view(), lse.view()}, o.config);
  }
};

// Once the ring has begun, a failure only this rank can have (memory, an interrupt) would
// leave the others waiting in MPI for it: it ends the whole job instead. The ring's own
// errors of input are raised on every rank alike and pass through.
template <class Body>
void ending_the_job_on_local_failure(Body&& body) {
  auto end = [](const std::string& what) {
    std::fprintf(stderr, "attnlab: error: rank %d: %s; ending the job\n", mpi_world().rank, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  };
  try {
    body();
  } catch (const OutOfMemory& e) {
    end(e.what());
  } catch (const Interrupted& e) {
    end(e.what());
  } catch (const std::bad_alloc&) {
    end("out of memory");
  }
}

template <class T>
void run_forward(const AttentionFlags& f, const std::vector<int64_t>& h, const AttentionProblem<T>* p,
                 Tensor<T>* out, Tensor<float>* lse) {
  ending_the_job_on_local_failure([&] {
    Ring<T> r(f, h, p);
    r.forward();
    gather(r.out, r.layout, out);
    gather(r.lse, r.layout, lse);
  });
}

template <class T>
void run_backward(const AttentionFlags& f, const std::vector<int64_t>& h, const AttentionProblem<T>* p,
                  const Tensor<T>* grad_out, Tensor<T>* dq, Tensor<T>* dk, Tensor<T>* dv, std::span<float> dsinks) {
  ending_the_job_on_local_failure([&] {
    Ring<T> r(f, h, p);
    const Tensor<T> g = scatter(grad_out, r.out.shape(), r.layout);  // dO has out's shape
    r.forward();
    Tensor<T> dq_s(r.q.shape()), dk_s(r.k.shape()), dv_s(r.v.shape());
    mpi::ring_attention_backward(MPI_COMM_WORLD, r.layout, r.q.view(), r.k.view(), r.v.view(), r.out.view(),
                                 r.lse.view(), g.view(), r.o.options, {dq_s.view(), dk_s.view(), dv_s.view(), dsinks},
                                 r.o.config);
    gather(dq_s, r.layout, dq);
    gather(dk_s, r.layout, dk);
    gather(dv_s, r.layout, dv);
  });
}

// The lead, when reading its inputs failed: the followers get the message and stop too.
void fail_followers(const std::string& message) {
  if (g_header_sent || mpi_world().size == 1) return;
  std::vector<int64_t> h(kFields, 0);
  h[kStatus] = static_cast<int64_t>(message.size());
  MPI_Bcast(h.data(), kFields, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string copy = message;
  MPI_Bcast(copy.data(), static_cast<int>(copy.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  g_header_sent = true;
}

[[noreturn]] void no_ring_for_float64() {
  throw Error("--context-parallel: float64 files run on the double reference, which has no ring; use float32, "
              "float16 or bfloat16");
}

}  // namespace

void run(const AttentionFlags& f, const std::function<void()>& lead, const std::function<void()>& follow) {
  ring_options(f);  // the same command line on every rank: the same error on every rank
  if (mpi_world().rank != 0) return follow();
  try {
    lead();
  } catch (const std::exception& e) {
    fail_followers(e.what());
    throw;
  }
}

template <class T>
void lead_forward(const AttentionFlags& f, const AttentionProblem<T>& p, Tensor<T>& out, Tensor<ScalarOf<T>>& lse) {
  if constexpr (std::is_same_v<T, double>) {
    no_ring_for_float64();
  } else {
    announce(p);
    run_forward<T>(f, header_of(type_code<T>(), p.rank, p.q.shape(), p.k.shape(), p.v.shape()), &p, &out, &lse);
  }
}

template <class T>
void lead_backward(const AttentionFlags& f, const AttentionProblem<T>& p, const Tensor<T>& grad_out, Tensor<T>& dq,
                   Tensor<T>& dk, Tensor<T>& dv, std::vector<ScalarOf<T>>& dsinks) {
  if constexpr (std::is_same_v<T, double>) {
    no_ring_for_float64();
  } else {
    if (grad_out.shape() != Shape{p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], p.v.shape()[3]})
      throw Error("--grad-out: shape " + to_string(grad_out.shape()) + "; expected q's rows and v's width");
    announce(p);
    run_backward<T>(f, header_of(type_code<T>(), p.rank, p.q.shape(), p.k.shape(), p.v.shape()), &p, &grad_out, &dq,
                    &dk, &dv, dsinks);
  }
}

void follow_forward(const AttentionFlags& f) {
  const std::vector<int64_t> h = receive_header();
  switch (h[kType]) {
    case 0: return run_forward<float>(f, h, nullptr, nullptr, nullptr);
    case 1: return run_forward<float16>(f, h, nullptr, nullptr, nullptr);
    default: return run_forward<bfloat16>(f, h, nullptr, nullptr, nullptr);
  }
}

void follow_backward(const AttentionFlags& f, bool want_dsinks) {
  const std::vector<int64_t> h = receive_header();
  std::vector<float> dsinks(want_dsinks ? f.sinks.size() : 0);
  switch (h[kType]) {
    case 0: return run_backward<float>(f, h, nullptr, nullptr, nullptr, nullptr, nullptr, dsinks);
    case 1: return run_backward<float16>(f, h, nullptr, nullptr, nullptr, nullptr, nullptr, dsinks);
    default: return run_backward<bfloat16>(f, h, nullptr, nullptr, nullptr, nullptr, nullptr, dsinks);
  }
}

ATTNLAB_CP_INSTANTIATE_ALL

}  // namespace attnlab::cli::cp
