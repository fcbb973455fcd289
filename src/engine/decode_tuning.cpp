// The decoding step's reads from memory measured on this machine (attnlab/decode_tuning.hpp):
// the measurement, the text form, and the tuning in use that decode_strategy.hpp's decision
// reads (tuned_reads_in_use).
#include "attnlab/decode_tuning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "engine/decode_kernels.hpp"
#include "engine/decode_path.hpp"
#include "engine/decode_strategy.hpp"

namespace attnlab {

namespace {

using engine::ElementType;
using engine::FusedReads;
using engine::TunedReads;
using engine::TunedReadsTable;

constexpr const char* kHeader =
    "# attnlab decode tuning: the fused decoding step's reads from memory, measured per cell\n"
    "# (attnlab/decode_tuning.hpp; `attnlab tune` writes it, ATTNLAB_DECODE_TUNING=FILE uses it)\n"
    "# type rows head_dim reads rule_ms best_ms\n";

const char* reads_name(TunedReads r) {
  switch (r) {
    case TunedReads::beside_loads: return "beside_loads";
    case TunedReads::row_order: return "row_order";
    case TunedReads::spread:
    case TunedReads::rule: break;
  }
  return "spread";
}

TunedReads tuned_of(FusedReads r) {
  switch (r) {
    case FusedReads::beside_loads: return TunedReads::beside_loads;
    case FusedReads::row_order: return TunedReads::row_order;
    case FusedReads::spread: break;
  }
  return TunedReads::spread;
}

std::optional<TunedReads> parse_reads(std::string_view s) {
  if (s == "beside_loads") return TunedReads::beside_loads;
  if (s == "spread") return TunedReads::spread;
  if (s == "row_order") return TunedReads::row_order;
  return std::nullopt;
}

std::optional<ElementType> parse_type(std::string_view s) {
  if (s == "float32") return ElementType::f32;
  if (s == "float16") return ElementType::f16;
  if (s == "bfloat16") return ElementType::bf16;
  return std::nullopt;
}

// The table a tuning's cells make (the rule where it has none).
TunedReadsTable table_of(const DecodeTuning& t) {
  TunedReadsTable table{};
  for (const DecodeTuningCell& c : t.cells) {
    const int cell = engine::tuned_cell(*parse_type(c.type), c.rows, c.head_dim);
    table[static_cast<size_t>(cell)] = *parse_reads(c.reads);
  }
  return table;
}

// The process's tuning, and every table it has held: a call may still read one that was
// replaced, so none is freed before the process ends (they are small and few).
std::atomic<const TunedReadsTable*> g_in_use{nullptr};

const TunedReadsTable* kept(const TunedReadsTable& t) {
  static std::mutex m;
  static std::deque<TunedReadsTable> tables;  // a deque: the addresses stay as it grows
  const std::lock_guard<std::mutex> lock(m);
  tables.push_back(t);
  return &tables.back();
}
thread_local const TunedReadsTable* t_measuring = nullptr;

void check_cell(const DecodeTuningCell& c, const std::string& where) {
  auto bad = [&](const std::string& what) { throw Error(fmt::format("decode tuning: {}: {}", where, what)); };
  if (!parse_type(c.type)) bad(fmt::format("type '{}' is none of float32, float16, bfloat16", c.type));
  if (c.rows < 1 || c.rows > 8) bad(fmt::format("rows {} is not in [1, 8]", c.rows));
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    bad(fmt::format("head_dim {} is none of 64, 128, 256", c.head_dim));
  if (!parse_reads(c.reads)) bad(fmt::format("reads '{}' is none of beside_loads, spread, row_order", c.reads));
  if (!(std::isfinite(c.rule_ms) && c.rule_ms >= 0 && std::isfinite(c.best_ms) && c.best_ms >= 0))
    bad("the times must be finite and ≥ 0");
}

// Uniform values in [-1, 1) (the times do not depend on them): a xorshift, as fast as a fill.
template <class E>
void fill(Tensor<E>& x, uint64_t seed) {
  uint64_t s = seed | 1;
  for (E& e : x.storage()) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const float f = static_cast<float>(s >> 40) * 0x1p-23f - 1.0f;
    if constexpr (std::is_same_v<E, float>) e = f;
    else e = E::from_float(f);
  }
}

// The cells of one element type: K and V [1, 8, Nk, d], the ways timed in interleaved rounds.
template <class E>
void measure_type(const DecodeTuningOptions& o, const std::string& type, ElementType et, int64_t bytes,
                  DecodeTuning& out) {
  constexpr int64_t kHeads = 8;
  for (int d : o.head_dims) {
    const int64_t nk = std::max<int64_t>(64, bytes / (kHeads * 2 * d * static_cast<int64_t>(sizeof(E))));
    Tensor<E> k({1, kHeads, nk, d}), v({1, kHeads, nk, d});
    fill(k, 1), fill(v, 2);
    for (int rows : o.rows) {
      engine::DecodeShape c;
      c.Hkv = kHeads, c.rows = rows, c.Nk = nk, c.d = d, c.dv = d, c.dv_pad = d, c.type = et;
      static const TunedReadsTable kRuleEverywhere{};
      t_measuring = &kRuleEverywhere;  // the rule's way, whatever tuning is in use
      const engine::DecodeStrategy rule = engine::decode_strategy_for(c);
      t_measuring = nullptr;
      if (!rule.fused) continue;  // the tile step: no way to choose
      std::vector<TunedReads> ways = {TunedReads::beside_loads, TunedReads::spread};
      if (d == 64 || d == 128) ways.push_back(TunedReads::row_order);
      Tensor<E> q({1, kHeads * rows, 1, d}), o_({1, kHeads * rows, 1, d});
      Tensor<float> lse({1, kHeads * rows, 1, 1});
      fill(q, 3);
      std::vector<std::vector<double>> ms(ways.size());
      std::vector<TunedReadsTable> forced(ways.size());
      const int cell = engine::tuned_cell(et, rows, d);
      for (size_t w = 0; w < ways.size(); ++w) forced[w][static_cast<size_t>(cell)] = ways[w];
      const AttentionOptions<float> options;
      ComputeConfig config;
      config.threads = o.threads;
      for (int r = 0; r <= o.rounds; ++r)  // round 0 untimed: the pages touched, the caches warm
        for (size_t w = 0; w < ways.size(); ++w) {
          t_measuring = &forced[w];
          const auto t0 = std::chrono::steady_clock::now();
          try {
            engine::attention_forward<E>(q, k, v, options, {o_, lse}, config);
          } catch (...) {
            t_measuring = nullptr;
            throw;
          }
          const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          t_measuring = nullptr;
          if (r > 0) ms[w].push_back(t);
        }
      std::vector<double> median(ways.size());
      for (size_t w = 0; w < ways.size(); ++w) {
        std::sort(ms[w].begin(), ms[w].end());
        median[w] = ms[w][ms[w].size() / 2];
      }
      // The rule's way, unless another is faster by more than the margin.
      const size_t rule_way = static_cast<size_t>(
          std::find(ways.begin(), ways.end(), tuned_of(rule.reads)) - ways.begin());
      size_t best = rule_way;
      for (size_t w = 0; w < ways.size(); ++w)
        if (median[w] < median[best] && median[w] < median[rule_way] * (1.0 - o.margin)) best = w;
      DecodeTuningCell cell_out{type, rows, d, reads_name(ways[best]), median[rule_way], median[best]};
      out.cells.push_back(cell_out);
      if (o.on_cell) o.on_cell(cell_out);
    }
  }
}

}  // namespace

std::string decode_tuning_machine() {
  std::string cpu = "unknown CPU";
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
    if (__get_cpuid(1, &a, &b, &c, &d)) {
      const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
      const unsigned family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
      const unsigned model = base_family == 0xF || base_family == 6 ? base_model | (((a >> 16) & 0xF) << 4) : base_model;
      cpu = fmt::format("{} family {} model {} stepping {}", vendor, family, model, a & 0xF);
    }
  }
#endif
  return fmt::format("{}, {} target, last-level cache {} bytes", cpu, engine::target_name(),
                     engine::last_level_cache_bytes());
}

DecodeTuning measure_decode_tuning(const DecodeTuningOptions& o) {
  if (o.rounds < 1 || o.rounds > 1000) throw Error(fmt::format("decode tuning: rounds {} is not in [1, 1000]", o.rounds));
  if (o.bytes < 0) throw Error("decode tuning: bytes must be ≥ 0 (0: 4 × the last-level cache)");
  if (!(o.margin >= 0 && o.margin < 1)) throw Error("decode tuning: margin must be in [0, 1)");
  check_threads(o.threads, "decode tuning: threads");
  for (const std::string& t : o.types)
    if (!parse_type(t)) throw Error(fmt::format("decode tuning: type '{}' is none of float32, float16, bfloat16", t));
  for (int r : o.rows)
    if (r < 1 || r > 8) throw Error(fmt::format("decode tuning: rows {} is not in [1, 8]", r));
  for (int d : o.head_dims)
    if (d != 64 && d != 128 && d != 256) throw Error(fmt::format("decode tuning: head_dim {} is none of 64, 128, 256", d));
  const int64_t llc = engine::last_level_cache_bytes();
  const int64_t bytes = o.bytes > 0 ? o.bytes : std::max<int64_t>(int64_t{256} << 20, 4 * llc);
  if (bytes <= llc)  // the cells are the reads from memory, which the decision asks them for
    throw Error(fmt::format("decode tuning: {} MiB of K and V fit the {} MiB last-level cache; the tuning is of "
                            "reads from memory: give more (or 0, the default)",
                            bytes >> 20, llc >> 20));
  DecodeTuning out;
  out.machine = decode_tuning_machine();
  for (const std::string& t : o.types) {
    const ElementType et = *parse_type(t);
    if (et == ElementType::f32) measure_type<float>(o, t, et, bytes, out);
    if (et == ElementType::f16) measure_type<float16>(o, t, et, bytes, out);
    if (et == ElementType::bf16) measure_type<bfloat16>(o, t, et, bytes, out);
  }
  return out;
}

std::string to_text(const DecodeTuning& t) {
  std::string s = kHeader;
  s += fmt::format("machine {}\n", t.machine);
  for (const DecodeTuningCell& c : t.cells)
    s += fmt::format("{} {} {} {} {:.4f} {:.4f}\n", c.type, c.rows, c.head_dim, c.reads, c.rule_ms, c.best_ms);
  return s;
}

DecodeTuning parse_decode_tuning(std::string_view text) {
  DecodeTuning t;
  bool have_machine = false;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = fmt::format("line {}", number);
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("machine ", 0) == 0) {
      if (have_machine) throw Error(fmt::format("decode tuning: {}: a second machine line", where));
      t.machine = line.substr(8), have_machine = true;
      continue;
    }
    if (!have_machine) throw Error(fmt::format("decode tuning: {}: a cell before the machine line", where));
    std::istringstream fields(line);
    DecodeTuningCell c;
    std::string extra;
    if (!(fields >> c.type >> c.rows >> c.head_dim >> c.reads >> c.rule_ms >> c.best_ms) || (fields >> extra))
      throw Error(fmt::format("decode tuning: {}: '{}' is not 'type rows head_dim reads rule_ms best_ms'", where, line));
    check_cell(c, where);
    for (const DecodeTuningCell& seen : t.cells)
      if (seen.type == c.type && seen.rows == c.rows && seen.head_dim == c.head_dim)
        throw Error(fmt::format("decode tuning: {}: a second line for {} rows {} head_dim {}", where, c.type, c.rows,
                                c.head_dim));
    t.cells.push_back(c);
  }
  if (!have_machine) throw Error("decode tuning: no machine line (is this a file `attnlab tune` wrote?)");
  return t;
}

void use_decode_tuning(const DecodeTuning& t) {
  for (size_t i = 0; i < t.cells.size(); ++i) check_cell(t.cells[i], fmt::format("cell {}", i));
  const std::string here = decode_tuning_machine();
  if (t.machine != here)
    throw Error(fmt::format("decode tuning: measured on '{}', but this is '{}': measure it here (attnlab tune)",
                            t.machine, here));
  g_in_use.store(kept(table_of(t)), std::memory_order_release);  // the old one stays valid
}

void use_decode_rule() { g_in_use.store(nullptr, std::memory_order_release); }

namespace engine {

const TunedReadsTable* tuned_reads_in_use() {
  if (t_measuring != nullptr) return t_measuring;
  // The environment's file, once: an Error at every call until it can be used.
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    const char* path = std::getenv("ATTNLAB_DECODE_TUNING");
    if (path == nullptr || *path == '\0') return;
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(fmt::format("ATTNLAB_DECODE_TUNING: cannot read '{}'", path));
    std::ostringstream text;
    text << f.rdbuf();
    try {
      use_decode_tuning(parse_decode_tuning(text.str()));
    } catch (const Error& e) {
      throw Error(fmt::format("ATTNLAB_DECODE_TUNING='{}': {}", path, e.what()));
    }
  });
  return g_in_use.load(std::memory_order_acquire);
}

}  // namespace engine

}  // namespace attnlab
