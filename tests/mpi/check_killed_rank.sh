#!/usr/bin/env bash
# A rank killed (SIGKILL) inside a long ring must end the whole job, promptly and with a
# message naming the dead rank: the survivors, blocked in MPI, must not hang.
set -uo pipefail
mpirun=$1 program=$2
limit=60
start=$(date +%s)
out=$(timeout --kill-after=10 "$limit" "$mpirun" --oversubscribe -np 3 "$program" --kill-rank 1 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
echo "mpirun exited $rc after ${elapsed}s"
if [[ $rc -eq 0 ]]; then echo "FAIL: the job succeeded without rank 1" >&2; exit 1; fi
if [[ $rc -eq 124 || $elapsed -ge $limit ]]; then echo "FAIL: the job hung until the ${limit}s timeout" >&2; exit 1; fi
if [[ "$out" != *"rank 1"*"signal 9"* ]]; then echo "FAIL: no message naming rank 1 and its signal" >&2; exit 1; fi
echo "a killed rank ended the job in ${elapsed}s"
