#!/usr/bin/env bash
# `attnlab peak` as a program, not as a measurement (no test asserts a speed):
# the FMA peak (and the bfloat16 dot-product peak, exactly where the CPU has
# AVX512_BF16, with its ratio to the FMAs; elsewhere a line that says it is not available)
# and the read bandwidth (--memory) print a positive, finite figure
# for 1 thread and for all threads (--memory: and names the reader that read fastest),
# and options that would do nothing are errors.
# Usage: peak_smoke.sh ATTNLAB_CLI
set -euo pipefail
cli=$1

check_rows() {  # check_rows OUTPUT COLUMNS [TABLES]: TABLES (1) pairs of rows "1 x..." and "2 x...", every x > 0 and finite
  /usr/bin/python3 - "$1" "$2" "${3:-1}" <<'PY'
import math, re, sys
out, cols, tables = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [l.split() for l in out.splitlines() if re.fullmatch(r"\s*\d+(\s+[-+0-9.eE]+|\s+inf|\s+nan)+\s*", l)]
assert [r[0] for r in rows] == ["1", "2"] * tables, out
for r in rows:
    assert len(r) == 1 + cols, out
    for x in r[1:]:
        v = float(x)
        assert math.isfinite(v) and v > 0, out
PY
}

out=$("$cli" peak --threads 2 --seconds 0.02)
grep -q 'float32 FMA peak' <<< "$out"
if grep -qw avx512_bf16 /proc/cpuinfo; then
  check_rows "$out" 2 2
  grep -q 'bfloat16 dot-product peak, VDPBF16PS' <<< "$out"
  grep -Eq '^bfloat16 dot products over float32 FMAs \(CPU time\): [0-9.]+x on 1 thread, [0-9.]+x on 2$' <<< "$out"
else
  check_rows "$out" 2 1
  if grep -q 'bfloat16 dot-product peak,' <<< "$out"; then echo "a bfloat16 peak without AVX512_BF16" >&2; exit 1; fi
  grep -q '^bfloat16 dot-product peak: not available (this CPU has no AVX512_BF16)$' <<< "$out"
fi

# A small buffer keeps the test quick; it is then partly cached, which is fine here.
out=$("$cli" peak --memory --threads 2 --buffer-mb 16 --passes 2)
# Each row: threads, GB/s wall, GB/s CPU, the plain loop's GB/s, then the best reader's name.
reader='[12] streams?, (loads alone|4 multiply-adds per vector)'
[[ $(grep -cE "^ +[12] .*  $reader\$" <<< "$out") == 2 ]] || { echo "peak --memory: no best reader named on each row" >&2; exit 1; }
check_rows "$(sed -E "s/  $reader\$//" <<< "$out")" 3
grep -Eq 'memory read bandwidth, .* best of 2 passes over a 16 MiB buffer \((4 KiB|2 MiB) pages' <<< "$out"

expect_error() {  # expect_error REGEX ARGS...
  local regex=$1
  shift
  if out=$("$cli" peak "$@" 2>&1); then
    echo "peak $*: succeeded, expected an error" >&2
    exit 1
  fi
  grep -Eq -- "$regex" <<< "$out" || { echo "peak $*: said '$out', expected /$regex/" >&2; exit 1; }
}
expect_error 'passes needs --memory' --passes 3
expect_error 'buffer-mb needs --memory' --buffer-mb 64
expect_error 'seconds applies to the FMA peak' --memory --seconds 0.1
expect_error 'passes: 0 is outside \[1, 1000\]' --memory --passes 0
# 64 GiB is more than a quarter of any memory this runs on: refused, not measured on a smaller buffer.
expect_error '^attnlab: error: peak: --buffer-mb 65536 is more than a quarter of the [0-9]+ MiB this system has available \(MemAvailable\).*use --buffer-mb [0-9]+ or less' \
  --memory --buffer-mb 65536 --passes 1
expect_error "seconds: 'nan' is not a number" --seconds nan  # NaN passes a plain range check, and spun
echo "peak smoke test passed"
