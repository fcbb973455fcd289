#!/usr/bin/env bash
# `attnlab attention[-backward] --context-parallel` under mpirun equals the one-process
# command (within the engine's rounding: the ring sums in another order), and a lead that
# cannot read its input stops every rank with its message.
set -euo pipefail
mpirun=$1 attnlab=$2 ranks=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
/usr/bin/python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(46)
for name, shape in [("q", (2, 4, 37, 16)), ("k", (2, 2, 37, 16)), ("v", (2, 2, 37, 16)), ("g", (2, 4, 37, 16))]:
    np.save(name + ".npy", rng.standard_normal(shape).astype(np.float32))
PY
common=(--q q.npy --k k.npy --v v.npy --causal --scale entropy_invariant --softcap 5 --sinks 0.5,-1,0,1)
run_mpi() { timeout 120 "$mpirun" --oversubscribe -np "$ranks" "$attnlab" "$@"; }
"$attnlab" attention "${common[@]}" --out o1.npy --lse l1.npy
run_mpi attention "${common[@]}" --context-parallel --out oP.npy --lse lP.npy
"$attnlab" attention-backward "${common[@]}" --grad-out g.npy --dq dq1.npy --dk dk1.npy --dv dv1.npy --dsinks ds1.npy
run_mpi attention-backward "${common[@]}" --context-parallel --grad-out g.npy --dq dqP.npy --dk dkP.npy --dv dvP.npy \
  --dsinks dsP.npy
# The window and ALiBi (each block placed in the sequence by the ring), causal and not.
placed=(--q q.npy --k k.npy --v v.npy --window 6,2 --alibi-slopes 0.5,0.25,0.125,0.0625)
"$attnlab" attention "${placed[@]}" --out ow1.npy --lse lw1.npy
run_mpi attention "${placed[@]}" --context-parallel --out owP.npy --lse lwP.npy
"$attnlab" attention-backward "${placed[@]}" --causal --grad-out g.npy --dq dqw1.npy --dk dkw1.npy --dv dvw1.npy
run_mpi attention-backward "${placed[@]}" --causal --context-parallel --grad-out g.npy --dq dqwP.npy --dk dkwP.npy \
  --dv dvwP.npy
/usr/bin/python3 - <<'PY'
import numpy as np, sys
# 1e-5 of the largest value: the two differ by a few float32 roundings (measured ~1e-7).
for name in ["o", "l", "dq", "dk", "dv", "ds", "ow", "lw", "dqw", "dkw", "dvw"]:
    a, b = np.load(name + "1.npy"), np.load(name + "P.npy")
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    err = np.max(np.abs(a - b)) / np.max(np.abs(a))
    print(f"{name}: relative difference {err:.1e}")
    if not err <= 1e-5:
        sys.exit(f"FAIL: {name} differs from the one-process run by {err:.1e} of its largest value")
PY
# bfloat16 files (uint16 bit patterns, --bf16): equal to within one bfloat16 step, the two
# float32 results (a few roundings apart) may round to neighbouring bfloat16 values.
/usr/bin/python3 - <<'PY'
import numpy as np
for name in ["q", "k", "v"]:
    np.save(name + "b.npy", (np.load(name + ".npy").view(np.uint32) >> 16).astype(np.uint16))
PY
bf=(--q qb.npy --k kb.npy --v vb.npy --bf16 --causal)
"$attnlab" attention "${bf[@]}" --out ob1.npy
run_mpi attention "${bf[@]}" --context-parallel --out obP.npy
/usr/bin/python3 - <<'PY'
import numpy as np, sys
a, b = ((np.load(f).astype(np.uint32) << 16).view(np.float32) for f in ("ob1.npy", "obP.npy"))
err = np.max(np.abs(a - b)) / np.max(np.abs(a))
print(f"bfloat16 out: relative difference {err:.1e}")
if not err <= 2.0 ** -7:
    sys.exit(f"FAIL: bfloat16 out differs by {err:.1e}")
PY
# A NaN is named by the rank that holds it and its row of the sequence, on every rank.
/usr/bin/python3 -c "
import numpy as np
q = np.load('q.npy'); q[0, 1, 14, 3] = np.nan; np.save('qn.npy', q)"
set +e
out=$(run_mpi attention --q qn.npy --k k.npy --v v.npy --context-parallel --out never.npy 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && "$out" == *"non-finite value"*"(row 14 of the sequence)"* ]] || fail "a NaN gave exit $rc: $out"
set +e
out=$(run_mpi attention --q missing.npy --k k.npy --v v.npy --context-parallel --out never.npy 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a missing input gave exit $rc"
[[ "$out" == *"missing.npy"* ]] || fail "the missing file was not named: $out"
[[ ! -e never.npy ]] || fail "an output was written"
set +e
out=$(run_mpi attention "${common[@]}" --dropout-p 0.1 --context-parallel --out never.npy 2>&1)
rc=$?
set -e
[[ $rc -ne 0 && "$out" == *"not supported across ranks"* ]] || fail "dropout under --context-parallel gave exit $rc: $out"
echo "--context-parallel on $ranks ranks equals the one-process CLI"
