#!/usr/bin/env bash
# `attnlab bench` as a program, not as a measurement (no test asserts a speed):
# a tiny run writes the JSON that issue #3 specifies, with FLOPs counted as
# documented, and bad flags are errors that name the flag and leave an earlier
# JSON file as it was.
# Usage: bench_smoke.sh ATTNLAB_CLI WORK_DIR
set -euo pipefail
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
json=$dir/bench.json

# LibTorch is an optional peer; attnlab and OpenBLAS are always there.
"$cli" bench --batch 1 --heads 2 --seq 48 --dim 16 --causal --threads 2 --repeats 2 --settle-ms 0 \
  --impls attnlab,openblas --json "$json" > "$dir/table.txt"
grep -q '^attnlab   forward' "$dir/table.txt"
/usr/bin/python3 - "$json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["peak_gflops"] > 0 and j["threads"] == 2, j
rows = j["results"]
assert sorted((r["impl"], r["pass"]) for r in rows) == sorted(
    (i, p) for i in ("attnlab", "openblas") for p in ("forward", "backward")), rows
keys = {"impl", "pass", "batch", "heads", "seq", "dim", "causal", "median_ms", "gflops", "peak_fraction", "max_rss_mb"}
for r in rows:
    assert set(r) == keys, set(r) ^ keys
    assert (r["batch"], r["heads"], r["seq"], r["dim"], r["causal"]) == (1, 2, 48, 16, True), r
    assert r["median_ms"] > 0 and r["max_rss_mb"] > 0, r
    # 4·N²·d per head forward, 10·N²·d backward, halved for causal
    flops = (4 if r["pass"] == "forward" else 10) * 48 * 48 * 16 * 2 / 2
    assert abs(r["gflops"] * r["median_ms"] * 1e6 / flops - 1) < 1e-9, r
    assert abs(r["peak_fraction"] * j["peak_gflops"] / r["gflops"] - 1) < 1e-9, r
PY

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
expect_error 'settle-ms.*not in range' --seq 8 --impls attnlab --settle-ms -1
expect_error 'Could not convert.*--threads' --seq 8 --impls attnlab --threads two
echo "bench smoke test passed"
