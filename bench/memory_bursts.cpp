// What the decoding step, and loops doing its arithmetic per byte, read while the
// memory's speed moves. On the shared machines we measure, two cores read about 30 GB/s
// most minutes and 44-56 GB/s in bursts of seconds; a decode figure taken in one minute
// and a read bound taken in the next compare minutes, not code. Here every timed pass
// is bracketed by two read bounds on the same K and V, a few milliseconds before and
// after it, so that each pass has the memory's speed of its own moment, and the passes
// are sorted by that speed.
//
//   attnlab_memory_bursts [options]
//     --seconds S     how long to run (default 120)
//     --kv-heads H    K/V heads of the cache (default 8); --seq-k Nk (32768); --dim d (128)
//     --threads T     (default 2)
//     --samples FILE  every timed pass as CSV (round, pass, ms, GB/s, read bound before/after)
//     --only LIST     only the passes whose names contain one of LIST's comma-separated parts
//                     (e.g. --only "loop 4,pair 4,step 4")
//
// The passes of a round, each over the same K and V ([1, H, Nk, d] float32, standard
// normal), each between two read bounds:
//   - loop F (hw) / loop F (sw): bench/stream_arithmetic.hpp's loop over K and V,
//     each thread its slice of both as the read bound reads them, with F multiply-adds
//     per loaded vector (F = 1: one query row per K/V head does one multiply-add per
//     float of K and V it reads; F = 4: four rows; F = 8: eight), the hardware
//     prefetchers alone (hw) or every line also software-prefetched 4 KiB ahead (sw);
//   - pair F (hw) / pair F (sw): the same loop reading K and V as the step does, a row of
//     K and then the row of V, key after key, each thread its slice of rows;
//   - order F (KV) / (K) / (V): the pair read in the fused step's order over each block of
//     8 keys (two rows of K at a time; V by blocks of 3 vectors of columns, each down the 8
//     rows), or in that order for K alone or V alone; order F (gap): K and V row by row with
//     a pause without loads between a block's K and its V, where the step's softmax is;
//   - step R rows: attnlab::attention_forward with R·H query heads, one query row each,
//     against the cache (the decode step: R rows per K/V head).
// A pass counts when its two read bounds agree within 10 % (the memory did not change
// speed during it); its fraction is its K and V bytes per second over their mean. The
// table gives, per band of that read bound, the number of passes and the median
// fraction of each kind. The loops are what the simplest code doing the step's
// multiply-adds per byte reads: where they fall short of a fraction, no step can be
// expected to reach it on these cores.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnlab/attention.hpp"
#include "attnlab/statistics.hpp"
#include "attnlab/tensor.hpp"
#include "page_kind.hpp"
#include "peak_memory.hpp"
#include "stream_arithmetic.hpp"

namespace {

namespace al = attnlab;
namespace ab = attnlab::bench;

struct Args {
  double seconds = 120;
  int64_t Hkv = 8, Nk = 32768, d = 128;
  int threads = 2;
  std::string samples;
  std::vector<std::string> only;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "attnlab_memory_bursts: %s\n(see the comment at the top of bench/memory_bursts.cpp)\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto text = [&]() -> std::string {
      if (i + 1 >= argc) usage(f + " needs a value");
      return argv[++i];
    };
    auto value = [&]() -> double {
      const std::string t = text();
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      if (t.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) usage(f + " needs a positive number, got '" + t + "'");
      return v;
    };
    auto count = [&]() -> int64_t {
      const double v = value();
      if (v != std::floor(v) || v > 1e9) usage(f + " needs a positive integer");
      return static_cast<int64_t>(v);
    };
    if (f == "--seconds") a.seconds = value();
    else if (f == "--kv-heads") a.Hkv = count();
    else if (f == "--seq-k") a.Nk = count();
    else if (f == "--dim") a.d = count();
    else if (f == "--threads") a.threads = static_cast<int>(count());
    else if (f == "--samples") a.samples = text();
    else if (f == "--only") {
      const std::string list = text();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) a.only.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
      if (a.only.empty()) usage("--only needs at least one name");
    }
    else usage("unknown option " + f);
  }
  if (a.d % 128 != 0) usage("--dim must be a multiple of 128 (the loops read rows of whole blocks of 8 vectors)");
  return a;
}

// One kind of timed pass: its name and the work (returns a value to keep).
struct Pass {
  std::string name;
  std::function<float()> run;
};

// The loop of stream_arithmetic.hpp over K and V, each thread its slice of both: the
// read bound's order of reads, with `fmas` multiply-adds per vector and, with
// `prefetch`, every line asked for 4 KiB ahead (past a slice's end it asks for lines
// it will not read: prefetches never fault).
// With `paired`, a row of K and then the row of V, key after key (rows of `row` floats).
float loop_over(const float* k, const float* v, int64_t count, int64_t row, int threads, int fmas, bool prefetch,
                bool paired, int step_order = 0) {
  std::vector<float> sums(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t per_thread = count / team / (8 * row) * (8 * row);  // whole blocks of 8 rows (of whole blocks of 8 vectors)
    const int64_t begin = t * per_thread, n = t + 1 == team ? count - begin : per_thread;
    const size_t ahead = prefetch ? 4096 : 0, un = static_cast<size_t>(n);
    sums[static_cast<size_t>(t)] =
        step_order ? ab::stream_pair_in_step_order(k + begin, v + begin, un, static_cast<size_t>(row), fmas, step_order)
        : paired ? ab::stream_pair_with_arithmetic(k + begin, v + begin, un, static_cast<size_t>(row), fmas, ahead)
               : ab::stream_with_arithmetic(k + begin, un, fmas, ahead) + ab::stream_with_arithmetic(v + begin, un, fmas, ahead);
  }
  float total = 0;
  for (float s : sums) total += s;
  return total;
}

using attnlab::stats::median;

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const al::Shape kv_shape{1, a.Hkv, a.Nk, a.d};
  const int64_t count = a.Hkv * a.Nk * a.d;
  const double kv_bytes = 2.0 * static_cast<double>(count) * sizeof(float);
  al::Tensor<float> k(kv_shape), v(kv_shape);
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) k.data()[i] = nd(rng), v.data()[i] = nd(rng);

  std::vector<Pass> passes;
  for (const bool paired : {false, true})
    for (const int fmas : {0, 1, 4, 8})
      for (const bool prefetch : {false, true})
        passes.push_back({(paired ? "pair " : "loop ") + std::to_string(fmas) + (prefetch ? " (sw)" : " (hw)"),
                          [&, fmas, prefetch, paired] {
                            return loop_over(k.data(), v.data(), count, a.d, a.threads, fmas, prefetch, paired);
                          }});
  for (const int fmas : {1, 4, 8})
    for (const int which : {ab::kStepOrderK | ab::kStepOrderV, ab::kStepOrderK, ab::kStepOrderV, ab::kStepOrderGap})
      passes.push_back({"order " + std::to_string(fmas) +
                            (which == ab::kStepOrderK   ? " (K)"
                             : which == ab::kStepOrderV ? " (V)"
                             : which == ab::kStepOrderGap ? " (gap)"
                                                          : " (KV)"),
                        [&, fmas, which] { return loop_over(k.data(), v.data(), count, a.d, a.threads, fmas, false, true, which); }});
  // The decode step with R query heads per K/V head; q, out and lse per R.
  std::vector<al::Tensor<float>> queries, outs, lses;
  for (const int64_t rows : {1, 4, 8}) {
    const al::Shape q_shape{1, rows * a.Hkv, 1, a.d};
    queries.emplace_back(q_shape), outs.emplace_back(q_shape), lses.emplace_back(al::Shape{1, rows * a.Hkv, 1, 1});
    for (int64_t i = 0; i < rows * a.Hkv * a.d; ++i) queries.back().data()[i] = nd(rng);
  }
  al::ComputeConfig cfg;
  cfg.threads = a.threads;
  for (size_t r = 0; r < queries.size(); ++r)
    passes.push_back({"step " + std::to_string(queries[r].shape()[1] / a.Hkv) + " rows", [&, r] {
                        al::attention_forward(std::as_const(queries[r]).view(), std::as_const(k).view(),
                                              std::as_const(v).view(), al::AttentionOptions<float>{},
                                              {outs[r].view(), lses[r].view()}, cfg);
                        return outs[r].data()[0];
                      }});

  if (!a.only.empty()) {
    std::vector<Pass> chosen;
    for (auto& p : passes)
      if (std::any_of(a.only.begin(), a.only.end(), [&](const std::string& part) { return p.name.find(part) != std::string::npos; }))
        chosen.push_back(std::move(p));
    if (chosen.empty()) usage("--only chose no pass");
    passes = std::move(chosen);
  }
  auto timed = [](const std::function<float()>& f, float& keep) {
    const auto t0 = std::chrono::steady_clock::now();
    keep += f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const Pass read_bound{"read bound", [&] { return ab::read_once(k.data(), v.data(), count, a.threads); }};

  std::FILE* csv = nullptr;
  if (!a.samples.empty()) {
    csv = std::fopen(a.samples.c_str(), "w");
    if (csv == nullptr) usage("cannot write " + a.samples);
    std::fprintf(csv, "round,pass,ms,gbps,read_bound_before_gbps,read_bound_after_gbps\n");
  }
  // Samples per pass kind: (read bound GB/s, pass GB/s) of the passes that count.
  std::vector<std::vector<std::pair<double, double>>> kept(passes.size());
  size_t timed_passes = 0;
  float keep = 0;
  for (auto& p : passes) timed(p.run, keep);  // untimed: first touches, the threads' start
  const auto start = std::chrono::steady_clock::now();
  double before = kv_bytes / timed(read_bound.run, keep) / 1e9;
  int round = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < a.seconds) {
    for (size_t i = 0; i < passes.size(); ++i) {
      const double seconds = timed(passes[i].run, keep);
      const double after = kv_bytes / timed(read_bound.run, keep) / 1e9, gbps = kv_bytes / seconds / 1e9;
      ++timed_passes;
      if (csv != nullptr)
        std::fprintf(csv, "%d,%s,%.4f,%.3f,%.3f,%.3f\n", round, passes[i].name.c_str(), seconds * 1e3, gbps, before, after);
      if (std::abs(after - before) <= 0.1 * 0.5 * (after + before)) kept[i].emplace_back(0.5 * (after + before), gbps);
      before = after;
    }
    ++round;
  }
  if (csv != nullptr && std::fclose(csv) != 0) usage("cannot finish writing " + a.samples);

  std::printf("K and V: %lld heads x %lld keys x %lld float32 each, %.1f MB in %s; %d threads; %d rounds in %.0f s\n",
              static_cast<long long>(a.Hkv), static_cast<long long>(a.Nk), static_cast<long long>(a.d), kv_bytes / 1e6,
              ab::describe_kv_pages(k.data(), v.data(), static_cast<size_t>(count) * sizeof(float)).c_str(), a.threads,
              round, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  size_t counted = 0;
  for (const auto& s : kept) counted += s.size();
  std::printf("%zu of %zu passes counted (read bounds before and after within 10 %%); per band of the read bound,\n"
              "the passes counted and the median of each pass's K and V GB/s over its read bound:\n\n",
              counted, timed_passes);
  const double bands[] = {0, 36, 44, 50, 1e9};
  std::printf("%-14s", "read bound");
  for (int b = 0; b < 4; ++b) {
    char label[32];
    if (b == 3) std::snprintf(label, sizeof label, ">= %.0f GB/s", bands[b]);
    else if (b == 0) std::snprintf(label, sizeof label, "< %.0f GB/s", bands[1]);
    else std::snprintf(label, sizeof label, "%.0f-%.0f GB/s", bands[b], bands[b + 1]);
    std::printf("  %18s", label);
  }
  std::printf("\n");
  for (size_t i = 0; i < passes.size(); ++i) {
    std::printf("%-14s", passes[i].name.c_str());
    for (int b = 0; b < 4; ++b) {
      std::vector<double> fractions;
      for (const auto& [bound, gbps] : kept[i])
        if (bound >= bands[b] && bound < bands[b + 1]) fractions.push_back(gbps / bound);
      if (fractions.empty()) std::printf("  %18s", "-");
      else std::printf("  %11.0f %% (%3zu)", 100 * median(fractions), fractions.size());
    }
    std::printf("\n");
  }
  return keep == 12345.678f ? 1 : 0;  // keep the sums alive
}
