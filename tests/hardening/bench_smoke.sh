#!/usr/bin/env bash
# `attnlab bench` as a program, not as a measurement (no test asserts a speed):
# tiny runs (self-attention, and a grouped-query chunk against a longer cache)
# write the JSON that issues #3, #14 and #15 specify (each result's "dtype"), with FLOPs and K/V bytes counted
# as documented and the peers agreeing with the engine, and bad flags are errors
# that name the flag and leave an earlier JSON file as it was.
# Usage: bench_smoke.sh ATTNLAB_CLI WORK_DIR
set -euo pipefail
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
json=$dir/bench.json

# LibTorch is an optional peer; attnlab and OpenBLAS are always there.
"$cli" bench --batch 1 --heads 2 --seq 48 --dim 16 --causal --threads 2 --repeats 2 --settle-ms 0 \
  --impls attnlab,openblas --json "$json" > "$dir/table.txt"
grep -q '^attnlab   f32   forward' "$dir/table.txt"
# A decoding-like shape: grouped-query heads, 3 new queries at the end of a 300-key cache.
# This run and the --dtype one reuse the first run's probes (--probes FILE): measuring them
# takes seconds a run, a minute under the sanitizers, and the first run has checked it.
"$cli" bench --batch 2 --heads 6 --kv-heads 2 --seq-q 3 --seq-k 300 --dim 16 --causal --causal-align bottom_right \
  --threads 2 --repeats 1 --settle-ms 0 --cold --evict-llc --probes "$json" --impls attnlab,openblas --json "$dir/gqa.json" > "$dir/gqa.txt"
grep -q '^read bound: .*(cold: the first call after it)' "$dir/gqa.txt"
# --evict-llc: said in the header and the JSON (false without it, in the first run).
grep -Eq '^last-level cache evicted before each timed forward and read bound: [0-9]+ MiB of other data' "$dir/gqa.txt"
if grep -q '^last-level cache evicted' "$dir/table.txt"; then echo "evicted without --evict-llc" >&2; exit 1; fi
grep -q '^read bound: .*and 20 ms of untimed reads' "$dir/table.txt"
# The page report: which pages K and V sit in, and the kernel's mode.
grep -Eq '^K and V in (4 KiB pages|2 MiB pages|pages unknown).* \(transparent huge pages: ' "$dir/table.txt"
/usr/bin/python3 - "$json" "$dir/gqa.json" <<'PY'
import json, math, sys
keys = {"impl", "dtype", "speedup_vs_f32", "pass", "batch", "heads", "kv_heads", "seq", "seq_q", "seq_k", "dim", "causal", "causal_align",
        "median_ms", "gflops", "peak_fraction", "kv_gbps", "bandwidth_fraction", "read_bound_fraction", "kv_gbps_cpu",
        "bandwidth_fraction_cpu", "max_rss_mb", "max_abs_diff", "bf16_dot_peak_fraction"}
def check(path, shape, pairs, keys_read):
    j = json.load(open(path))
    assert j["peak_gflops"] > 0 and j["bandwidth_gbps"] > 0 and j["bandwidth_gbps_cpu"] > 0 and j["threads"] == 2, j
    assert j["read_bound_gbps"] > 0, j
    # the bfloat16 dot-product peak exactly where the CPU has AVX512_BF16 (no bfloat16 rows here)
    has_bf16 = "avx512_bf16" in open("/proc/cpuinfo").read().split()
    assert (j["bf16_dot_peak_gflops"] > 0 and j["bf16_dot_peak_gflops_cpu"] > 0) if has_bf16 else (
        j["bf16_dot_peak_gflops"] is None and j["bf16_dot_peak_gflops_cpu"] is None), j
    assert j["bandwidth_plain_gbps"] > 0 and j["read_reader"] in (
        "1 stream, loads alone", "1 stream, 4 multiply-adds per vector",
        "2 streams, loads alone", "2 streams, 4 multiply-adds per vector"), j
    assert j["kv_pages"] in ("4 KiB pages", "2 MiB pages", "pages unknown") or j["kv_pages"].startswith("2 MiB pages ("), j
    assert j["transparent_huge_pages"] in ("always", "madvise", "never", ""), j
    assert j["diff_reference"] == "attnlab" and len(j["load_average"]) == 3, j
    rows = j["results"]
    assert sorted((r["impl"], r["pass"]) for r in rows) == sorted(
        (i, p) for i in ("attnlab", "openblas") for p in ("forward", "backward")), rows
    assert all(r["dtype"] == "f32" and r["speedup_vs_f32"] is None for r in rows), rows
    B, Hq, Hkv, Nq, Nk, d, align = shape
    for r in rows:
        assert set(r) == keys, set(r) ^ keys
        assert (r["batch"], r["heads"], r["kv_heads"], r["seq_q"], r["seq_k"], r["dim"], r["causal_align"]) == shape, r
        assert r["seq"] == (Nq if Nq == Nk else None) and r["causal"] == (align != "none"), r
        assert r["median_ms"] > 0 and r["max_rss_mb"] > 0, r
        # 4·d FLOPs per visible (query, key) pair and query head forward, 10·d backward
        flops = (4 if r["pass"] == "forward" else 10) * d * B * Hq * pairs
        assert abs(r["gflops"] * r["median_ms"] * 1e6 / flops - 1) < 1e-9, r
        assert abs(r["peak_fraction"] * j["peak_gflops"] / r["gflops"] - 1) < 1e-9, r
        assert r["bf16_dot_peak_fraction"] is None, r
        # the K and V rows some query sees, d floats each, per key/value head
        kv_bytes = 2 * B * Hkv * keys_read * d * 4
        assert abs(r["kv_gbps"] * r["median_ms"] * 1e6 / kv_bytes - 1) < 1e-9, r
        assert abs(r["bandwidth_fraction"] * j["bandwidth_gbps"] / r["kv_gbps"] - 1) < 1e-9, r
        assert abs(r["bandwidth_fraction_cpu"] * j["bandwidth_gbps_cpu"] / r["kv_gbps_cpu"] - 1) < 1e-9, r
        # against the read of K and V timed in the same rounds
        assert abs(r["read_bound_fraction"] * j["read_bound_gbps"] / r["kv_gbps"] - 1) < 1e-9, r
        # the peer computes the same attention (GQA, Nq != Nk, the causal alignment)
        assert r["max_abs_diff"] < 1e-4 and (r["impl"] != "attnlab" or r["max_abs_diff"] == 0), r
assert json.load(open(sys.argv[1]))["llc_evicted"] is False and json.load(open(sys.argv[2]))["llc_evicted"] is True
# top-left causal, N = 48: row i sees i + 1 keys
check(sys.argv[1], (1, 2, 2, 48, 48, 16, "top_left"), 48 * 49 // 2, 48)
# bottom-right, Nq = 3, Nk = 300: rows see 298, 299, 300 keys
check(sys.argv[2], (2, 6, 2, 3, 300, 16, "bottom_right"), 298 + 299 + 300, 300)
PY

# --dtype: the engine in each element type, interleaved; K/V bytes of the type; the 16-bit
# runs' speed relative to float32's; results within the type's rounding of float32's.
"$cli" bench --batch 1 --heads 2 --seq-q 2 --seq-k 600 --dim 16 --threads 2 --repeats 2 --settle-ms 0 \
  --probes "$json" --impls attnlab --dtype f32,bf16,f16 --json "$dir/dtype.json" > "$dir/dtype.txt"
grep -q '^attnlab   bf16  forward' "$dir/dtype.txt"
/usr/bin/python3 - "$dir/dtype.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = {(r["dtype"], r["pass"]): r for r in j["results"]}
assert sorted(rows) == sorted((t, p) for t in ("f32", "bf16", "f16") for p in ("forward", "backward")), rows
assert j["diff_reference"] == "attnlab", j
for (t, p), r in rows.items():
    assert r["impl"] == "attnlab", r
    size = 4 if t == "f32" else 2
    kv_bytes = 2 * 1 * 2 * 600 * 16 * size
    assert abs(r["kv_gbps"] * r["median_ms"] * 1e6 / kv_bytes - 1) < 1e-9, r
    if t == "f32":
        assert r["speedup_vs_f32"] is None and r["max_abs_diff"] == 0, r
    else:
        f32 = rows[("f32", p)]
        assert abs(r["speedup_vs_f32"] * r["median_ms"] / f32["median_ms"] - 1) < 1e-9, r
        assert 0 < r["max_abs_diff"] < (0.05 if t == "bf16" else 0.01), r
    # the engine's bfloat16 rows against the bfloat16 dot-product peak, where the CPU has one
    if t == "bf16" and j["bf16_dot_peak_gflops"] is not None:
        assert abs(r["bf16_dot_peak_fraction"] * j["bf16_dot_peak_gflops"] / r["gflops"] - 1) < 1e-9, r
    else:
        assert r["bf16_dot_peak_fraction"] is None, r
PY

# LibTorch's peer, where it was built: in bfloat16 too when bf16 is asked, the same attention
# within bfloat16's roundings.
# Under the sanitizers LeakSanitizer's exit scan crashes once LibTorch (not built with them) is
# loaded ("Tracer caught signal 11"): memory errors are still caught, leaks not checked.
if [[ -e "$(dirname "$cli")/libattnlab_torch_peer.so" ]]; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$cli" bench --batch 1 --heads 2 --seq 40 --dim 16 --causal --threads 2 --repeats 1 --settle-ms 0 --probes skip \
    --impls attnlab,libtorch --dtype f32,bf16 --json "$dir/torch16.json" > "$dir/torch16.txt"
  /usr/bin/python3 - "$dir/torch16.json" <<'PY'
import json, sys
rows = {(r["impl"], r["dtype"], r["pass"]): r for r in json.load(open(sys.argv[1]))["results"]}
assert sorted(rows) == sorted((i, t, p) for i in ("attnlab", "libtorch") for t in ("f32", "bf16")
                              for p in ("forward", "backward")), sorted(rows)
for (i, t, p), r in rows.items():
    assert r["max_abs_diff"] < (0.05 if t == "bf16" else 1e-4), r
PY
fi

cp "$json" "$dir/before.json"
expect_error() {  # expect_error REGEX ARGS...: fails, says REGEX, and bench.json is untouched
  local regex=$1
  shift
  if out=$("$cli" bench --dim 4 --json "$json" "$@" 2>&1); then
    echo "bench $*: succeeded, expected an error" >&2
    exit 1
  fi
  grep -Eq -- "$regex" <<< "$out" || { echo "bench $*: said '$out', expected /$regex/" >&2; exit 1; }
  cmp -s "$json" "$dir/before.json" || { echo "bench $*: changed $json" >&2; exit 1; }
}
expect_error 'repeats must be at least 1, got 0' --seq 8 --impls attnlab --repeats 0
expect_error 'seq must be at least 1, got 0' --seq 0 --impls attnlab
expect_error "unknown implementation 'foo'" --seq 8 --impls foo
expect_error 'settle-ms: -1 is outside \[0, 10000\]' --seq 8 --impls attnlab --settle-ms -1
expect_error 'Could not convert.*--threads' --seq 8 --impls attnlab --threads two
expect_error 'kv-heads 3 must divide --heads 4' --seq 8 --heads 4 --kv-heads 3 --impls attnlab
expect_error 'seq-k must be at least 1 \(or 0: as --seq\), got -2' --seq 8 --seq-k -2 --impls attnlab
expect_error "unknown --dtype 'f64' \\(f32, bf16, f16\\)" --seq 8 --impls attnlab --dtype f32,f64
expect_error 'causal-align given without --causal' --seq 8 --causal-align bottom_right --impls attnlab
expect_error "causal-align must be top_left or bottom_right, got 'diagonal'" --seq 8 --causal --causal-align diagonal \
  --impls attnlab
echo "bench smoke test passed"
