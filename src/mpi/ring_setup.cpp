// The ring's collective checks and the plan of its engine calls (ring_common.hpp).
#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "attnlab/error.hpp"
#include "ring_common.hpp"

namespace attnlab::mpi::detail {
namespace {

// Per rank, gathered: layout, options fingerprint, first non-finite input, argument shapes.
enum Field : int {
  kChunks, kTotal, kLayoutHash, kFingerprint, kUnsupported, kBadInput, kBadValue, kBadIndex, kArgs = kBadIndex + 4
};
constexpr const char* kBadValueNames[] = {"nan", "inf", "-inf"};
constexpr int kPerArg = 5;  // shape, present

uint64_t fingerprint(const AttentionOptions<float>& o) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  mix(static_cast<uint64_t>(o.causal));
  mix(static_cast<uint64_t>(o.scale.kind()));
  mix(std::bit_cast<uint64_t>(o.scale.parameter()));
  mix(o.softcap ? std::bit_cast<uint64_t>(*o.softcap) : 0x5eedull);
  mix(o.key_lengths.size());
  for (int64_t l : o.key_lengths) mix(static_cast<uint64_t>(l));
  mix(o.sinks.size());
  for (float s : o.sinks) mix(std::bit_cast<uint32_t>(s));
  mix(o.check_finite ? 1 : 0);
  mix(static_cast<uint64_t>(o.window.left));
  mix(static_cast<uint64_t>(o.window.right));
  mix(o.alibi_slopes.size());
  for (float s : o.alibi_slopes) mix(std::bit_cast<uint32_t>(s));
  mix(static_cast<uint64_t>(o.query_offset));
  mix(static_cast<uint64_t>(o.key_offset));
  return h;
}

// The shape rank r must pass for an argument, from the problem's dims.
Shape expected_shape(const std::string& name, const Ring& ring, int r) {
  const int64_t n = ring.rows(r);
  if (name == "q" || name == "dq") return {ring.B, ring.Hq, n, ring.d};
  if (name == "k" || name == "dk") return {ring.B, ring.Hkv, n, ring.d};
  if (name == "v" || name == "dv") return {ring.B, ring.Hkv, n, ring.dv};
  if (name == "lse") return {ring.B, ring.Hq, n, 1};
  return {ring.B, ring.Hq, n, ring.dv};  // out, grad_out
}

// Variants defined on a block's local indices or on a whole [Nq, Nk] mask (the window and
// ALiBi are placed by the blocks' offsets): their names, and the first one the options ask
// for (0 = none).
const char* const kUnsupportedNames[] = {"",        "a boolean mask",    "an additive mask", "packed sequences",
                                         "dropout", "mask_mod/score_mod"};
int64_t unsupported_option(const AttentionOptions<float>& o) {
  if (o.bool_mask.present()) return 1;
  if (o.additive_mask.present()) return 2;
  if (!o.cu_seqlens_q.empty() || !o.cu_seqlens_k.empty()) return 3;
  if (o.dropout.present()) return 4;
  if (o.mask_mod != nullptr || o.score_mod != nullptr || o.block_mask != nullptr) return 5;
  return 0;
}

std::string option_error(const AttentionOptions<float>& o, const Ring& ring) {
  const int64_t n = ring.layout->total();
  if (!o.key_lengths.empty()) {
    if (static_cast<int64_t>(o.key_lengths.size()) != ring.B)
      return "key_lengths has " + std::to_string(o.key_lengths.size()) + " entries for batch " + std::to_string(ring.B);
    for (size_t b = 0; b < o.key_lengths.size(); ++b)
      if (o.key_lengths[b] < 0 || o.key_lengths[b] > n)
        return "key_lengths[" + std::to_string(b) + "] = " + std::to_string(o.key_lengths[b]) + " is outside [0, " +
               std::to_string(n) + "]";
    if (o.causal == Causal::bottom_right)
      return "causal bottom_right with key padding is not supported across ranks (its diagonal moves with each "
             "batch entry's key length); use top_left";
  }
  if (o.query_offset != 0 || o.key_offset != 0)
    return "query_offset and key_offset must be 0 (the ring places each block in the sequence itself)";
  if (o.window.left < -1 || o.window.right < -1)
    return "window (" + std::to_string(o.window.left) + ", " + std::to_string(o.window.right) +
           ") has a side below -1 (-1 means unbounded on that side)";
  if (!o.alibi_slopes.empty()) {
    const auto n = static_cast<int64_t>(o.alibi_slopes.size());
    if (n != ring.Hq && n != ring.B * ring.Hq)
      return "alibi_slopes has " + std::to_string(n) + " entries; expected Hq = " + std::to_string(ring.Hq) +
             " or B x Hq = " + std::to_string(ring.B * ring.Hq);
    for (float s : o.alibi_slopes)
      if (!std::isfinite(s)) return "alibi_slopes has a non-finite value";
  }
  if ((o.window.present() || !o.alibi_slopes.empty()) && !o.key_lengths.empty())
    return std::string(o.window.present() ? "a sliding window" : "ALiBi") +
           " with key padding is not supported across ranks (both are measured from the bottom-right diagonal, "
           "which moves with each batch entry's key length)";
  if (!o.sinks.empty() && static_cast<int64_t>(o.sinks.size()) != ring.Hq)
    return "sinks has " + std::to_string(o.sinks.size()) + " entries for " + std::to_string(ring.Hq) + " query heads";
  if (o.softcap && !(*o.softcap > 0 && std::isfinite(*o.softcap)))
    return "softcap must be a positive finite number, not " + std::to_string(*o.softcap);
  return {};
}

// The keys global row g sees among the first `keys` (causal: up to its diagonal; the window
// around it).
int64_t visible_keys(bool causal, const Window& window, int64_t keys, int64_t g) {
  int64_t lo = 0, hi = causal ? std::min(g + 1, keys) : keys;
  if (window.left >= 0) lo = std::max<int64_t>(0, g - window.left);
  if (window.right >= 0) hi = std::min(hi, g + window.right + 1);
  return std::max<int64_t>(0, hi - lo);
}

// The first value of this rank's inputs that its rule refuses (FiniteInput), written into
// mine[kBadInput, kBadValue, kBadIndex..]: checked on every rank before anything is exchanged,
// so that all ranks learn of it together.
void find_bad_value(const RingLayout& layout, int rank, int size, const AttentionOptions<float>& o,
                    std::span<const FiniteInput> inputs, std::vector<int64_t>& mine) {
  for (size_t t = 0; t < inputs.size(); ++t) {
    if (!o.check_finite && !inputs[t].log_sum_exp) continue;
    const Tensor<float>& x = *inputs[t].tensor;
    // -inf in lse is right on a row that sees no key (needs this rank's layout, checked later).
    const bool rows_known =
        static_cast<int>(layout.chunk_lengths.size()) == 2 * size && x.shape()[2] == layout.shard_length(rank);
    for (int64_t e = 0; e < x.numel(); ++e) {
      const float v = x.data()[e];
      if (std::isfinite(v)) continue;
      const int64_t i = (e / x.shape()[3]) % x.shape()[2], b = e / (x.shape()[1] * x.shape()[2] * x.shape()[3]);
      if (inputs[t].log_sum_exp && v == -INFINITY && o.sinks.empty() && rows_known) {
        const int64_t keys = b < static_cast<int64_t>(o.key_lengths.size()) ? o.key_lengths[static_cast<size_t>(b)]
                                                                             : layout.total();
        if (visible_keys(o.causal != Causal::none, o.window, keys, layout.global_row(rank, i)) == 0) continue;
      }
      mine[kBadInput] = static_cast<int64_t>(t);
      mine[kBadValue] = std::isnan(v) ? 0 : v > 0 ? 1 : 2;
      int64_t rest = e;
      for (int a = 3; a >= 0; --a) {
        mine[kBadIndex + a] = rest % x.shape()[a];
        rest /= x.shape()[a];
      }
      return;
    }
  }
}

// Whether any row of [qs, qs + nq) has a window that reaches a key of [ks, ks + nk) (rows
// see keys [g − left, g + right]; −1 = unbounded).
bool window_meets(const Window& w, int64_t qs, int64_t nq, int64_t ks, int64_t nk) {
  if (w.right >= 0 && ks > qs + nq - 1 + w.right) return false;
  if (w.left >= 0 && ks + nk - 1 < qs - w.left) return false;
  return true;
}

}  // namespace

Ring prepare(MPI_Comm comm, const RingLayout& layout, std::span<const Argument> args,
             const AttentionOptions<float>& options, std::span<const FiniteInput> finite_inputs) {
  Ring ring;
  ring.comm = comm;
  MPI_Comm_rank(comm, &ring.rank);
  MPI_Comm_size(comm, &ring.size);
  ring.layout = &layout;

  const int fields = kArgs + kPerArg * static_cast<int>(args.size());
  std::vector<int64_t> mine(static_cast<size_t>(fields), -1);
  mine[kChunks] = static_cast<int64_t>(layout.chunk_lengths.size());
  mine[kTotal] = layout.total();
  uint64_t chunks_hash = 1469598103934665603ull;  // the chunk lengths themselves must agree too
  for (int64_t c : layout.chunk_lengths) chunks_hash = (chunks_hash ^ static_cast<uint64_t>(c)) * 1099511628211ull;
  mine[kLayoutHash] = static_cast<int64_t>(chunks_hash);
  mine[kFingerprint] = static_cast<int64_t>(fingerprint(options));
  mine[kUnsupported] = unsupported_option(options);
  find_bad_value(layout, ring.rank, ring.size, options, finite_inputs, mine);
  for (size_t a = 0; a < args.size(); ++a) {
    for (int i = 0; i < 4; ++i) mine[kArgs + kPerArg * a + i] = args[a].shape[i];
    mine[kArgs + kPerArg * a + 4] = args[a].present ? 1 : 0;
  }
  std::vector<int64_t> all(static_cast<size_t>(fields) * static_cast<size_t>(ring.size));
  MPI_Allgather(mine.data(), fields, MPI_INT64_T, all.data(), fields, MPI_INT64_T, comm);
  auto field = [&](int r, int f) { return all[static_cast<size_t>(r) * static_cast<size_t>(fields) + static_cast<size_t>(f)]; };
  auto fail = [](const std::string& message) { throw Error("ring attention: " + message); };
  auto rank_name = [](int r) { return "rank " + std::to_string(r); };

  if (static_cast<int>(layout.chunk_lengths.size()) != 2 * ring.size)
    fail("the layout has " + std::to_string(layout.chunk_lengths.size()) + " chunks for " + std::to_string(ring.size) +
         " ranks (2 per rank are needed)");
  for (int r = 0; r < ring.size; ++r) {
    if (field(r, kChunks) != field(0, kChunks) || field(r, kTotal) != field(0, kTotal) ||
        field(r, kLayoutHash) != field(0, kLayoutHash))
      fail(rank_name(r) + "'s layout (" + std::to_string(field(r, kTotal)) + " rows) differs from rank 0's (" +
           std::to_string(field(0, kTotal)) + " rows)");
    if (const int64_t u = field(r, kUnsupported); u != 0)
      fail(std::string(kUnsupportedNames[u]) + " (" + rank_name(r) +
           "'s options) is not supported across ranks: it is defined on a block's local rows and keys (dropout's "
           "generator, mask_mod/score_mod) or on a whole [Nq, Nk] mask or packed layout");
    if (field(r, kFingerprint) != field(0, kFingerprint)) fail(rank_name(r) + "'s options differ from rank 0's");
  }
  // The problem's dims are rank 0's q, k and v.
  auto shape_of = [&](int r, size_t a) {
    return Shape{field(r, kArgs + kPerArg * static_cast<int>(a)), field(r, kArgs + kPerArg * static_cast<int>(a) + 1),
                 field(r, kArgs + kPerArg * static_cast<int>(a) + 2), field(r, kArgs + kPerArg * static_cast<int>(a) + 3)};
  };
  const Shape q0 = shape_of(0, 0), k0 = shape_of(0, 1), v0 = shape_of(0, 2);
  ring.B = q0[0], ring.Hq = q0[1], ring.d = q0[3], ring.Hkv = k0[1], ring.dv = v0[3];  // [B, H, N, d]
  if (ring.B < 1 || ring.Hq < 1 || ring.Hkv < 1 || ring.d < 1 || ring.dv < 1 || ring.Hq % ring.Hkv != 0)
    fail("rank 0's q " + to_string(q0) + ", k " + to_string(k0) + " and v " + to_string(v0) +
         " do not make a problem (sizes must be positive and q's heads a multiple of k's)");
  for (int r = 0; r < ring.size; ++r)
    for (size_t a = 0; a < args.size(); ++a) {
      Shape want = expected_shape(args[a].name, ring, r);
      const Shape got = shape_of(r, a);
      // dsinks: empty (not wanted), or one per query head when there are sinks.
      if (std::string(args[a].name) == "dsinks")
        want = {1, 1, 1, got[3] == 0 ? 0 : static_cast<int64_t>(options.sinks.size())};
      const bool present = field(r, kArgs + kPerArg * static_cast<int>(a) + 4) == 1;
      if (got != want || !present)
        fail(rank_name(r) + "'s " + args[a].name + " has shape " + to_string(got) + (present ? "" : " (absent)") +
             "; expected " + to_string(want) + ": " + rank_name(r) + " holds chunks " +
             std::to_string(layout.first_chunk(r)) + " and " + std::to_string(layout.second_chunk(r)) +
             " of the layout, " + std::to_string(ring.rows(r)) + " of its " + std::to_string(layout.total()) + " rows");
    }
  int64_t longest = 0;
  for (int r = 0; r < ring.size; ++r) longest = std::max(longest, ring.rows(r));
  if (longest * ring.B * ring.Hkv * (ring.d + ring.dv) > INT_MAX)
    fail("a K/V block of " + std::to_string(longest) + " rows is more than one MPI message holds (2^31 - 1 floats); "
         "use more ranks");
  if (const std::string e = option_error(options, ring); !e.empty()) fail(e);
  for (int r = 0; r < ring.size; ++r)
    if (const int64_t t = field(r, kBadInput); t >= 0) {
      const FiniteInput& in = finite_inputs[static_cast<size_t>(t)];
      const std::string where = " at [" + std::to_string(field(r, kBadIndex)) + ", " +
                                std::to_string(field(r, kBadIndex + 1)) + ", " + std::to_string(field(r, kBadIndex + 2)) +
                                ", " + std::to_string(field(r, kBadIndex + 3)) + "] of its shard (row " +
                                std::to_string(layout.global_row(r, field(r, kBadIndex + 2))) + " of the sequence)";
      if (in.log_sum_exp)
        fail(rank_name(r) + "'s " + in.name + " has the value " + kBadValueNames[field(r, kBadValue)] + where +
             ": a log-sum-exp is finite, or -inf on a row that sees no key and has no sink; pass the forward's lse");
      fail(rank_name(r) + "'s " + in.name + " has a non-finite value (" + kBadValueNames[field(r, kBadValue)] + ")" +
           where);
    }

  ring.causal = options.causal != Causal::none;
  ring.key_lengths.assign(options.key_lengths.begin(), options.key_lengths.end());
  ring.scale = options.scale;
  ring.prescale = options.scale.depends_on_n();
  ring.softcap = options.softcap;
  ring.sinks.assign(options.sinks.begin(), options.sinks.end());
  ring.window = options.window;
  ring.alibi_slopes.assign(options.alibi_slopes.begin(), options.alibi_slopes.end());
  return ring;
}

std::vector<BlockCall> block_calls(const Ring& ring, int source) {
  const RingLayout& L = *ring.layout;
  std::vector<BlockCall> calls;
  const int64_t n_mine = ring.rows(ring.rank), n_src = ring.rows(source);
  // Without causality, padding, window or ALiBi the whole shard meets the whole block in one call
  // (its two chunks are not adjacent in the sequence: no one offset places them).
  if (!ring.causal && ring.key_lengths.empty() && !ring.positional()) {
    if (n_mine > 0 && n_src > 0) calls.push_back({0, n_mine, 0, n_src, 0, false});
    return calls;
  }
  const int q_chunks[2] = {L.first_chunk(ring.rank), L.second_chunk(ring.rank)};
  const int k_chunks[2] = {L.first_chunk(source), L.second_chunk(source)};
  int64_t q0 = 0;
  for (int qc : q_chunks) {
    const int64_t nq = L.chunk_lengths[static_cast<size_t>(qc)];
    int64_t k0 = 0;
    for (int kc : k_chunks) {
      const int64_t nk = L.chunk_lengths[static_cast<size_t>(kc)];
      // Causal: an earlier chunk is wholly visible, a later one wholly masked; and a chunk
      // pair wholly outside the window is skipped.
      const int64_t qs = L.chunk_start(qc), ks = L.chunk_start(kc);
      if (nq > 0 && nk > 0 && (!ring.causal || kc <= qc) && window_meets(ring.window, qs, nq, ks, nk)) {
        // Self-attention: row g's diagonal is key g, the block's is i + offsets + (nk − nq).
        const int64_t shift = qs - ks - (nk - nq);
        calls.push_back(
            {q0, nq, k0, nk, ks, kc == qc && ring.causal, std::max<int64_t>(shift, 0), std::max<int64_t>(-shift, 0)});
      }
      k0 += nk;
    }
    q0 += nq;
  }
  return calls;
}

AttentionOptions<float> block_options(const Ring& ring, const BlockCall& call, std::vector<int64_t>& key_lengths) {
  AttentionOptions<float> o;
  o.scale = ring.prescale ? ScalePolicy::none() : ring.scale;
  o.causal = call.diagonal ? Causal::top_left : Causal::none;
  o.check_finite = false;  // checked once, collectively, before the ring
  o.softcap = ring.softcap;
  o.window = ring.window;
  o.alibi_slopes = ring.alibi_slopes;
  o.query_offset = call.query_offset;
  o.key_offset = call.key_offset;
  key_lengths.clear();
  for (int64_t l : ring.key_lengths) key_lengths.push_back(std::clamp<int64_t>(l - call.key_start, 0, call.nk));
  o.key_lengths = key_lengths;
  return o;
}

std::vector<double> row_scales(const Ring& ring) {
  if (!ring.prescale) return {};
  const int64_t n = ring.rows(ring.rank), total = ring.layout->total();
  std::vector<double> s(static_cast<size_t>(ring.B * n));
  for (int64_t b = 0; b < ring.B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = ring.layout->global_row(ring.rank, i);
      const int64_t keys = ring.key_lengths.empty() ? total : ring.key_lengths[static_cast<size_t>(b)];
      const int64_t visible = visible_keys(ring.causal, ring.window, keys, g);  // no padding with a window
      s[static_cast<size_t>(b * n + i)] = visible > 0 ? ring.scale(ring.d, visible) : 0.0;
    }
  return s;
}

void scale_rows(Tensor<float>& t, const std::vector<double>& scale) {
  const int64_t n = t.size(Axis::seq), dim = t.size(Axis::dim);
  for (int64_t b = 0; b < t.size(Axis::batch); ++b)
    for (int64_t h = 0; h < t.size(Axis::heads); ++h)
      for (int64_t i = 0; i < n; ++i) {
        const double s = scale[static_cast<size_t>(b * n + i)];
        float* row = &t(b, h, i, 0);
        for (int64_t c = 0; c < dim; ++c) row[c] = static_cast<float>(s * row[c]);
      }
}

int message_count(int64_t elements) { return static_cast<int>(elements); }  // bounded by prepare

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void wait(std::vector<MPI_Request>& requests, RingStats* stats) {
  const double t0 = now();
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  requests.clear();
  if (stats != nullptr) stats->wait_seconds += now() - t0;
}

}  // namespace attnlab::mpi::detail
