#!/usr/bin/env bash
# OpenBLAS is loaded only by what multiplies matrices with it (attnlab/blas.hpp): the
# program does not link it, so `--version` under a small memory limit exits at once
# (Debian's OpenBLAS, once loaded, starts threads that could spin at exit for want of
# memory), and `bench --impls openblas` still finds it.
# Usage: blas_on_use.sh ATTNLAB_CLI
set -euo pipefail
cli=$1
libs=$(ldd "$cli")
if [[ "$libs" == *openblas* ]]; then echo "attnlab links OpenBLAS:" >&2; echo "$libs" >&2; exit 1; fi
( ulimit -v 150000; timeout 20 "$cli" --version > /dev/null ) || { echo "--version under ulimit -v 150000 failed or hung" >&2; exit 1; }
bench=$("$cli" bench --impls openblas --seq 64 --dim 16 --repeats 1 --settle-ms 0)
[[ "$bench" == *openblas* ]] || { echo "bench --impls openblas did not run OpenBLAS" >&2; exit 1; }
echo "blas_on_use: ok"
