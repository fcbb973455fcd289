// `attnlab bench-variants`: the variants' speed (issue 17's targets) against the plain
// kernel measured in the same run, interleaved repeat by repeat, medians reported.
// GFLOP/s count only the visible (row, key) pairs: 4·pairs·d per head forward (two
// products), 10·pairs·d backward (five), with d = dv.
//
//   window    sliding window (left 1024, right 0) and 16 packed documents of random
//             lengths, both at N = 16384, d = 64, against dense attention at that N
//             (targets: window ≥ 70 %, packed ≥ 80 % of dense GFLOP/s)
//   features  softcap, ALiBi, sinks and dropout at N = 4096, d = 128, against the plain
//             kernel (target: forward ≥ 80 %)
//   mods      causal and window written as mask_mod (BlockMask built once) against the
//             built-in causal and window at N = 4096, d = 64
#include <omp.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "attnlab/statistics.hpp"
#include "cli_values.hpp"
#include "command.hpp"
#include "peak_flops.hpp"

namespace {

namespace al = attnlab;

struct Args {
  std::vector<std::string> groups{"window", "features", "mods"};
  int threads = 0;
  int repeats = 3;
  bool quick = false;  // small sizes: checks the program, not the speed
  std::string json;
};

// One problem's inputs: q, k, v, dO [1, H, N, d], outputs, and the forward's lse.
struct Inputs {
  al::Tensor<float> q, k, v, grad_out, out, lse, dq, dk, dv;
  Inputs(int64_t H, int64_t N, int64_t d)
      : q({1, H, N, d}), k({1, H, N, d}), v({1, H, N, d}), grad_out({1, H, N, d}), out({1, H, N, d}),
        lse({1, H, N, 1}), dq({1, H, N, d}), dk({1, H, N, d}), dv({1, H, N, d}) {
    std::mt19937_64 rng(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto* t : {&q, &k, &v, &grad_out})
      for (float& x : t->storage()) x = nd(rng);
  }
};

// One timed configuration; `peer` names the case its ratio is taken against.
struct Case {
  std::string group, name, peer;
  std::shared_ptr<Inputs> in;
  al::AttentionOptions<float> options;
  double pairs = 0;   // visible (row, key) pairs per head
  std::vector<double> forward_ms, backward_ms;
};

// Visible pairs of one head from each row's key range [begin(i), end(i)).
template <class Range>
double count_pairs(int64_t N, Range&& range) {
  double n = 0;
  for (int64_t i = 0; i < N; ++i) {
    const auto [b, e] = range(i);
    n += static_cast<double>(std::max<int64_t>(0, e - b));
  }
  return n;
}

using attnlab::stats::median;

// The mask_mods of the `mods` group (the built-ins written as a user would), and their
// BlockMasks (built once, reused by every call).
struct CausalMask {
  bool operator()(int64_t, int64_t, int64_t q, int64_t k) const { return k <= q; }
};
struct WindowMask {
  int64_t left;
  bool operator()(int64_t, int64_t, int64_t q, int64_t k) const { return k <= q && k >= q - left; }
};
struct Mods {
  int64_t left = 256;
  al::MaskModFn<CausalMask> causal{CausalMask{}};
  al::MaskModFn<WindowMask> window{WindowMask{256}};
  al::BlockMask causal_blocks, window_blocks;
};

std::vector<Case> make_cases(const Args& a, Mods& mods, std::vector<int64_t>& doc_offsets,
                             std::vector<float>& slopes, std::vector<float>& sinks) {
  std::vector<Case> cases;
  auto has = [&](const char* g) { return std::find(a.groups.begin(), a.groups.end(), g) != a.groups.end(); };
  if (has("window")) {
    const int64_t N = a.quick ? 2048 : 16384, d = 64, left = a.quick ? 256 : 1024;
    auto in = std::make_shared<Inputs>(1, N, d);
    cases.push_back({"window", "dense", "", in, {}, double(N) * double(N), {}, {}});
    al::AttentionOptions<float> w;
    w.window = {left, 0};
    cases.push_back({"window", fmt::format("window ({}, 0)", left), "dense", in, w,
                     count_pairs(N, [&](int64_t i) { return std::pair{std::max<int64_t>(0, i - left), i + 1}; }), {}, {}});
    // 16 documents of random lengths (at least 64 tokens each) that total N.
    std::mt19937_64 rng(16);
    std::vector<int64_t> cuts;
    while (cuts.size() < 15) {
      const int64_t cut = std::uniform_int_distribution<int64_t>(1, N / 64 - 1)(rng) * 64;
      if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
    }
    std::sort(cuts.begin(), cuts.end());
    doc_offsets = {0};
    doc_offsets.insert(doc_offsets.end(), cuts.begin(), cuts.end());
    doc_offsets.push_back(N);
    al::AttentionOptions<float> packed;
    packed.cu_seqlens_q = doc_offsets;
    packed.cu_seqlens_k = doc_offsets;
    double pairs = 0;
    for (size_t s = 0; s + 1 < doc_offsets.size(); ++s) pairs += std::pow(double(doc_offsets[s + 1] - doc_offsets[s]), 2);
    cases.push_back({"window", fmt::format("{} packed documents", doc_offsets.size() - 1), "dense", in, packed, pairs,
                     {}, {}});
  }
  if (has("features")) {
    const int64_t N = a.quick ? 1024 : 4096, d = 128, H = 2;
    auto in = std::make_shared<Inputs>(H, N, d);
    const double pairs = double(N) * double(N);
    cases.push_back({"features", "plain", "", in, {}, pairs, {}, {}});
    al::AttentionOptions<float> o;
    o.softcap = 30.0;
    cases.push_back({"features", "softcap 30", "plain", in, o, pairs, {}, {}});
    slopes = {0.25f, 0.0625f};  // ALiBi's geometric slopes for 2 heads
    al::AttentionOptions<float> alibi;
    alibi.alibi_slopes = slopes;
    cases.push_back({"features", "ALiBi", "plain", in, alibi, pairs, {}, {}});
    sinks = {0.5f, -0.5f};
    al::AttentionOptions<float> s;
    s.sinks = sinks;
    cases.push_back({"features", "sinks", "plain", in, s, pairs, {}, {}});
    al::AttentionOptions<float> drop;
    drop.dropout.p = 0.1;
    drop.dropout.seed = 7;
    cases.push_back({"features", "dropout 0.1", "plain", in, drop, pairs, {}, {}});
  }
  if (has("mods")) {
    const int64_t N = a.quick ? 1024 : 4096, d = 64, H = 2, left = mods.left;
    auto in = std::make_shared<Inputs>(H, N, d);
    const double causal_pairs = double(N) * double(N + 1) / 2;
    const double window_pairs = count_pairs(N, [&](int64_t i) { return std::pair{std::max<int64_t>(0, i - left), i + 1}; });
    mods.causal_blocks = al::BlockMask::build(mods.causal, 1, 1, N, N);
    mods.window_blocks = al::BlockMask::build(mods.window, 1, 1, N, N);
    al::AttentionOptions<float> causal;
    causal.causal = al::Causal::top_left;
    cases.push_back({"mods", "causal (built-in)", "", in, causal, causal_pairs, {}, {}});
    al::AttentionOptions<float> causal_mod;
    causal_mod.mask_mod = &mods.causal;
    causal_mod.block_mask = &mods.causal_blocks;
    cases.push_back({"mods", "causal (mask_mod)", "causal (built-in)", in, causal_mod, causal_pairs, {}, {}});
    al::AttentionOptions<float> window;
    window.causal = al::Causal::top_left;
    window.window = {left, 0};
    cases.push_back({"mods", fmt::format("window ({}, 0) (built-in)", left), "", in, window, window_pairs, {}, {}});
    al::AttentionOptions<float> window_mod;
    window_mod.mask_mod = &mods.window;
    window_mod.block_mask = &mods.window_blocks;
    cases.push_back({"mods", fmt::format("window ({}, 0) (mask_mod)", left), fmt::format("window ({}, 0) (built-in)", left),
                     in, window_mod, window_pairs, {}, {}});
  }
  return cases;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void run(const Args& a) {
  if (a.repeats < 1) throw al::Error(fmt::format("bench-variants: --repeats must be at least 1, got {}", a.repeats));
  al::check_threads(a.threads, "bench-variants: --threads");
  for (const auto& g : a.groups)
    if (g != "window" && g != "features" && g != "mods")
      throw al::Error(fmt::format("bench-variants: unknown group '{}' (window, features, mods)", g));
  if (!a.json.empty()) al::io::check_output_path(a.json);
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  Mods mods;
  std::vector<int64_t> doc_offsets;
  std::vector<float> slopes, sinks;
  std::vector<Case> cases = make_cases(a, mods, doc_offsets, slopes, sinks);
  attnlab::bench::Peak peak = attnlab::bench::measure_peak(threads);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const al::ComputeConfig config{threads, {}};
  for (int r = -1; r < a.repeats; ++r)  // r = −1: warm-up, not recorded
    for (Case& c : cases) {
      Inputs& in = *c.in;
      al::AttentionOptions<float> o = c.options;
      o.check_finite = false;  // the inputs are ours; time the kernels
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto t0 = std::chrono::steady_clock::now();
      al::attention_forward<float>(in.q, in.k, in.v, o, {in.out.view(), in.lse.view()}, config);
      const double f = ms_since(t0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      t0 = std::chrono::steady_clock::now();
      al::attention_backward<float>(in.q, in.k, in.v, in.out, in.lse, in.grad_out, o,
                                    {in.dq.view(), in.dk.view(), in.dv.view()}, config);
      const double b = ms_since(t0);
      if (r >= 0) c.forward_ms.push_back(f), c.backward_ms.push_back(b);
    }
  const attnlab::bench::Peak after = attnlab::bench::measure_peak(threads);
  peak.gflops = std::max(peak.gflops, after.gflops);
  fmt::print("attnlab bench-variants | {} threads | engine target {} | FMA peak {:.1f} GFLOP/s (best of before and "
             "after) | load average {:.2f} {:.2f} {:.2f} | median of {}\n",
             threads, al::engine::target_name(), peak.gflops, load[0], load[1], load[2], a.repeats);
  fmt::print("GFLOP/s count visible pairs only; 'vs' is the ratio to the named peer of the same run\n");
  fmt::print("{:<9} {:<28} {:>10} {:>9} {:>7} {:>7}   {:>10} {:>9} {:>7} {:>7}  {}\n", "group", "case", "fwd ms",
             "GFLOP/s", "% peak", "vs", "bwd ms", "GFLOP/s", "% peak", "vs", "peer");
  std::map<std::string, std::pair<double, double>> rate;  // case → (forward, backward) GFLOP/s
  nlohmann::json results = nlohmann::json::array();
  for (const Case& c : cases) {
    const int64_t H = c.in->q.shape()[1], d = c.in->q.shape()[3];
    const double f_ms = median(c.forward_ms), b_ms = median(c.backward_ms);
    const double f_gf = 4.0 * c.pairs * double(d) * double(H) / (f_ms * 1e6);
    const double b_gf = 10.0 * c.pairs * double(d) * double(H) / (b_ms * 1e6);
    rate[c.name] = {f_gf, b_gf};
    const auto peer = c.peer.empty() ? std::pair{f_gf, b_gf} : rate.at(c.peer);
    fmt::print("{:<9} {:<28} {:>10.1f} {:>9.1f} {:>6.1f}% {:>6.0f}%   {:>10.1f} {:>9.1f} {:>6.1f}% {:>6.0f}%  {}\n",
               c.group, c.name, f_ms, f_gf, 100 * f_gf / peak.gflops, 100 * f_gf / peer.first, b_ms, b_gf,
               100 * b_gf / peak.gflops, 100 * b_gf / peer.second, c.peer.empty() ? "-" : c.peer);
    results.push_back({{"group", c.group},
                       {"case", c.name},
                       {"peer", c.peer},
                       {"seq", c.in->q.shape()[2]},
                       {"dim", d},
                       {"heads", H},
                       {"visible_pairs", c.pairs},
                       {"forward_ms", f_ms},
                       {"backward_ms", b_ms},
                       {"forward_gflops", f_gf},
                       {"backward_gflops", b_gf},
                       {"forward_vs_peer", f_gf / peer.first},
                       {"backward_vs_peer", b_gf / peer.second}});
  }
  if (!a.json.empty()) {
    const nlohmann::json doc = {{"peak_gflops", peak.gflops}, {"threads", threads},
                                {"load_average", {load[0], load[1], load[2]}}, {"results", results}};
    al::io::write_file_atomically(a.json, doc.dump(2) + "\n");
    fmt::print("wrote {}\n", a.json);
  }
}

}  // namespace

attnlab::cli::Command attnlab::cli::bench_variants_command() {
  return {"bench-variants",
          "Time the attention variants (window, packed, softcap, ALiBi, sinks, dropout, mask_mod) "
          "against the plain engine",
          [](CLI::App& sub) {
            static Args a;
            attnlab::cli::add_list_option(
                sub, "--groups", a.groups,
                "which: window (window and packed at N = 16384), features (softcap, ALiBi, sinks, "
                "dropout at N = 4096, d = 128), mods (mask_mod vs built-in)");
            sub.add_option("--threads", a.threads, "engine threads (0: all cores)");
            sub.add_option("--repeats", a.repeats, "timed repeats; the median is reported");
            sub.add_flag("--quick", a.quick, "small sizes (checks the program, not the speed)");
            sub.add_option("--json", a.json, "also write the results as JSON to this file");
            sub.callback([] { run(a); });
          }};
}
