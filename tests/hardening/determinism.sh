#!/usr/bin/env bash
# Determinism through the command line:
#  * attention and attention-backward give bitwise identical .npy files for
#    --threads 1, 2 and 3 (3 oversubscribes this 2-core machine) and on a repeat;
#  * the lab's report data (every CSV) is byte-identical for the same seed.
# Usage: determinism.sh ATTNLAB_BINARY WORK_DIR
set -euo pipefail
attnlab=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"

/usr/bin/python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(7)
# N = 300 is not a multiple of any tile size; GQA 4 query heads on 2 K/V heads.
np.save("q.npy", rng.standard_normal((2, 4, 300, 64)).astype(np.float32))
for name in ("k", "v"):
    np.save(f"{name}.npy", rng.standard_normal((2, 2, 300, 64)).astype(np.float32))
np.save("grad_out.npy", rng.standard_normal((2, 4, 300, 64)).astype(np.float32))
PY

run() {  # run TAG THREADS
  "$attnlab" attention --q q.npy --k k.npy --v v.npy --causal --out "out-$1.npy" --lse "lse-$1.npy" --threads "$2"
  "$attnlab" attention-backward --q q.npy --k k.npy --v v.npy --causal --grad-out grad_out.npy \
      --dq "dq-$1.npy" --dk "dk-$1.npy" --dv "dv-$1.npy" --threads "$2"
}
run t1 1; run t2 2; run t3 3; run t2again 2
for f in out lse dq dk dv; do
  for tag in t2 t3 t2again; do
    cmp "$f-t1.npy" "$f-$tag.npy" || { echo "determinism: $f differs between --threads 1 and $tag" >&2; exit 1; }
  done
done
echo "attention: bitwise identical for --threads 1, 2, 3 and on a repeat"

"$attnlab" report --quick --seed 11 --out report-a > /dev/null 2>&1
"$attnlab" report --quick --seed 11 --out report-b > /dev/null 2>&1
diff -r report-a/data report-b/data > /dev/null || { echo "determinism: report data differ for the same seed" >&2;
  diff -rq report-a/data report-b/data >&2; exit 1; }
count=$(ls report-a/data | wc -l)
[[ $count -gt 5 ]] || { echo "determinism: only $count data files" >&2; exit 1; }
echo "report: $count data files byte-identical for the same seed"
