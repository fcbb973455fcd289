#!/usr/bin/env bash
# Usage: check_distributed_lab.sh MPIRUN NP ATTNLAB COMMAND...
# Runs `attnlab COMMAND --out one` in one process and `mpirun -np NP attnlab COMMAND --out many`,
# and requires the same output: the same files; data/*.csv and figures/* (PNG and the gnuplot
# script with the figure's data) byte for byte; every .json equal once its timings are taken
# out (the `seconds` fields, and the run time in the train study's note). index.html is only
# required to exist: it prints the date and the timings.
set -uo pipefail
mpirun=$1 np=$2 attnlab=$3
shift 3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$attnlab" "$@" --out "$tmp/one" > "$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; echo "FAIL: one process" >&2; exit 1; }
start=$(date +%s)
timeout --kill-after=10 600 "$mpirun" --oversubscribe -np "$np" "$attnlab" "$@" --out "$tmp/many" > "$tmp/many.log" 2>&1
rc=$?
echo "mpirun -np $np: exit $rc after $(( $(date +%s) - start )) s"
[[ $rc -eq 0 ]] || { cat "$tmp/many.log"; echo "FAIL: mpirun -np $np" >&2; exit 1; }
# Each rank ran a share (its progress lines name it), and only rank 0 wrote.
log=$(<"$tmp/many.log")
for ((r = 1; r < np; ++r)); do
  [[ "$log" == *"rank $r:"* ]] || { echo "FAIL: rank $r reported no work" >&2; exit 1; }
done
# `run` of a sweep divides it: every rank says it trains a share, smaller than the whole.
if [[ "$1" == run ]]; then
  for ((r = 0; r < np; ++r)); do
    [[ "$log" =~ rank\ $r:\ ([0-9]+)\ of\ the\ ([0-9]+)\ runs\ on\ this\ rank ]] ||
      { echo "FAIL: rank $r did not report its share of the runs" >&2; exit 1; }
    (( BASH_REMATCH[1] < BASH_REMATCH[2] )) ||
      { echo "FAIL: rank $r trained ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} runs, not a share" >&2; exit 1; }
  done
fi
files_one=$(cd "$tmp/one" && find . -type f | LC_ALL=C sort)
files_many=$(cd "$tmp/many" && find . -type f | LC_ALL=C sort)
[[ "$files_one" == "$files_many" ]] || { diff <(echo "$files_one") <(echo "$files_many"); echo "FAIL: different files" >&2; exit 1; }
compared=0
while IFS= read -r f; do
  case "$f" in
    ./data/* | ./figures/*) cmp "$tmp/one/$f" "$tmp/many/$f" || { echo "FAIL: $f differs" >&2; exit 1; } ;;
    *.json)
      /usr/bin/python3 - "$tmp/one/$f" "$tmp/many/$f" <<'PY' || { echo "FAIL: $f differs beyond its timings" >&2; exit 1; }
import json, re, sys
def untimed(x):
    if isinstance(x, dict): return {k: untimed(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list): return [untimed(v) for v in x]
    if isinstance(x, str): return re.sub(r"runs in [0-9.]+ s", "runs in T s", x)
    return x
a, b = (untimed(json.load(open(p))) for p in sys.argv[1:])
if a != b:
    print(json.dumps(a, sort_keys=True, indent=1)[:2000]); print(json.dumps(b, sort_keys=True, indent=1)[:2000]); sys.exit(1)
PY
      ;;
    *) continue ;;
  esac
  compared=$((compared + 1))
done <<< "$files_one"
echo "$compared files equal"
(( compared > 0 )) || { echo "FAIL: nothing compared" >&2; exit 1; }
