// Two or more builds of libattnlab timed against each other in one process, their calls
// interleaved on the same inputs: a decode or prefill shape, every build's forward in
// turn, round after round, the median per build. On a shared machine whose speed moves
// by 10-30 % from one minute to the next, separate runs compare minutes, not code; calls
// interleaved within a second compare code.
//
//   attnlab_interleave_builds [options] BUILD.so BUILD.so ...
//     --batch B --heads Hq --kv-heads Hkv --seq-q Nq --seq-k Nk --dim d   (d = dv)
//     --bottom-right     bottom-right causal (a chunk of new queries at the end of a cache)
//     --bf16, --f16      bfloat16 or float16 q, k, v and out (the builds' outputs are compared in float32)
//     --rounds N         timed rounds after one untimed (default 21)
//     --threads T        (default 2)
//     --pages KIND       K and V in 4k (4 KiB pages), 2m (2 MiB transparent huge pages) or
//                        both (two copies, each build timed on each in turn); by default
//                        where the allocator puts them, which the output names
//     --cache TYPE[/VTYPE]  decode over each build's own paged KVCache of TYPE (float32, bfloat16,
//                        float16, int8, int4, fp8_e4m3; fp8 scales 0.02), V of VTYPE if given,
//                        instead: the same K/V appended to each, kv_cache_attention timed
//                        (--seq-q rows a sequence, bottom-right causal; --block-tokens N,
//                        default 128)
//     --softcap C        the scores softcapped at C
//     --alibi            ALiBi with the usual slopes 2^(−8(h+1)/Hq)
//
// Each BUILD.so is dlopen'ed with RTLD_LOCAL: copies of the library under different file
// names load side by side, each with its own state. Only the public C++ ABI is used
// (attnlab::attention_forward; with --cache, KVCache's constructor, add_sequence, append,
// destructor and kv_cache_attention), so the builds must share these headers' versions of it
// (KVCacheConfig: at least its leading fields).
// Inputs are standard normal (fixed seed), 64-byte aligned; K and V are [B, Hkv, Nk, d].
// Prints, per build (and page kind), the median time and its quartiles, K and V bytes over the median,
// the ratio to the first build, and the largest difference of its output from the
// first build's (the variants must compute the same attention).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/kv_cache.hpp"
#include "attnlab/statistics.hpp"
#include "attnlab/tensor.hpp"
#include "page_kind.hpp"

namespace {

namespace al = attnlab;
namespace ab = attnlab::bench;

// attnlab::attention_forward<E> for float32, bfloat16 and float16 (attnlab/attention.hpp).
template <class E>
using Forward = void (*)(al::ConstView<E>, al::ConstView<E>, al::ConstView<E>, const al::AttentionOptions<float>&,
                         const al::ForwardOutputs<E>&, const al::ComputeConfig&);
constexpr const char* kForwardF32 =
    "_ZN7attnlab17attention_forwardIfEEvNS_10TensorViewIKT_EES4_S4_RKNS_16AttentionOptionsINS_12AccumulationIS2_E4"
    "typeEEERKNS_14ForwardOutputsIS2_EERKNS_13ComputeConfigE";
constexpr const char* kForwardBF16 =
    "_ZN7attnlab17attention_forwardINS_8bfloat16EEEvNS_10TensorViewIKT_EES5_S5_RKNS_16AttentionOptionsINS_"
    "12AccumulationIS3_E4typeEEERKNS_14ForwardOutputsIS3_EERKNS_13ComputeConfigE";
constexpr const char* kForwardF16 =
    "_ZN7attnlab17attention_forwardINS_7float16EEEvNS_10TensorViewIKT_EES5_S5_RKNS_16AttentionOptionsINS_"
    "12AccumulationIS3_E4typeEEERKNS_14ForwardOutputsIS3_EERKNS_13ComputeConfigE";

// KVCache's members and kv_cache_attention (attnlab/kv_cache.hpp), by their mangled names.
using CacheNew = void (*)(void*, const al::KVCacheConfig&);
using CacheDelete = void (*)(void*);
using CacheAddSequence = int64_t (*)(void*);
using CacheAppend = void (*)(void*, int64_t, int64_t, al::ConstView<float>, al::ConstView<float>);
using CacheAttention = void (*)(const void*, int64_t, std::span<const int64_t>, al::ConstView<float>,
                                const al::AttentionOptions<float>&, const al::ForwardOutputs<float>&,
                                std::span<const int64_t>, const al::ComputeConfig&);
constexpr const char* kCacheNew = "_ZN7attnlab7KVCacheC1ERKNS_13KVCacheConfigE";
constexpr const char* kCacheDelete = "_ZN7attnlab7KVCacheD1Ev";
constexpr const char* kCacheAddSequence = "_ZN7attnlab7KVCache12add_sequenceEv";
constexpr const char* kCacheAppend = "_ZN7attnlab7KVCache6appendEllNS_10TensorViewIKfEES3_";
constexpr const char* kCacheAttention =
    "_ZN7attnlab18kv_cache_attentionERKNS_7KVCacheElSt4spanIKlLm18446744073709551615EENS_10TensorViewIKfEERKNS_"
    "16AttentionOptionsIfEERKNS_14ForwardOutputsIfEES5_RKNS_13ComputeConfigE";

// CacheType's names in its order (the type is parsed here: this program links no libattnlab).
constexpr const char* kCacheTypes[] = {"float32", "bfloat16", "float16", "int8", "int4", "fp8_e4m3"};

struct Args {
  int64_t B = 1, Hq = 32, Hkv = 8, Nq = 1, Nk = 32768, d = 128, block_tokens = 128;
  std::string cache, value_cache;  // --cache TYPE[/VTYPE], "" = attention_forward
  double softcap = 0;  // --softcap C, 0 = none
  bool alibi = false, bottom_right = false, bf16 = false, f16 = false;
  int rounds = 21, threads = 2;
  std::string pages;  // "", "4k", "2m" or "both"
  std::vector<std::string> builds;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "attnlab_interleave_builds: %s\n(see the comment at the top of bench/interleave_builds.cpp)\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc) usage(f + " needs a value");
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < 1) usage(f + " needs a positive integer, got '" + argv[i] + "'");
      return v;
    };
    if (f == "--batch") a.B = value();
    else if (f == "--heads") a.Hq = value();
    else if (f == "--kv-heads") a.Hkv = value();
    else if (f == "--seq-q") a.Nq = value();
    else if (f == "--seq-k") a.Nk = value();
    else if (f == "--dim") a.d = value();
    else if (f == "--block-tokens") a.block_tokens = value();
    else if (f == "--rounds") a.rounds = static_cast<int>(value());
    else if (f == "--threads") a.threads = static_cast<int>(value());
    else if (f == "--bottom-right") a.bottom_right = true;
    else if (f == "--bf16") a.bf16 = true;
    else if (f == "--f16") a.f16 = true;
    else if (f == "--pages") {
      if (i + 1 >= argc) usage("--pages needs a value");
      a.pages = argv[++i];
      if (a.pages != "4k" && a.pages != "2m" && a.pages != "both") usage("--pages takes 4k, 2m or both, got '" + a.pages + "'");
    }
    else if (f == "--cache") {
      if (i + 1 >= argc) usage("--cache needs a type");
      a.cache = argv[++i];
      const size_t slash = a.cache.find('/');
      a.value_cache = slash == std::string::npos ? a.cache : a.cache.substr(slash + 1);
      a.cache = a.cache.substr(0, slash);
      for (const std::string& t : {a.cache, a.value_cache})
        if (std::find(std::begin(kCacheTypes), std::end(kCacheTypes), t) == std::end(kCacheTypes))
          usage("--cache: unknown type '" + t + "'");
    }
    else if (f == "--softcap") {
      if (i + 1 >= argc) usage("--softcap needs a value");
      char* end = nullptr;
      a.softcap = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(a.softcap > 0)) usage(std::string("--softcap needs a positive number, got '") + argv[i] + "'");
    }
    else if (f == "--alibi") a.alibi = true;
    else if (f.rfind("--", 0) == 0) usage("unknown option " + f);
    else a.builds.push_back(f);
  }
  if (a.builds.empty()) usage("no BUILD.so given");
  if (a.Hq % a.Hkv != 0) usage("--kv-heads must divide --heads");
  return a;
}

// One build on one copy of K and V: its forward, its times, its first output.
// The score treatments asked for (--softcap, --alibi); slopes holds ALiBi's.
al::AttentionOptions<float> score_options(const Args& a, std::vector<float>& slopes) {
  al::AttentionOptions<float> opt;
  if (a.softcap > 0) opt.softcap = a.softcap;
  if (a.alibi) {
    for (int64_t h = 0; h < a.Hq; ++h)
      slopes.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(a.Hq)));
    opt.alibi_slopes = slopes;
  }
  return opt;
}

template <class E>
struct Run {
  std::string label;
  Forward<E> forward = nullptr;
  size_t copy = 0;  // which copy of K and V
  std::vector<double> ms;
  std::vector<float> out;
};

template <class E>
int run(const Args& a) {
  std::vector<std::pair<std::string, Forward<E>>> builds;
  for (const auto& path : a.builds) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) usage(dlerror());
    auto f = reinterpret_cast<Forward<E>>(dlsym(h, std::is_same_v<E, float>      ? kForwardF32
                                                                    : std::is_same_v<E, al::bfloat16> ? kForwardBF16
                                                                                                     : kForwardF16));
    if (f == nullptr) usage(path + " has no attnlab::attention_forward of this element type");
    builds.emplace_back(path, f);
  }
  // Buffers allocated as Tensor's (64-byte aligned), but not Tensor itself: its error
  // path calls into libattnlab, and this program must not load one of its own (the
  // builds' calls to their own exported functions would bind to it). With --pages, K
  // and V are mapped for themselves in the pages asked for, one copy per page kind.
  const al::Shape q_shape{a.B, a.Hq, a.Nq, a.d}, kv_shape{a.B, a.Hkv, a.Nk, a.d};
  auto numel = [](const al::Shape& s) { return static_cast<size_t>(s[0] * s[1] * s[2] * s[3]); };
  const size_t nkv = numel(kv_shape);
  typename al::Tensor<E>::Storage q(numel(q_shape)), out(numel(q_shape));
  typename al::Tensor<float>::Storage lse(static_cast<size_t>(a.B * a.Hq * a.Nq));
  std::vector<typename al::Tensor<E>::Storage> allocated;
  std::vector<std::unique_ptr<ab::MappedBuffer>> mapped;
  std::vector<std::pair<E*, E*>> copies;  // (K, V) per page kind
  if (a.pages.empty()) {
    allocated.emplace_back(nkv), allocated.emplace_back(nkv);
    copies.emplace_back(allocated[0].data(), allocated[1].data());
  } else {
    for (const bool huge : {false, true}) {
      if (a.pages == (huge ? "4k" : "2m")) continue;
      for (int i = 0; i < 2; ++i) mapped.push_back(std::make_unique<ab::MappedBuffer>(nkv * sizeof(E), huge));
      copies.emplace_back(static_cast<E*>(mapped[mapped.size() - 2]->data()), static_cast<E*>(mapped.back()->data()));
    }
  }
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto draw = [&] {
    if constexpr (std::is_same_v<E, float>) return nd(rng);
    else return E::from_float(nd(rng));
  };
  for (E& x : q) x = draw();
  for (size_t i = 0; i < nkv; ++i) {
    const E k = draw(), v = draw();
    for (auto& [kc, vc] : copies) kc[i] = k, vc[i] = v;
  }
  std::vector<std::string> pages;  // each copy's, as the kernel placed K and V
  for (auto& [kc, vc] : copies) pages.push_back(ab::describe_kv_pages(kc, vc, nkv * sizeof(E)));
  std::vector<Run<E>> runs;
  for (const auto& [path, f] : builds)
    for (size_t c = 0; c < copies.size(); ++c)
      runs.push_back({copies.size() > 1 ? path + " [" + pages[c] + "]" : path, f, c, {}, {}});

  const al::TensorView<E> ov(out.data(), q_shape);
  const al::TensorView<float> lv(lse.data(), {a.B, a.Hq, a.Nq, 1});
  const al::ConstView<E> qv(q.data(), q_shape);
  std::vector<float> slopes;
  al::AttentionOptions<float> opt = score_options(a, slopes);
  if (a.bottom_right) opt.causal = al::Causal::bottom_right;
  al::ComputeConfig cfg;
  cfg.threads = a.threads;
  for (int r = -1; r < a.rounds; ++r)  // r = −1: untimed, keeps each run's output
    for (auto& run : runs) {
      const al::ConstView<E> kv(copies[run.copy].first, kv_shape), vv(copies[run.copy].second, kv_shape);
      const auto t0 = std::chrono::steady_clock::now();
      run.forward(qv, kv, vv, opt, {ov, lv}, cfg);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) run.ms.push_back(ms);
      else
        for (const E& x : out) {
          if constexpr (std::is_same_v<E, float>) run.out.push_back(x);
          else run.out.push_back(x.to_float());
        }
    }
  const double kv_bytes = 2.0 * static_cast<double>(nkv) * sizeof(E);
  std::printf("B %lld, heads %lld/%lld, Nq %lld, Nk %lld, d %lld%s, %s, softcap %g%s, %d threads, %d rounds%s%s\n",
              static_cast<long long>(a.B), static_cast<long long>(a.Hq), static_cast<long long>(a.Hkv),
              static_cast<long long>(a.Nq), static_cast<long long>(a.Nk), static_cast<long long>(a.d),
              a.bottom_right ? ", bottom-right causal" : "", a.bf16 ? "bfloat16" : a.f16 ? "float16" : "float32", a.softcap,
              a.alibi ? ", ALiBi" : "", a.threads, a.rounds,
              copies.size() == 1 ? ", K and V in " : "", copies.size() == 1 ? pages[0].c_str() : "");
  double first_median = 0;
  for (auto& run : runs) {
    const double median = attnlab::stats::median(run.ms);
    if (first_median == 0) first_median = median;
    double diff = 0;
    for (size_t i = 0; i < run.out.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(run.out[i] - runs.front().out[i])));
    std::printf("%-32s median %8.3f ms (quartiles %.3f-%.3f)  K/V %5.1f GB/s  x%.3f of the first  max|dO| %.1e\n",
                run.label.c_str(), median, attnlab::stats::quantile(run.ms, 0.25), attnlab::stats::quantile(run.ms, 0.75), kv_bytes / median / 1e6,
                first_median / median, diff);
  }
  return 0;
}

// --cache: each build's own KVCache holding the same rows, its kv_cache_attention timed.
int run_cache(const Args& a) {
  struct Build {
    std::string path;
    CacheDelete destroy;
    CacheAppend append;
    CacheAttention attention;
    alignas(64) unsigned char cache[64];  // a KVCache: its one pointer to state
    std::vector<int64_t> seqs;
    std::vector<double> ms;
    std::vector<float> out;
  };
  static_assert(sizeof(al::KVCache) <= 64);
  al::KVCacheConfig c;
  c.kv_heads = a.Hkv, c.head_dim = a.d, c.max_tokens = a.B * a.Nk, c.block_tokens = a.block_tokens;
  auto type = [](const std::string& name) {
    return static_cast<al::CacheType>(std::find(std::begin(kCacheTypes), std::end(kCacheTypes), name) -
                                      std::begin(kCacheTypes));
  };
  c.key_type = type(a.cache), c.value_type = type(a.value_cache);
  if (a.cache == "fp8_e4m3") c.key_scales = {0.02f};
  if (a.value_cache == "fp8_e4m3") c.value_scales = {0.02f};
  // Rows as Tensor allocates them (see run): [Hkv, Nk, d] per sequence, standard normal.
  const size_t per_seq = static_cast<size_t>(a.Hkv * a.Nk * a.d);
  al::Tensor<float>::Storage k(per_seq), v(per_seq), q(static_cast<size_t>(a.B * a.Hq * a.Nq * a.d)),
      out(q.size()), lse(static_cast<size_t>(a.B * a.Hq * a.Nq));
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  std::vector<std::unique_ptr<Build>> builds;
  for (const auto& path : a.builds) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) usage(dlerror());
    auto sym = [&](const char* name) {
      void* f = dlsym(h, name);
      if (f == nullptr) usage(path + " has no " + name);
      return f;
    };
    auto b = std::make_unique<Build>();
    b->path = path;
    b->destroy = reinterpret_cast<CacheDelete>(sym(kCacheDelete));
    b->append = reinterpret_cast<CacheAppend>(sym(kCacheAppend));
    b->attention = reinterpret_cast<CacheAttention>(sym(kCacheAttention));
    reinterpret_cast<CacheNew>(sym(kCacheNew))(b->cache, c);
    for (int64_t s = 0; s < a.B; ++s) b->seqs.push_back(reinterpret_cast<CacheAddSequence>(sym(kCacheAddSequence))(b->cache));
    builds.push_back(std::move(b));
  }
  // The same rows to every build, sequence by sequence.
  for (int64_t s = 0; s < a.B; ++s) {
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (auto& b : builds)
      b->append(b->cache, 0, b->seqs[static_cast<size_t>(s)], al::ConstView<float>(k.data(), {1, a.Hkv, a.Nk, a.d}),
                al::ConstView<float>(v.data(), {1, a.Hkv, a.Nk, a.d}));
  }
  const al::Shape q_shape{a.B, a.Hq, a.Nq, a.d};
  std::vector<float> slopes;
  al::AttentionOptions<float> opt = score_options(a, slopes);
  opt.causal = al::Causal::bottom_right;
  al::ComputeConfig cfg;
  cfg.threads = a.threads;
  for (int r = -1; r < a.rounds; ++r)
    for (auto& b : builds) {
      const auto t0 = std::chrono::steady_clock::now();
      b->attention(b->cache, 0, b->seqs, al::ConstView<float>(q.data(), q_shape), opt,
                   {al::TensorView<float>(out.data(), q_shape), al::TensorView<float>(lse.data(), {a.B, a.Hq, a.Nq, 1})},
                   {}, cfg);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) b->ms.push_back(ms);
      else b->out.assign(out.begin(), out.end());
    }
  std::printf("B %lld, heads %lld/%lld, Nq %lld, Nk %lld, d %lld, a %s/%s KVCache of %lld-position blocks, softcap %g%s, "
              "%d threads, %d rounds\n",
              static_cast<long long>(a.B), static_cast<long long>(a.Hq), static_cast<long long>(a.Hkv),
              static_cast<long long>(a.Nq), static_cast<long long>(a.Nk), static_cast<long long>(a.d), a.cache.c_str(),
              a.value_cache.c_str(), static_cast<long long>(a.block_tokens), a.softcap, a.alibi ? ", ALiBi" : "", a.threads,
              a.rounds);
  const double first = attnlab::stats::median(builds.front()->ms);
  for (auto& b : builds) {
    const double median = attnlab::stats::median(b->ms);
    double diff = 0;
    for (size_t i = 0; i < b->out.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(b->out[i] - builds.front()->out[i])));
    std::printf("%-32s median %8.3f ms (quartiles %.3f-%.3f)  x%.3f of the first  max|dO| %.1e\n", b->path.c_str(),
                median, attnlab::stats::quantile(b->ms, 0.25), attnlab::stats::quantile(b->ms, 0.75), first / median, diff);
    b->destroy(b->cache);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.bf16 && a.f16) usage("--bf16 and --f16 exclude each other");
  if (!a.cache.empty()) return run_cache(a);
  return a.bf16 ? run<al::bfloat16>(a) : a.f16 ? run<al::float16>(a) : run<float>(a);
}
