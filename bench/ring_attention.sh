#!/usr/bin/env bash
# Ring attention on 2 ranks x 1 thread against the engine in 1 process x 2 threads
# (docs/scale-out.md), interleaved: each round runs every case once in each form, so that both
# forms see the same machine; the FMA peak probe (`attnlab peak --threads 2`) runs before and
# after the rounds, for the fraction of peak. Each line is one round's median of --repeats.
#   bench/ring_attention.sh [build-dir] [seq] [--backward] [rounds]
set -euo pipefail
build=${1:-build} seq=${2:-32768} pass=${3:-} rounds=${4:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bench=$build/attnlab_ring_bench
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/attnlab" peak --threads 2
for ((round = 1; round <= rounds; ++round)); do
  for dim in 64 128; do
    for causal in "" --causal; do
      mpirun --oversubscribe -np 2 --bind-to core "$bench" --seq "$seq" --dim "$dim" --heads 4 $causal $pass --threads 1
      mpirun -np 1 --bind-to none "$bench" --engine --seq "$seq" --dim "$dim" --heads 4 $causal $pass --threads 2
    done
  done
done
"$build/attnlab" peak --threads 2
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
