#!/bin/sh
# Attention on .npy files, written into the current directory (run it from anywhere). The
# attnlab binary: $ATTNLAB if set, else the build tree beside this script (../build/attnlab,
# after `make`), else `attnlab` on PATH (`make install`).
set -eu
build=$(dirname "$0")/../build/attnlab
if [ -n "${ATTNLAB:-}" ]; then attnlab=$ATTNLAB
elif [ -x "$build" ]; then attnlab=$build
elif command -v attnlab >/dev/null; then attnlab=attnlab
else echo "npy_attention.sh: no attnlab at $build (run make) nor on PATH; set ATTNLAB=/path/to/attnlab" >&2; exit 127
fi

/usr/bin/python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
for name in ("q", "k", "v", "grad_out"):
    np.save(f"{name}.npy", rng.standard_normal((1, 4, 16, 32)).astype(np.float32))  # [B, H, N, d]
np.save("mask.npy", np.tril(np.ones((16, 16), dtype=bool)))  # True = attend
PY

"$attnlab" attention --q q.npy --k k.npy --v v.npy --mask mask.npy --out out.npy --lse lse.npy
"$attnlab" attention-backward --q q.npy --k k.npy --v v.npy --mask mask.npy \
    --grad-out grad_out.npy --dq dq.npy --dk dk.npy --dv dv.npy

/usr/bin/python3 -c "import numpy as np; print(np.load('out.npy').shape, np.load('lse.npy').shape, np.load('dq.npy').dtype)"
