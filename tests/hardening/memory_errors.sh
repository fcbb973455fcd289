#!/usr/bin/env bash
# An experiment asked for more memory than the process may have (`ulimit -v`), or given a
# negative size: an error naming the parameters given and the limit met, never a bare
# "std::bad_alloc" or "cannot create std::vector larger than max_size()" (issue 55); in
# Python a MemoryError with the same words.
# Usage: memory_errors.sh ATTNLAB_CLI PYTHON_PACKAGE_DIR
set -euo pipefail
cli=$1 pythonpath=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "memory_errors: $*" >&2; exit 1; }
for c in "heads seq=16777216" "softcap n=16777216" "jacobian n=16777216" "classifier classes=16777216" \
         "gradflow n_keys=16777216"; do
  e=${c%% *} p=${c#* }
  set +e
  out=$( (ulimit -v 4000000; timeout 120 "$cli" run "$e" --quick --set "$p" --out o 2>&1 > /dev/null) )
  rc=$?
  set -e
  (( rc == 2 )) || fail "$e $p: exit $rc: $out"
  msg=$(grep 'attnlab: error' <<< "$out" || true)
  [[ "$msg" == *"$p"* && ( "$msg" == *"ulimit -v"* || "$msg" == *"cannot allocate"* || "$msg" == *"out of memory"* ) ]] ||
    fail "$e $p: said '$msg'"
  [[ "$msg" != *"std::bad_alloc"* || "$msg" == *"$p"* ]] || fail "$e $p: a bare std::bad_alloc"
  echo "$e $p: $msg"
done
set +e
out=$("$cli" run gradflow --quick --set table_keys=-1 --out o 2>&1 > /dev/null)
rc=$?
set -e
(( rc == 2 )) && [[ "$out" == *"table_keys: -1 breaks the rule"* ]] || fail "table_keys=-1: exit $rc: $out"
( ulimit -v 4000000
  PYTHONPATH=$pythonpath /usr/bin/python3 - << 'PY'
import attnlab.experiments as ex
try:
    ex.run("heads", quick=True, seq=16777216)
except MemoryError as e:
    assert "seq=16777216" in str(e), e
    print("python:", e)
else:
    raise SystemExit("no MemoryError")
PY
) || fail "python"
echo "memory_errors: ok"
