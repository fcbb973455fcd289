// Ring attention's speed against the one-process engine (docs/scale-out.md):
//
//   mpirun -np 2 build/attnlab_ring_bench --seq 32768 --dim 64 --heads 4 [--causal] [--backward] --threads 1
//   build/attnlab_ring_bench --engine --seq 32768 --dim 64 --heads 4 [--causal] [--backward] --threads 2
//
// Times the forward, or with --backward the backward (median and range of --repeats, after a
// warm-up; the per-rank figures are the median repeat's),
// GFLOP/s counted over the visible (query, key) pairs (4·d FLOPs each: q·k and p·v; the
// backward 10·d: S, dV, dP, dQ, dK), and per rank the seconds spent
// computing and waiting in MPI for a block that had not arrived: the overlap, measured.
// bench/ring_attention.sh runs both forms of each case in turn.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/ring_attention.hpp"

namespace {

struct Args {
  int64_t seq = 32768, dim = 64, heads = 4;
  bool causal = false, engine = false, backward = false;
  int threads = 1, repeats = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) throw attnlab::Error(s + ": a value is needed");
      return std::stoll(argv[++i]);
    };
    if (s == "--seq") a.seq = next();
    else if (s == "--repeats" && (i + 1 >= argc || std::stoll(argv[i + 1]) < 1)) throw attnlab::Error("--repeats: at least 1");
    else if (s == "--dim") a.dim = next();
    else if (s == "--heads") a.heads = next();
    else if (s == "--threads") a.threads = static_cast<int>(next());
    else if (s == "--repeats") a.repeats = static_cast<int>(next());
    else if (s == "--causal") a.causal = true;
    else if (s == "--engine") a.engine = true;
    else if (s == "--backward") a.backward = true;
    else throw attnlab::Error("unknown argument " + s);
  }
  return a;
}

attnlab::Tensor<float> random_tensor(const attnlab::Shape& shape, uint64_t seed) {
  attnlab::Tensor<float> t(shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& x : t.storage()) x = n(rng);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    const Args a = parse(argc, argv);
    const auto layout = attnlab::mpi::RingLayout::zigzag(a.seq, a.engine ? 1 : size);
    const int64_t n = a.engine ? a.seq : layout.shard_length(rank);
    const auto q = random_tensor({1, a.heads, n, a.dim}, 1 + static_cast<uint64_t>(rank)),
               k = random_tensor({1, a.heads, n, a.dim}, 100 + static_cast<uint64_t>(rank)),
               v = random_tensor({1, a.heads, n, a.dim}, 200 + static_cast<uint64_t>(rank));
    attnlab::Tensor<float> out({1, a.heads, n, a.dim}), lse({1, a.heads, n, 1});
    attnlab::AttentionOptions<float> opt;
    opt.causal = a.causal ? attnlab::Causal::top_left : attnlab::Causal::none;
    attnlab::ComputeConfig config;
    config.threads = a.threads;
    attnlab::Tensor<float> dq(q.shape()), dk(k.shape()), dv(v.shape());
    if (a.backward) {  // the forward's out and lse, once
      if (a.engine)
        attnlab::attention_forward(q.view(), k.view(), v.view(), opt, {out.view(), lse.view()}, config);
      else
        attnlab::mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), opt,
                                             {out.view(), lse.view()}, config);
    }
    std::vector<double> times;                       // the slowest rank's, per repeat
    std::vector<attnlab::mpi::RingStats> run_stats;  // this rank's, per repeat
    for (int r = 0; r <= a.repeats; ++r) {  // r = 0 warms up
      attnlab::mpi::RingStats stats;
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (a.backward && a.engine)
        attnlab::attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), out.view(), opt,
                                    {dq.view(), dk.view(), dv.view()}, config);
      else if (a.backward)
        attnlab::mpi::ring_attention_backward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), out.view(),
                                              lse.view(), out.view(), opt, {dq.view(), dk.view(), dv.view()}, config,
                                              &stats);
      else if (a.engine)
        attnlab::attention_forward(q.view(), k.view(), v.view(), opt, {out.view(), lse.view()}, config);
      else
        attnlab::mpi::ring_attention_forward(MPI_COMM_WORLD, layout, q.view(), k.view(), v.view(), opt,
                                             {out.view(), lse.view()}, config, &stats);
      double t = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (r > 0) times.push_back(slowest), run_stats.push_back(stats);
    }
    // The median repeat (the lower middle for an even count), and the spread over all of them.
    std::vector<size_t> order(times.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return times[x] < times[y]; });
    const size_t mid = order[(order.size() - 1) / 2];
    const double best = times[mid];
    const attnlab::mpi::RingStats best_stats = run_stats[mid];
    const double fastest = times[order.front()], slowest_run = times[order.back()];
    const double pairs = a.causal ? 0.5 * static_cast<double>(a.seq) * static_cast<double>(a.seq + 1)
                                  : static_cast<double>(a.seq) * static_cast<double>(a.seq);
    const double gflops = (a.backward ? 10.0 : 4.0) * static_cast<double>(a.dim) * static_cast<double>(a.heads) * pairs / best / 1e9;
    std::vector<double> mine{best_stats.compute_seconds, best_stats.wait_seconds}, all(2 * static_cast<size_t>(size));
    MPI_Gather(mine.data(), 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("%s %s N=%lld d=%lld heads=%lld %s: %s, median of %zu %.3f s (%.3f..%.3f), %.1f GFLOP/s",
                  a.engine ? "engine" : "ring",
                  a.backward ? "backward" : "forward",
                  static_cast<long long>(a.seq), static_cast<long long>(a.dim), static_cast<long long>(a.heads),
                  a.causal ? "causal" : "non-causal",
                  (a.engine ? "1 process x " + std::to_string(a.threads) + " threads"
                            : std::to_string(size) + " ranks x " + std::to_string(a.threads) + " threads")
                      .c_str(),
                  times.size(), best, fastest, slowest_run, gflops);
      if (!a.engine)
        for (int r = 0; r < size; ++r)
          std::printf(" | rank %d compute %.3f s wait %.3f s", r, all[2 * static_cast<size_t>(r)],
                      all[2 * static_cast<size_t>(r) + 1]);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab_ring_bench: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return 0;
}
