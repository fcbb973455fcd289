#!/usr/bin/env bash
# Ring attention on 2 ranks x 1 thread against the engine in 1 process x 2 threads, the two
# forms of each case run one after the other (docs/scale-out.md):
#   bench/ring_attention.sh [build-dir] [seq] [--backward]
set -euo pipefail
build=${1:-build} seq=${2:-32768} pass=${3:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bench=$build/attnlab_ring_bench
for dim in 64 128; do
  for causal in "" --causal; do
    mpirun --oversubscribe -np 2 --bind-to core "$bench" --seq "$seq" --dim "$dim" --heads 4 $causal $pass --threads 1
    mpirun -np 1 --bind-to none "$bench" --engine --seq "$seq" --dim "$dim" --heads 4 $causal $pass --threads 2
  done
done
