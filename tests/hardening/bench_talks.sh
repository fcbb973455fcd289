#!/usr/bin/env bash
# `attnlab bench` says what it measures while it measures (on stderr), shows its defaults in
# --help, can skip its probes or reuse an earlier run's, and warns beside its table when a
# fraction exceeds 100 % of its yardstick (issue 60). Never a speed: only what is said.
# Usage: bench_talks.sh ATTNLAB_CLI
set -euo pipefail
cli=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "bench_talks: $*" >&2; exit 1; }
tiny=(--seq 32 --dim 16 --threads 1 --repeats 2 --settle-ms 0 --impls attnlab)

help=$("$cli" bench --help)
for default in '--batch INT=1 ' '--repeats INT=5 ' '--threads INT=0 ' '--seq INT=4096 ' \
               '--impls TEXT,\.\.\.=attnlab,openblas,libtorch' '--probes TEXT=measure '; do
  grep -Eq -- "$default" <<< "$help" || fail "--help does not show $default"
done

"$cli" bench "${tiny[@]}" --json "$dir/first.json" > "$dir/first.txt" 2> "$dir/first.err"
for said in "bench: measuring the FMA peak on 1 threads" "bench: measuring the read bandwidth" \
            "bench: timing 1 implementation runs, 2 rounds" "bench: measuring the FMA peak and the read bandwidth again"; do
  grep -q "$said" "$dir/first.err" || fail "stderr lacks '$said': $(cat "$dir/first.err")"
done

"$cli" bench "${tiny[@]}" --probes skip --json "$dir/skip.json" > "$dir/skip.txt" 2> "$dir/skip.err"
grep -q '^probes skipped (--probes skip)' "$dir/skip.txt" || fail "--probes skip: $(cat "$dir/skip.txt")"
if grep -q "measuring the" "$dir/skip.err"; then fail "--probes skip measured: $(cat "$dir/skip.err")"; fi

"$cli" bench "${tiny[@]}" --probes "$dir/first.json" --json "$dir/reused.json" > "$dir/reused.txt" 2> "$dir/reused.err"
grep -q "^taken from $dir/first.json (--probes)" "$dir/reused.txt" || fail "--probes FILE: $(cat "$dir/reused.txt")"
if grep -q "measuring the" "$dir/reused.err"; then fail "--probes FILE measured: $(cat "$dir/reused.err")"; fi

# A yardstick far below what the engine does: the fraction is over 100 %, and said so.
/usr/bin/python3 - "$dir" << 'PY'
import json, sys
d = sys.argv[1]
first, skip, reused = (json.load(open(f"{d}/{n}.json")) for n in ("first", "skip", "reused"))
assert first["probes"] == "measure" and skip["probes"] == "skip" and reused["probes"] == "reused", (first, skip)
assert all(r["peak_fraction"] is None and r["bandwidth_fraction"] is None for r in skip["results"]), skip
assert reused["peak_gflops"] == first["peak_gflops"] and reused["bandwidth_gbps"] == first["bandwidth_gbps"]
low = dict(first, peak_gflops=1e-6, peak_gflops_cpu=1e-6, bandwidth_gbps=1e-9)
json.dump(low, open(f"{d}/low.json", "w"))
json.dump({"peak_gflops": "fast"}, open(f"{d}/bad.json", "w"))
PY
"$cli" bench "${tiny[@]}" --probes "$dir/low.json" --json "$dir/low_run.json" > "$dir/low.txt" 2> /dev/null
grep -Eq '^warning: attnlab f32 forward runs at [0-9]+ % of the measured FMA peak' "$dir/low.txt" ||
  fail "no warning of a fraction over 100 %: $(cat "$dir/low.txt")"
/usr/bin/python3 -c "import json,sys; w=json.load(open(sys.argv[1]))['warnings']; assert any('% of the measured FMA peak' in x for x in w), w" \
  "$dir/low_run.json"
if out=$("$cli" bench "${tiny[@]}" --probes "$dir/bad.json" 2>&1); then fail "--probes bad.json was accepted"; fi
[[ "$out" == *'no positive number "peak_gflops"'* ]] || fail "--probes bad.json said: $out"
echo "bench_talks: ok"
