// `attnlab bench`'s timed rounds (bench_timing.hpp).
#include "bench_timing.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "attnlab/engine.hpp"

namespace {

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return 1e3 * (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec)) +
         1e-3 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

bool attnlab::cli::reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  return static_cast<bool>(f.flush());
}

attnlab::cli::BenchTimings attnlab::cli::time_rounds(std::vector<BenchImpl>& impls, BenchBuffers& buf,
                                                     const BenchProtocol& a) {
  namespace ab = attnlab::bench;
  const int threads = a.threads;
  const size_t nkv = buf.k.size();
  BenchTimings result;
  auto& samples = result.samples;
  // Each implementation's turn starts with an idle pause, so that the previous
  // implementation's spinning worker threads have gone to sleep: OpenBLAS's workers
  // spin (sched_yield) for about 2^28 cycles after a call, and libgomp's for a while
  // too; perf showed 8 % of all samples in OpenBLAS's yield loop, stealing a core
  // from whichever implementation ran next.
  auto settle = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(a.settle_ms)); };
  // The pause also lets the cores go idle, and an idle core of this kind of machine
  // can take milliseconds to wake: on a nested-KVM guest that halts idle vCPUs at
  // once, an OpenMP worker joined a parallel region 1.8 ms after a 150 ms pause and
  // 3.9 ms after a 20 ms one (1 µs after 1 ms). A loop calling attention (a decoding
  // model, layer after layer) never pays that, so each timed call follows untimed
  // calls of the same implementation, at least one and for at least 20 ms: one call
  // wakes the threads, and a 20 ms spin after a 150 ms pause brought a 10 ms decode
  // back to its back-to-back time where one call did not always (noisy runs: the
  // machine's own speed moves too). --cold times the first call after the pause instead.
  auto warm_up = [&](auto&& fn) {
    if (a.cold) return;
    const auto t0 = std::chrono::steady_clock::now();
    do fn();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20));
  };
  auto timed = [&](const std::string& impl, const std::string& pass, auto&& fn, bool record) {
    reset_peak_rss();
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = process_cpu_ms() - c0;
    if (!record) return;
    BenchSample& s = samples[{impl, pass}];
    s.ms.push_back(ms);
    s.cpu_ms.push_back(cpu);
    s.rss_mb = std::max(s.rss_mb, peak_rss_mb());
  };
  // The warm-up's results of the first implementation, and every other one's distance
  // from them: the implementations compute the same thing (a check on the peers' shapes).
  std::vector<float> first_out, first_grads;
  auto& diff = result.diff;
  auto compare = [&](const std::string& impl, const std::string& pass, std::vector<float>& first,
                     std::initializer_list<const BenchBuffer*> results) {
    const bool is_first = first.empty();
    double worst = 0;
    size_t at = 0;
    for (const auto* r : results)
      for (float x : *r) {
        if (is_first)
          first.push_back(x);
        else {
          const double d = std::abs(static_cast<double>(x) - first[at++]);
          worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);  // NaN: no agreement
        }
      }
    diff[{impl, pass}] = worst;
  };
  // The read bound, timed once per round before the implementations, on their K and V
  // and under the same protocol: what reading K and V once costs in the conditions the
  // passes run in, measured in the same minutes (this machine's bandwidth moves by
  // 10-30 % within minutes; the probe's best pass before or after is its ceiling).
  volatile float read_sink = 0;
  auto read_kv = [&] { read_sink = read_sink + ab::read_once(buf.k.data(), buf.v.data(), nkv, threads, a.reader); };
  // --evict-llc: a model decodes layer after layer, so each layer's K and V come from
  // memory, while calls repeated on one cache find part of it in the last-level cache (all
  // of it when it is smaller: a 1B model's layer holds a few MB). Reading 3× the cache's
  // size of other data on the same threads right before each timed call (the untimed calls
  // before it keep the cores awake, and so does this) leaves nothing of K and V there, for
  // the read bound and every implementation alike.
  const int64_t llc_found = attnlab::engine::last_level_cache_bytes(),
                llc_bytes = llc_found > 0 ? llc_found : int64_t{32} << 20;
  const size_t evict_floats =
      a.evict_llc ? static_cast<size_t>(ab::probe_bytes_within_memory(3 * llc_bytes)) / sizeof(float) : 0;
  result.llc_bytes = llc_bytes, result.llc_found = llc_found > 0, result.evict_floats = evict_floats;
  BenchBuffer evict(evict_floats);
  std::fill(evict.begin(), evict.end(), 1.0f);
  auto evict_caches = [&] {
    if (a.evict_llc)
      read_sink = read_sink + ab::read_once(evict.data(), evict.data() + evict_floats / 2, evict_floats / 2, threads);
  };
  for (int r = -1; r < a.repeats; ++r) {  // r = −1: warm-up, not recorded
    settle();
    warm_up(read_kv);
    evict_caches();
    timed("read", "bound", read_kv, r >= 0);
    for (auto& impl : impls) {
      ab::Peer& peer = *impl.peer;
      auto forward = [&] { peer.forward(buf.q.data(), buf.k.data(), buf.v.data(), buf.out.data()); };
      settle();
      warm_up(forward);
      evict_caches();
      timed(impl.key(), "forward", forward, r >= 0);
      if (r < 0) compare(impl.key(), "forward", first_out, {&buf.out});
      if (a.forward_only) continue;
      // backward() needs the forward's state, which only one backward may use (autograd
      // frees its graph): the timed forward is the warm call before it.
      if (a.cold) settle();
      timed(
          impl.key(), "backward", [&] { peer.backward(buf.go.data(), buf.dq.data(), buf.dk.data(), buf.dv.data()); },
          r >= 0);
      if (r < 0) compare(impl.key(), "backward", first_grads, {&buf.dq, &buf.dk, &buf.dv});
    }
  }
  return result;
}
