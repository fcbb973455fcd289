#!/usr/bin/env bash
# The command line's outputs as a user meets them (issue 47): `--out DIR/` is DIR (it
# builds, replaces its own output, and leaves no hidden "..tmp-PID" inside), and the
# temporary files of a process that died are removed beside the next output while
# anything else of the same look stays.
# Usage: out_safety.sh ATTNLAB_CLI SCRATCH_DIR
set -euo pipefail
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"

"$cli" run saturation --quick --out rdir/ > /dev/null 2>&1
test -f rdir/.attnlab-manifest
if [[ "$(ls -A rdir)" == *tmp-* ]]; then echo "a hidden work directory was left in rdir/" >&2; exit 1; fi
"$cli" run saturation --quick --out rdir > /dev/null 2>&1   # its own output: replaced
"$cli" run saturation --quick --out rdir/ > /dev/null 2>&1
listing=$(ls -A .)
if [[ "$listing" == *tmp-* || "$listing" == *old-* ]]; then echo "a hidden work directory was left beside rdir" >&2; exit 1; fi

# PID 2^22 + 1 is above Linux's pid_max: a process that is not alive.
/usr/bin/python3 -c "import numpy as np; q = np.full((1, 2, 4, 8), .25, np.float32); np.save('q.npy', q)"
echo half > .attnlab-4194305-0.tmp
echo mine > .attnlab-notes.tmp
"$cli" attention --q q.npy --k q.npy --v q.npy --out o.npy
test -f o.npy
if [[ -e .attnlab-4194305-0.tmp ]]; then echo "the stale temporary file of a dead process was left" >&2; exit 1; fi
test "$(cat .attnlab-notes.tmp)" = mine
echo "out_safety: ok"
