#!/usr/bin/env bash
# `attnlab attention --context-parallel` where one rank cannot allocate its shard (its address
# space limited to 400 MB, its share of the problem ~0.6 GB, while starting takes < 250 MB):
# that rank must end the whole job with a message naming it, not leave rank 0 waiting in MPI.
set -uo pipefail
mpirun=$1 attnlab=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
/usr/bin/python3 -c "import numpy as np; np.save('x.npy', np.ones((1, 8, 65536, 64), np.float32))"
args=(attention --q x.npy --k x.npy --v x.npy --out out.npy --context-parallel)
start=$(date +%s)
out=$(timeout --kill-after=10 60 "$mpirun" --oversubscribe -np 1 "$attnlab" "${args[@]}" : \
      -np 1 sh -c 'ulimit -v 400000; exec "$0" "$@"' "$attnlab" "${args[@]}" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$out" | sed -n 1,5p
echo "mpirun exited $rc after ${elapsed}s"
[[ $rc -ne 0 && $rc -ne 124 && $elapsed -lt 60 ]] || { echo "FAIL: the job did not end promptly" >&2; exit 1; }
[[ "$out" == *"rank 1: out of memory; ending the job"* ]] || { echo "FAIL: no message naming rank 1" >&2; exit 1; }
[[ ! -e out.npy ]] || { echo "FAIL: an output was written" >&2; exit 1; }
