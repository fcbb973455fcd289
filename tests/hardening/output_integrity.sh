#!/usr/bin/env bash
# An output directory as a hostile user or an unlucky machine meets it (issue 55):
# - a full file system: a figure gnuplot could not finish (it reports no error) fails the run
#   before the swap, and an earlier output stays whole (needs root for a small tmpfs; 77 = skip);
# - an output file of the same run inside its output directory (--json DIR/data/x.csv, the
#   manifest, DIR itself) is refused before any work, and nothing is created or changed;
# - SIGINT, SIGTERM or SIGHUP while `report` or `run` builds leaves no hidden ".DIR.tmp-PID".
# Usage: output_integrity.sh ATTNLAB_CLI SCRATCH_DIR
set -euo pipefail
cli=$(realpath "$1") dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail() { echo "output_integrity: $*" >&2; exit 1; }

# --json inside --out, however spelled; --json that is --out.
"$cli" run saturation --quick --out J > /dev/null 2>&1
cp -a J J.before
for inside in J/data/saturation_bars.csv J/.attnlab-manifest J/res.json J/ ./J/../J/x.json; do
  if out=$("$cli" run saturation --quick --out J --json "$inside" 2>&1); then fail "--json $inside was accepted"; fi
  [[ "$out" == *"is inside the output directory (--out J)"* || "$out" == *"is the output directory (--out J)"* ]] ||
    fail "--json $inside: said '$out'"
  diff -r J J.before > /dev/null || fail "--json $inside changed J"
done
"$cli" run saturation --quick --out J > /dev/null 2>&1 || fail "a run after the refusals was refused"
if "$cli" run saturation --quick --out X --json X > /dev/null 2>&1; then fail "--out X --json X was accepted"; fi
[[ ! -e X ]] || fail "--out X --json X created X"

# A signal a second into the work: no hidden directory, the earlier output as it was.
set -m  # background jobs keep SIGINT (a non-interactive shell would start them ignoring it)
"$cli" run saturation --quick --out R > /dev/null 2>&1
cp -a R R.before
for sig in INT TERM HUP; do
  for cmd in "report --quick --only saturation,jacobian,variance,heads" "run heads --quick"; do
    # shellcheck disable=SC2086
    "$cli" $cmd --out R > /dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do [[ -d .R.tmp-$pid ]] && break; sleep 0.1; done
    sleep 1
    kill -s "$sig" "$pid" 2> /dev/null || true
    rc=0
    wait "$pid" 2> /dev/null || rc=$?
    left=$(ls -A | grep -E '^\.R\.(tmp|old)-' || true)
    [[ -z "$left" ]] || fail "SIG$sig during '$cmd' left $left"
    if (( rc > 128 )); then  # ended by the signal: the earlier output as it was
      diff -r R R.before > /dev/null || fail "SIG$sig during '$cmd' changed R"
    else  # it finished first: its output is the earlier one of the next round
      rm -rf R.before && cp -a R R.before
    fi
  done
done
set +m

# A full file system (300 KiB): the run fails naming the file, and the earlier output stays.
mkdir -p fs
if ! mount -t tmpfs -o size=300k tmpfs fs 2> /dev/null; then
  echo "output_integrity: ok (no tmpfs mount here: the full file system case skipped)"
  exit 77
fi
trap 'umount "$dir/fs" 2> /dev/null || true' EXIT
"$cli" run saturation --quick --out fs/R > /dev/null 2>&1 && fail "a run on a full file system exited 0"
out=$("$cli" run saturation --quick --out fs/R 2>&1) || true
[[ "$out" == *"was not written whole"* || "$out" == *"is the file system full?"* || "$out" == *"No space left"* ]] ||
  fail "full file system: said '$out'"
if ls -A fs | grep -E '^\.R\.(tmp|old)-' > /dev/null; then fail "full file system: a hidden directory was left"; fi
umount fs
mount -t tmpfs -o size=2m tmpfs fs
"$cli" run saturation --quick --out fs/R > /dev/null 2>&1 || fail "a run with room failed"
cp -a fs/R R.whole
dd if=/dev/zero of=fs/filler bs=1k count=$(( $(df -k --output=avail fs | tail -1) - 100 )) 2> /dev/null || true
"$cli" run saturation --quick --out fs/R > /dev/null 2>&1 && fail "a run on a full file system exited 0 (replacing)"
diff -r fs/R R.whole > /dev/null || fail "a failed run on a full file system changed the earlier output"
echo "output_integrity: ok"
