// `attnlab bench`: forward and backward time of the engine against a naive
// float32 implementation on OpenBLAS and against LibTorch (bench/peers/),
// interleaved repeat by repeat, the median of each reported with GFLOP/s, the
// fraction of the measured FMA peak, and the peak resident memory of each pass.
//
// FLOPs: 4·N²·d per head forward (two N×N×d products), 10·N²·d backward (five),
// halved with --causal. Every implementation runs on --threads threads
// (OpenMP for attnlab, openblas_set_num_threads, torch::set_num_threads).
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "peak_flops.hpp"
#include "peers/peers.hpp"
#include "command.hpp"

namespace {

namespace al = attnlab;
namespace ab = attnlab::bench;

struct BenchArgs {
  int64_t batch = 1, heads = 2, seq = 4096, dim = 64;
  bool causal = false;
  int threads = 0;
  int repeats = 5;
  int settle_ms = 150;
  std::string json;
  std::vector<std::string> impls{"attnlab", "openblas", "libtorch"};
};

// Peak resident memory: /proc/self/clear_refs "5" resets VmHWM to the current
// RSS (Linux ≥ 4.0), so the peak of each pass can be read afterwards.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  return static_cast<bool>(f.flush());
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

// The engine, behind the peers' interface.
class EnginePeer final : public ab::Peer {
 public:
  EnginePeer(const ab::PeerShape& s, int threads)
      : s_(s), cfg_{threads}, lse_({s.B, s.H, s.N, 1}) {
    opt_.causal = s.causal ? al::Causal::top_left : al::Causal::none;
  }
  std::string name() const override { return "attnlab"; }
  void forward(const float* q, const float* k, const float* v, float* out) override {
    q_ = view(q);
    k_ = view(k);
    v_ = view(v);
    out_ = view(out);
    al::attention_forward(q_, k_, v_, opt_, {out, shape()}, lse_.view(), nullptr, cfg_);
  }
  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    al::attention_backward(q_, k_, v_, out_, lse_.view(), view(grad_out), opt_, {dq, shape()}, {dk, shape()},
                           {dv, shape()}, cfg_);
  }

 private:
  al::Shape shape() const { return {s_.B, s_.H, s_.N, s_.D}; }
  al::ConstView<float> view(const float* p) const { return {p, shape()}; }
  ab::PeerShape s_;
  al::ComputeConfig cfg_;
  al::AttentionOptions<float> opt_;
  al::Tensor<float> lse_;
  al::ConstView<float> q_, k_, v_, out_;
};

struct Sample {
  std::vector<double> ms;      // wall-clock time of each repeat
  std::vector<double> cpu_ms;  // CPU time of the whole process (all threads) during each repeat
  double rss_mb = 0;
};

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return 1e3 * (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec)) +
         1e-3 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

void run_bench(const BenchArgs& a) {
  for (const auto& [name, value] : {std::pair{"--batch", a.batch}, {"--heads", a.heads}, {"--seq", a.seq}, {"--dim", a.dim}})
    if (value < 1) throw al::Error(fmt::format("bench: {} must be at least 1, got {}", name, value));
  if (a.repeats < 1) throw al::Error(fmt::format("bench: --repeats must be at least 1, got {}", a.repeats));
  al::check_threads(a.threads, "bench: --threads");  // the library's rule, for every implementation
  // A --json target that cannot be written is an error now, not after the benchmark.
  if (!a.json.empty()) al::io::check_output_path(a.json);
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  const ab::PeerShape shape{a.batch, a.heads, a.seq, a.dim, a.causal};
  if (shape.numel() > (int64_t{1} << 31)) throw al::Error("bench: B·H·N·D must stay below 2^31 elements");

  std::vector<std::unique_ptr<ab::Peer>> impls;
  for (const auto& name : a.impls) {
    if (name == "attnlab") {
      impls.push_back(std::make_unique<EnginePeer>(shape, threads));
    } else if (name == "openblas") {
      const double gb = 4.0 * static_cast<double>(a.batch * a.heads + 1) * static_cast<double>(a.seq) * a.seq / 1e9;
      if (gb > 8.0)
        throw al::Error(fmt::format("bench: the openblas peer would materialise {:.1f} GB of N×N matrices; "
                                    "use --impls attnlab for this size", gb));
      impls.push_back(ab::make_openblas_peer(shape, threads));
    } else if (name == "libtorch") {
      const double gb = 12.0 * static_cast<double>(a.batch * a.heads) * static_cast<double>(a.seq) * a.seq / 1e9;
      if (gb > 8.0)
        throw al::Error(fmt::format("bench: the libtorch peer would materialise about {:.1f} GB of N×N matrices; "
                                    "use --impls attnlab for this size", gb));
      std::string why;
      auto peer = ab::make_libtorch_peer(shape, threads, &why);
      if (!peer) throw al::Error("bench: " + why);
      impls.push_back(std::move(peer));
    } else {
      throw al::Error(fmt::format("bench: unknown implementation '{}' (attnlab, openblas, libtorch)", name));
    }
  }

  // Inputs: standard normal, fixed seed.
  const auto n = static_cast<size_t>(shape.numel());
  std::vector<float> q(n), k(n), v(n), go(n), out(n), dq(n), dk(n), dv(n);
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto* t : {&q, &k, &v, &go})
    for (float& x : *t) x = nd(rng);

  // The FMA peak is measured before the timings and again after them, and the
  // better of the two kept: this shared machine sometimes loses half its
  // capacity for a second or so, and a peak probe caught in such a dip once
  // reported half the real peak (the engine then ran at "154 %" of it).
  ab::Peak peak = ab::measure_peak(threads);
  const bool rss_ok = reset_peak_rss();
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);

  std::map<std::pair<std::string, std::string>, Sample> samples;
  auto timed = [&](const std::string& impl, const std::string& pass, auto&& fn, bool record) {
    // Let the previous call's worker threads go to sleep first. OpenBLAS's
    // workers spin (sched_yield) for about 2^28 cycles after a call, and
    // libgomp's for a while too; perf showed 8 % of all samples in OpenBLAS's
    // yield loop, stealing a core from whichever implementation ran next.
    std::this_thread::sleep_for(std::chrono::milliseconds(a.settle_ms));
    reset_peak_rss();
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = process_cpu_ms() - c0;
    if (!record) return;
    Sample& s = samples[{impl, pass}];
    s.ms.push_back(ms);
    s.cpu_ms.push_back(cpu);
    s.rss_mb = std::max(s.rss_mb, peak_rss_mb());
  };
  for (int r = -1; r < a.repeats; ++r) {  // r = −1: warm-up, not recorded
    for (auto& impl : impls) {
      timed(impl->name(), "forward", [&] { impl->forward(q.data(), k.data(), v.data(), out.data()); }, r >= 0);
      timed(impl->name(), "backward", [&] { impl->backward(go.data(), dq.data(), dk.data(), dv.data()); }, r >= 0);
    }
  }

  {
    const ab::Peak after = ab::measure_peak(threads);
    peak.gflops = std::max(peak.gflops, after.gflops);
    peak.gflops_cpu = std::max(peak.gflops_cpu, after.gflops_cpu);
  }

  const double per_head = static_cast<double>(a.seq) * static_cast<double>(a.seq) * static_cast<double>(a.dim) *
                          static_cast<double>(a.batch * a.heads) * (a.causal ? 0.5 : 1.0);
  fmt::print("attnlab bench: batch {} heads {} seq {} dim {}{} | {} threads | {} | engine target {}\n", a.batch,
             a.heads, a.seq, a.dim, a.causal ? " causal" : "", threads, cpu_name(), al::engine::target_name());
  fmt::print("measured FMA peak on {} threads (best of before and after the timings): {:.1f} GFLOP/s wall-clock, "
             "{:.1f} over CPU time ({}) | load average "
             "{:.2f} {:.2f} {:.2f} | median of {}\n",
             threads, peak.gflops, peak.gflops_cpu, peak.target, load[0], load[1], load[2], a.repeats);
  fmt::print("(% peak and peak_gflops: the wall-clock peak, measured under the same load as the timings; the CPU\n"
             " columns divide by CPU time per thread instead, against the CPU-time peak: the rate while running)\n");
  if (!rss_ok) fmt::print("(peak RSS is the process-wide high-water mark: /proc/self/clear_refs not writable)\n");
  fmt::print("{:<9} {:<9} {:>11} {:>9} {:>7} {:>13} {:>9} {:>10}\n", "impl", "pass", "median ms", "GFLOP/s", "% peak",
             "max RSS MB", "CPU GF/s", "% CPU pk");
  nlohmann::json results = nlohmann::json::array();
  for (const std::string pass : {"forward", "backward"}) {
    for (auto& impl : impls) {
      const Sample& s = samples[{impl->name(), pass}];
      const double ms = median(s.ms);
      const double flops = (pass == "forward" ? 4.0 : 10.0) * per_head;
      const double gflops = flops / (ms * 1e-3) / 1e9;
      // Rate while running: FLOPs over the CPU time per thread (spinning threads count as busy).
      const double cpu_gflops = flops / (median(s.cpu_ms) * 1e-3 / threads) / 1e9;
      fmt::print("{:<9} {:<9} {:>11.2f} {:>9.1f} {:>6.1f}% {:>13.1f} {:>9.1f} {:>9.1f}%\n", impl->name(), pass, ms,
                 gflops, 100.0 * gflops / peak.gflops, s.rss_mb, cpu_gflops, 100.0 * cpu_gflops / peak.gflops_cpu);
      results.push_back({{"impl", impl->name()}, {"pass", pass}, {"batch", a.batch}, {"heads", a.heads},
                         {"seq", a.seq}, {"dim", a.dim}, {"causal", a.causal}, {"median_ms", ms},
                         {"gflops", gflops}, {"peak_fraction", gflops / peak.gflops}, {"max_rss_mb", s.rss_mb}});
    }
  }
  if (!a.json.empty()) {
    const nlohmann::json doc = {{"peak_gflops", peak.gflops}, {"threads", threads}, {"results", results}};
    al::io::write_file_atomically(a.json, doc.dump(2) + "\n");
    fmt::print("wrote {}\n", a.json);
  }
}

const attnlab::cli::Registrar reg(
    "bench", "Time the engine against naive OpenBLAS and LibTorch attention (forward and backward)", [](CLI::App& sub) {
      static BenchArgs a;
      sub.add_option("--batch", a.batch, "batch size B");
      sub.add_option("--heads", a.heads, "heads H");
      sub.add_option("--seq", a.seq, "sequence length N (queries = keys)");
      sub.add_option("--dim", a.dim, "head dim d (= dv)");
      sub.add_flag("--causal", a.causal, "top-left causal mask (FLOPs halved)");
      sub.add_option("--threads", a.threads, "threads for every implementation (0: all cores)");
      sub.add_option("--repeats", a.repeats, "timed repeats; the median is reported");
      sub.add_option("--settle-ms", a.settle_ms,
                     "idle pause before each timed call, so that the previous implementation's spinning worker "
                     "threads have gone to sleep")
          ->check(CLI::Range(0, 10000));
      sub.add_option("--json", a.json, "also write the results as JSON to this file");
      sub.add_option("--impls", a.impls, "implementations to run: attnlab, openblas, libtorch")->delimiter(',');
      sub.callback([] { run_bench(a); });
    });

}  // namespace
