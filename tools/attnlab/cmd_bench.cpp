// `attnlab bench`: forward and backward time of the engine against a naive
// float32 implementation on OpenBLAS and against LibTorch (bench/peers/),
// interleaved repeat by repeat, the median of each reported with GFLOP/s, the
// fraction of the measured FMA peak, the bytes of K and V read per second and the
// fraction of the measured read bandwidth, and the peak resident memory of each pass.
//
// Shapes: q [B, Hq, Nq, d], k and v [B, Hkv, Nk, d] (--heads, --kv-heads,
// --seq-q, --seq-k; --seq sets both lengths). FLOPs: 4·d per visible (query, key)
// pair and query head forward (two products), 10·d backward (five); the pairs are
// Nq·Nk, or those the causal mask leaves (N(N+1)/2 for top-left with Nq = Nk).
// K/V bytes: the K and V rows some query row sees (all Nk without causal masking),
// d floats each, per key/value head: what any implementation must read at least
// once. Decoding (Nq = 1) does 2 FLOPs per byte of them: it is bound by the read
// bandwidth, so that is its yardstick (`attnlab peak --memory`).
// Every implementation runs on --threads threads (OpenMP for attnlab,
// openblas_set_num_threads, torch::set_num_threads).
// --dtype f32,bf16,f16 times the engine in each element type (inputs and outputs of
// the type, computed in float32: docs/engine.md), interleaved with the others repeat
// by repeat; the peers run in float32. K/V bytes count the type's size (a bfloat16
// KV cache is half the bytes), and each 16-bit result carries its speed relative to
// the float32 engine's in the same run.
// The engine behind the peers' interface: bench_engine_peer.hpp; the timed rounds:
// bench_timing.hpp; here, the options, the checks and the report.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "attnlab/statistics.hpp"
#include "bench_engine_peer.hpp"
#include "bench_warnings.hpp"
#include "bench_timing.hpp"
#include "cli_values.hpp"
#include "command.hpp"
#include "page_kind.hpp"
#include "peak_flops.hpp"
#include "peak_memory.hpp"
#include "peers/peers.hpp"

namespace {

namespace al = attnlab;
namespace ab = attnlab::bench;

struct BenchArgs {
  int64_t batch = 1, heads = 2, kv_heads = 0, seq = 4096, seq_q = 0, seq_k = 0, dim = 64;  // 0: as heads, seq
  bool causal = false;
  std::string causal_align;  // empty: top_left
  bool forward_only = false;
  int threads = 0;
  int repeats = 5;
  int settle_ms = 150;
  bool cold = false;       // time the first call after the pause (no untimed call of the same implementation first)
  bool evict_llc = false;  // read a buffer of 3× the last-level cache before each timed forward and read bound
  std::string json;
  std::string probes = "measure";  // "measure", "skip", or an earlier --json file whose figures are reused
  std::vector<std::string> impls{"attnlab", "openblas", "libtorch"};
  std::vector<std::string> dtypes{"f32"};
};

// The element types --dtype names, and their sizes.
int64_t dtype_bytes(const std::string& dtype) { return dtype == "f32" ? 4 : 2; }

using attnlab::stats::median;

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

const char* causal_name(ab::PeerCausal c) {
  return c == ab::PeerCausal::top_left ? "top_left" : c == ab::PeerCausal::bottom_right ? "bottom_right" : "none";
}

// The shape the flags describe, checked: sizes ≥ 1 (0 for --kv-heads, --seq-q and
// --seq-k means "as --heads / --seq"), Hkv divides Hq, alignment only with --causal.
ab::PeerShape bench_shape(const BenchArgs& a) {
  for (const auto& [name, value] :
       {std::pair{"--batch", a.batch}, {"--heads", a.heads}, {"--seq", a.seq}, {"--dim", a.dim}})
    if (value < 1) throw al::Error(fmt::format("bench: {} must be at least 1, got {}", name, value));
  for (const auto& [name, value] : {std::pair{"--kv-heads", a.kv_heads}, {"--seq-q", a.seq_q}, {"--seq-k", a.seq_k}})
    if (value < 0)
      throw al::Error(fmt::format("bench: {} must be at least 1 (or 0: as {}), got {}", name,
                                  name == std::string("--kv-heads") ? "--heads" : "--seq", value));
  ab::PeerShape s;
  s.B = a.batch;
  s.Hq = a.heads;
  s.Hkv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  s.Nq = a.seq_q > 0 ? a.seq_q : a.seq;
  s.Nk = a.seq_k > 0 ? a.seq_k : a.seq;
  s.D = a.dim;
  if (s.Hq % s.Hkv != 0)
    throw al::Error(
        fmt::format("bench: --kv-heads {} must divide --heads {} (each key/value head serves a group of "
                    "query heads)",
                    s.Hkv, s.Hq));
  if (!a.causal && !a.causal_align.empty())
    throw al::Error("bench: --causal-align given without --causal (it says how causal masking aligns; add --causal)");
  if (a.causal) {
    const std::string align = a.causal_align.empty() ? "top_left" : a.causal_align;
    if (align != "top_left" && align != "bottom_right")
      throw al::Error(fmt::format("bench: --causal-align must be top_left or bottom_right, got '{}'", align));
    s.causal = align == "top_left" ? ab::PeerCausal::top_left : ab::PeerCausal::bottom_right;
  }
  // In checked products: B·Hq·Nq·D of 65536 each wraps int64 to 0, which a plain check passes.
  const int64_t q_numel = attnlab::cli::checked_product({s.B, s.Hq, s.Nq, s.D}, "bench: B·Hq·Nq·D");
  const int64_t kv_numel = attnlab::cli::checked_product({s.B, s.Hkv, s.Nk, s.D}, "bench: B·Hkv·Nk·D");
  if (std::max(q_numel, kv_numel) > (int64_t{1} << 31))
    throw al::Error("bench: B·Hq·Nq·D and B·Hkv·Nk·D must stay below 2^31 elements");
  return s;
}

// What the bench is doing, on stderr while it does it (the table goes to stdout).
void say(const std::string& what) { fmt::print(stderr, "bench: {}...\n", what); }

// --probes FILE: the peak and bandwidth of an earlier run's --json, each checked.
void reuse_probes(const std::string& file, ab::Peak& peak, ab::Bandwidth& bandwidth) {
  std::ifstream in(file);
  if (!in) throw al::Error(fmt::format("bench: --probes {}: cannot read it (measure, skip, or an earlier --json file)", file));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  auto figure = [&](const char* key, bool required) {
    const auto it = j.is_object() ? j.find(key) : j.end();
    if (it == j.end() && !required) return 0.0;
    if (it == j.end() || !it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      throw al::Error(fmt::format("bench: --probes {}: no positive number \"{}\" in it (not the --json of an "
                                  "attnlab bench that measured its probes)",
                                  file, key));
    return it->get<double>();
  };
  peak.gflops = figure("peak_gflops", true), peak.gflops_cpu = figure("peak_gflops_cpu", false);
  bandwidth.gbps = figure("bandwidth_gbps", true), bandwidth.gbps_cpu = figure("bandwidth_gbps_cpu", false);
  bandwidth.plain_gbps = figure("bandwidth_plain_gbps", false);
  peak.target = j.value("peak_target", std::string("from ") + file);
  int count = 0;
  const ab::Reader* readers = ab::probe_readers(&count);
  for (int r = 0; r < count; ++r)
    if (readers[r].name() == j.value("read_reader", std::string())) bandwidth.reader = readers[r];
}

void run_bench(const BenchArgs& a) {
  const ab::PeerShape shape = bench_shape(a);
  if (a.repeats < 1) throw al::Error(fmt::format("bench: --repeats must be at least 1, got {}", a.repeats));
  al::check_threads(a.threads, "bench: --threads");  // the library's rule, for every implementation
  // A --json target that cannot be written is an error now, not after the benchmark.
  if (!a.json.empty()) al::io::check_output_path(a.json);
  ab::Peak reused_peak;
  ab::Bandwidth reused_bandwidth;
  if (a.probes != "measure" && a.probes != "skip") reuse_probes(a.probes, reused_peak, reused_bandwidth);
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  const double score_floats = static_cast<double>(shape.B * shape.Hq) * static_cast<double>(shape.Nq) *
                              static_cast<double>(shape.Nk);  // one Nq×Nk matrix per query head

  for (const auto& dt : a.dtypes)
    if (dt != "f32" && dt != "bf16" && dt != "f16")
      throw al::Error(fmt::format("bench: unknown --dtype '{}' (f32, bf16, f16)", dt));
  if (a.dtypes.empty()) throw al::Error("bench: --dtype needs at least one of f32, bf16, f16");
  // Each implementation with the element type it runs in: the engine once per --dtype,
  // the peers in float32, and LibTorch in bfloat16 too when bf16 is asked.
  std::vector<attnlab::cli::BenchImpl> impls;
  for (const auto& name : a.impls) {
    if (name == "attnlab") {
      for (const auto& dt : a.dtypes) impls.push_back({attnlab::cli::make_engine_peer(shape, threads, dt), dt});
    } else if (name == "openblas") {
      const double gb = 4.0 * (score_floats + static_cast<double>(shape.Nq) * static_cast<double>(shape.Nk)) / 1e9;
      if (gb > 8.0)
        throw al::Error(
            fmt::format("bench: the openblas peer would materialise {:.1f} GB of N×N matrices; "
                        "use --impls attnlab for this size",
                        gb));
      impls.push_back({ab::make_openblas_peer(shape, threads)});
    } else if (name == "libtorch") {
      const double gb = 12.0 * score_floats / 1e9;
      if (gb > 8.0)
        throw al::Error(
            fmt::format("bench: the libtorch peer would materialise about {:.1f} GB of N×N matrices; "
                        "use --impls attnlab for this size",
                        gb));
      // float32, and bfloat16 too when --dtype asks for it: the peer in the engine's precision
      for (const bool bf16 : {false, true}) {
        if (bf16 && std::find(a.dtypes.begin(), a.dtypes.end(), "bf16") == a.dtypes.end()) continue;
        std::string why;
        auto peer = ab::make_libtorch_peer(shape, threads, &why, bf16);
        if (!peer) throw al::Error("bench: " + why);
        impls.push_back({std::move(peer), bf16 ? "bf16" : "f32"});
      }
    } else {
      throw al::Error(fmt::format("bench: unknown implementation '{}' (attnlab, openblas, libtorch)", name));
    }
  }

  // Inputs: standard normal, fixed seed.
  const auto nq = static_cast<size_t>(shape.q_numel()), nkv = static_cast<size_t>(shape.kv_numel());
  using Buffer = attnlab::cli::BenchBuffer;
  attnlab::cli::BenchBuffers buf{Buffer(nq), Buffer(nkv), Buffer(nkv), Buffer(nq),
                                 Buffer(nq), Buffer(nq),  Buffer(nkv), Buffer(nkv)};
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto* t : {&buf.q, &buf.k, &buf.v, &buf.go})
    for (float& x : *t) x = nd(rng);
  // Where the kernel put K and V: a cache in 2 MiB pages decodes faster than one in 4 KiB
  // pages (docs/engine.md, "What a step reaches"). The 16-bit engines' copies are allocated alike.
  const std::string kv_pages = ab::describe_kv_pages(buf.k.data(), buf.v.data(), nkv * sizeof(float)),
                    thp_mode = ab::transparent_huge_pages_mode();

  // The FMA peak is measured before the timings and again after them, and the
  // better of the two kept: this shared machine sometimes loses half its
  // capacity for a second or so, and a peak probe caught in such a dip once
  // reported half the real peak (the engine then ran at "154 %" of it).
  // --probes skip leaves them unmeasured (the fractions are then "-"), --probes FILE
  // takes them from an earlier run's JSON.
  const bool measure_probes = a.probes == "measure";
  ab::Peak peak;
  std::optional<ab::Peak> peak16;  // the bfloat16 dot products' (AVX512_BF16 only), timed beside the FMAs
  ab::Bandwidth bandwidth;
  if (measure_probes) {
    say(fmt::format("measuring the FMA peak on {} threads (and the bfloat16 dot products' where the CPU has them; "
                    "about 1 s)",
                    threads));
    peak = ab::measure_peak(threads);
    peak16 = ab::measure_bf16_dot_peak(threads);
    say("measuring the read bandwidth over a buffer of 16x the last-level cache (a few seconds)");
    bandwidth = ab::measure_read_bandwidth(threads);
  } else if (a.probes != "skip") {
    peak = reused_peak, bandwidth = reused_bandwidth;
  }
  const bool rss_ok = attnlab::cli::reset_peak_rss();
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);

  say(fmt::format("timing {} implementation runs, {} rounds (and one untimed) of forward{}", impls.size(), a.repeats,
                  a.forward_only ? "" : " and backward"));
  auto timings = attnlab::cli::time_rounds(
      impls, buf, {a.repeats, a.settle_ms, a.cold, a.evict_llc, a.forward_only, threads, bandwidth.reader});
  auto& samples = timings.samples;
  auto& diff = timings.diff;
  const int64_t llc_bytes = timings.llc_bytes;
  const size_t evict_floats = timings.evict_floats;

  if (measure_probes) {
    say("measuring the FMA peak and the read bandwidth again, after the timings");
    const ab::Peak after = ab::measure_peak(threads);
    peak.gflops = std::max(peak.gflops, after.gflops);
    peak.gflops_cpu = std::max(peak.gflops_cpu, after.gflops_cpu);
    if (const auto after16 = ab::measure_bf16_dot_peak(threads); peak16 && after16) {
      peak16->gflops = std::max(peak16->gflops, after16->gflops);
      peak16->gflops_cpu = std::max(peak16->gflops_cpu, after16->gflops_cpu);
    }
    const ab::Bandwidth bw_after = ab::measure_read_bandwidth(threads);
    if (bw_after.gbps > bandwidth.gbps) bandwidth.gbps = bw_after.gbps, bandwidth.reader = bw_after.reader;
    bandwidth.gbps_cpu = std::max(bandwidth.gbps_cpu, bw_after.gbps_cpu);
    bandwidth.plain_gbps = std::max(bandwidth.plain_gbps, bw_after.plain_gbps);
  }

  const double pairs = shape.visible_pairs() * static_cast<double>(shape.B * shape.Hq) * static_cast<double>(shape.D);
  // K and V bytes in float32; a 16-bit type's are half.
  const double kv_bytes = 2.0 * static_cast<double>(shape.B * shape.Hkv) * static_cast<double>(shape.keys_read()) *
                          static_cast<double>(shape.D) * sizeof(float);
  const double read_gbps =
      2.0 * static_cast<double>(nkv) * sizeof(float) / (median(samples[{"read", "bound"}].ms) * 1e-3) / 1e9;
  fmt::print(
      "attnlab bench: batch {} heads {}/{} (query/key-value) seq {}/{} (query/key) dim {}{} | {} threads | {} | "
      "engine target {}\n",
      shape.B, shape.Hq, shape.Hkv, shape.Nq, shape.Nk, shape.D,
      shape.causal == ab::PeerCausal::none ? "" : fmt::format(" causal {}", causal_name(shape.causal)), threads,
      cpu_name(), al::engine::target_name());
  if (a.probes == "skip")
    fmt::print("probes skipped (--probes skip): no fraction of the peak or of the bandwidth | load average {:.2f} "
               "{:.2f} {:.2f} | median of {}\n",
               load[0], load[1], load[2], a.repeats);
  else
    fmt::print(
        "{} {} threads{}: FMA peak {:.1f} GFLOP/s wall-clock, "
        "{:.1f} over CPU time ({}); read bandwidth {:.1f} GB/s wall-clock, {:.1f} over CPU time ({} MiB "
        "buffer; best reader: {}; loads alone on one stream {:.1f}) | load average {:.2f} {:.2f} {:.2f} | median of "
        "{}\n",
        measure_probes ? "measured on" : "taken from " + a.probes + " (--probes), measured on", threads,
        measure_probes ? " (best of before and after the timings)" : "", peak.gflops, peak.gflops_cpu, peak.target,
        bandwidth.gbps, bandwidth.gbps_cpu, bandwidth.bytes >> 20, bandwidth.reader.name(), bandwidth.plain_gbps,
        load[0], load[1], load[2], a.repeats);
  if (peak16)
    fmt::print("bfloat16 dot-product peak (VDPBF16PS) on {} threads: {:.1f} GFLOP/s wall-clock, {:.1f} over CPU time "
               "(bf16_dot_peak_fraction in the JSON: the engine's bfloat16 rows against it)\n",
               threads, peak16->gflops, peak16->gflops_cpu);
  fmt::print("K and V in {} (transparent huge pages: {}{})\n", kv_pages, thp_mode.empty() ? "unknown" : thp_mode,
             bandwidth.pages.empty() ? "" : "; the probe's buffer in " + bandwidth.pages);
  if (a.evict_llc)
    fmt::print(
        "last-level cache evicted before each timed forward and read bound: {} MiB of other data read by the same "
        "threads ({} MiB cache{})\n",
        evict_floats * sizeof(float) >> 20, llc_bytes >> 20, timings.llc_found ? "" : ", assumed");
  fmt::print(
      "read bound: the {:.1f} MB of K and V read once by the probe's best reader, timed before each round's "
      "implementations after the same {} ms pause{}: {:.1f} GB/s (median)\n",
      2.0 * static_cast<double>(nkv) * sizeof(float) / 1e6, a.settle_ms,
      a.cold ? " (cold: the first call after it)" : " and 20 ms of untimed reads", read_gbps);
  fmt::print(
      "(% peak and peak_gflops: the wall-clock peak, measured under the same load as the timings; the CPU\n"
      " columns divide by CPU time per thread instead, against the CPU-time peak and bandwidth: the rate while\n"
      " running; KV GB/s: the {:.1f} MB of K and V that some query row sees, over the pass's time; % bw: of the\n"
      " read bandwidth (a 16-bit dtype's K and V are half the bytes); % rd: of the read bound; vs f32: the float32\n"
      " engine's time over this one's, same run;\n"
      " max diff: the largest |difference| from {} {}'s result, out (forward) or dq, dk, dv (backward))\n",
      kv_bytes / 1e6, impls.front().peer->name(), impls.front().dtype);
  if (!rss_ok) fmt::print("(peak RSS is the process-wide high-water mark: /proc/self/clear_refs not writable)\n");
  fmt::print("{:<9} {:<5} {:<9} {:>11} {:>9} {:>7} {:>9} {:>7} {:>7} {:>7} {:>13} {:>9} {:>10} {:>9} {:>9} {:>9}\n",
             "impl", "dtype", "pass", "median ms", "GFLOP/s", "% peak", "KV GB/s", "% bw", "% rd", "vs f32",
             "max RSS MB", "CPU GF/s", "% CPU pk", "CPU GB/s", "% CPU bw", "max diff");
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::string> warnings;
  // A fraction over a probe that was not measured is "-" in the table and null in the JSON.
  auto percent = [](double x, double of) { return of > 0 ? fmt::format("{:.1f}%", 100.0 * x / of) : std::string("-"); };
  auto fraction = [](double x, double of) { return of > 0 ? nlohmann::json(x / of) : nlohmann::json(nullptr); };
  auto warn = [&](const std::optional<std::string>& w) {
    if (w) warnings.push_back(*w);
  };
  for (const std::string pass : {"forward", "backward"}) {
    if (pass == "backward" && a.forward_only) continue;
    for (auto& impl : impls) {
      const attnlab::cli::BenchSample& s = samples[{impl.key(), pass}];
      const double ms = median(s.ms);
      const double flops = (pass == "forward" ? 4.0 : 10.0) * pairs;
      const double gflops = flops / (ms * 1e-3) / 1e9;
      const double bytes = kv_bytes * static_cast<double>(dtype_bytes(impl.dtype)) / 4.0;
      const double kv_gbps = bytes / (ms * 1e-3) / 1e9;
      // Rate while running: FLOPs over the CPU time per thread (spinning threads count as busy).
      const double cpu_gflops = flops / (median(s.cpu_ms) * 1e-3 / threads) / 1e9;
      const double cpu_kv_gbps = bytes / (median(s.cpu_ms) * 1e-3 / threads) / 1e9;
      const double max_diff = diff[{impl.key(), pass}];
      // The float32 engine's time over this one's (when both ran).
      const auto f32 = samples.find({"attnlab/f32", pass});
      const bool engine16 = impl.peer->name() == "attnlab" && impl.dtype != "f32" && f32 != samples.end();
      const double vs_f32 = engine16 ? median(f32->second.ms) / ms : 0.0;
      // bfloat16 inputs' products run on VDPBF16PS where the CPU has it: their yardstick.
      const bool on_bf16_peak = peak16 && impl.peer->name() == "attnlab" && impl.dtype == "bf16";
      fmt::print(
          "{:<9} {:<5} {:<9} {:>11.2f} {:>9.1f} {:>7} {:>9.1f} {:>7} {:>7} {:>7} {:>13.1f} {:>9.1f} "
          "{:>10} {:>9.1f} {:>9} {:>9.1e}\n",
          impl.peer->name(), impl.dtype, pass, ms, gflops, percent(gflops, peak.gflops), kv_gbps,
          percent(kv_gbps, bandwidth.gbps), percent(kv_gbps, read_gbps), engine16 ? fmt::format("{:.2f}x", vs_f32) : "",
          s.rss_mb, cpu_gflops, percent(cpu_gflops, peak.gflops_cpu), cpu_kv_gbps,
          percent(cpu_kv_gbps, bandwidth.gbps_cpu), max_diff);
      const std::string what = fmt::format("{} {} {}", impl.peer->name(), impl.dtype, pass);
      if (on_bf16_peak) {
        warn(ab::above_yardstick(what, gflops, peak16->gflops, "measured bfloat16 dot-product peak", load[0]));
        warn(ab::above_yardstick(what, cpu_gflops, peak16->gflops_cpu, "CPU-time bfloat16 dot-product peak", load[0]));
      } else {
        warn(ab::above_yardstick(what, gflops, peak.gflops, "measured FMA peak", load[0]));
        warn(ab::above_yardstick(what, cpu_gflops, peak.gflops_cpu, "CPU-time FMA peak", load[0]));
      }
      warn(ab::above_yardstick(what + " (K and V)", kv_gbps, bandwidth.gbps, "measured read bandwidth", load[0]));
      warn(ab::rounds_disagree(what, s.ms));
      results.push_back({{"impl", impl.peer->name()},
                         {"dtype", impl.dtype},
                         {"speedup_vs_f32", engine16 ? nlohmann::json(vs_f32) : nlohmann::json(nullptr)},
                         {"pass", pass},
                         {"batch", shape.B},
                         {"heads", shape.Hq},
                         {"kv_heads", shape.Hkv},
                         {"seq", shape.Nq == shape.Nk ? nlohmann::json(shape.Nq) : nlohmann::json(nullptr)},
                         {"seq_q", shape.Nq},
                         {"seq_k", shape.Nk},
                         {"dim", shape.D},
                         {"causal", shape.causal != ab::PeerCausal::none},
                         {"causal_align", causal_name(shape.causal)},
                         {"median_ms", ms},
                         {"gflops", gflops},
                         {"peak_fraction", fraction(gflops, peak.gflops)},
                         {"bf16_dot_peak_fraction",
                          on_bf16_peak ? fraction(gflops, peak16->gflops) : nlohmann::json(nullptr)},
                         {"kv_gbps", kv_gbps},
                         {"bandwidth_fraction", fraction(kv_gbps, bandwidth.gbps)},
                         {"read_bound_fraction", kv_gbps / read_gbps},
                         {"kv_gbps_cpu", cpu_kv_gbps},
                         {"bandwidth_fraction_cpu", fraction(cpu_kv_gbps, bandwidth.gbps_cpu)},
                         {"max_rss_mb", s.rss_mb},
                         {"max_abs_diff", max_diff}});
    }
  }
  for (const std::string& w : warnings) fmt::print("warning: {}\n", w);
  if (!a.json.empty()) {
    const nlohmann::json doc = {{"peak_gflops", peak.gflops},
                                {"peak_gflops_cpu", peak.gflops_cpu},
                                {"peak_target", peak.target},
                                {"bf16_dot_peak_gflops", peak16 ? nlohmann::json(peak16->gflops) : nlohmann::json(nullptr)},
                                {"bf16_dot_peak_gflops_cpu",
                                 peak16 ? nlohmann::json(peak16->gflops_cpu) : nlohmann::json(nullptr)},
                                {"probes", a.probes == "measure" || a.probes == "skip" ? a.probes : "reused"},
                                {"warnings", warnings},
                                {"bandwidth_gbps", bandwidth.gbps},
                                {"bandwidth_gbps_cpu", bandwidth.gbps_cpu},
                                {"read_bound_gbps", read_gbps},
                                {"read_reader", bandwidth.reader.name()},
                                {"bandwidth_plain_gbps", bandwidth.plain_gbps},
                                {"llc_evicted", a.evict_llc},
                                {"kv_pages", kv_pages},
                                {"transparent_huge_pages", thp_mode},
                                {"threads", threads},
                                {"diff_reference", impls.front().peer->name() +
                                                       (impls.front().dtype == "f32" ? "" : " " + impls.front().dtype)},
                                {"load_average", {load[0], load[1], load[2]}},
                                {"results", results}};
    al::io::write_file_atomically(a.json, doc.dump(2) + "\n");
    fmt::print("wrote {}\n", a.json);
  }
}

}  // namespace

attnlab::cli::Command attnlab::cli::bench_command() {
  return {
      "bench", "Time the engine against naive OpenBLAS and LibTorch attention (forward and backward)",
      [](CLI::App& sub) {
        static BenchArgs a;
        sub.option_defaults()->always_capture_default();  // --help shows each option's default
        sub.add_option("--batch", a.batch, "batch size B");
        sub.add_option("--heads", a.heads, "query heads Hq");
        sub.add_option("--kv-heads", a.kv_heads, "key/value heads Hkv, dividing Hq (grouped-query attention; 0: Hq)");
        sub.add_option("--seq", a.seq, "sequence length N of the queries and the keys");
        sub.add_option("--seq-q", a.seq_q, "query rows Nq (0: --seq); 1 is one decoding step");
        sub.add_option("--seq-k", a.seq_k, "keys Nk, the KV cache's length (0: --seq)");
        sub.add_option("--dim", a.dim, "head dim d (= dv)");
        sub.add_flag("--causal", a.causal, "causal mask (FLOPs count the visible pairs only)");
        sub.add_option("--causal-align", a.causal_align,
                       "with --causal: top_left (the default) or bottom_right (the last query sees every key: a chunk "
                       "of new queries at the end of a KV cache)");
        sub.add_flag("--forward-only", a.forward_only, "time the forward pass only (inference)");
        sub.add_option("--threads", a.threads, "threads for every implementation (0: all cores)");
        sub.add_option("--repeats", a.repeats, "timed repeats; the median is reported");
        sub.add_option("--settle-ms", a.settle_ms,
                       "idle pause at the start of each implementation's turn (before its untimed and timed calls), "
                       "so that the previous implementation's spinning worker threads have gone to sleep")
            ->check(attnlab::cli::in_range(0, 10000));
        sub.add_flag(
            "--cold", a.cold,
            "time the first call after the pause (by default each timed call follows 20 ms, and at least one call, "
            "of untimed calls of the same implementation, as in a loop, so that its threads are awake)");
        sub.add_flag(
            "--evict-llc", a.evict_llc,
            "before each timed forward and read bound, read 3x the last-level cache's size of other data on the same "
            "threads, so that K and V come from memory, as when a model decodes layer after layer");
        sub.add_option("--json", a.json, "also write the results as JSON to this file");
        sub.add_option("--probes", a.probes,
                       "the FMA peak and read bandwidth the fractions divide by: measure (before and after the "
                       "timings, several seconds), skip (no fractions), or the --json file of an earlier run "
                       "whose figures are reused");
        attnlab::cli::add_list_option(sub, "--impls", a.impls, "implementations to run: attnlab, openblas, libtorch")
            ->default_str("attnlab,openblas,libtorch");
        attnlab::cli::add_list_option(
            sub, "--dtype", a.dtypes,
            "element types of the engine's runs, interleaved: f32, bf16, f16 (the peers run in f32; libtorch in bf16 "
            "too when bf16 is asked)")
            ->default_str("f32");
        sub.callback([] { run_bench(a); });
      }};
}
