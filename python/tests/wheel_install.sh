#!/usr/bin/env bash
# The Python package as a user builds and installs it (issue 16), checked end to end:
#   1. `python3 -m build --wheel --no-isolation` builds a wheel (setup.py drives CMake);
#   2. the wheel installs, offline, into a fresh `python3 -m venv --system-site-packages`
#      (Debian's numpy and torch come from the system);
#   3. from outside the source tree, with no PYTHONPATH, that venv imports the installed
#      attnlab (not the build tree's), whose __version__ is CMakeLists.txt's project
#      VERSION and the wheel's, and runs python/examples/quickstart.py; attnlab.torch too
#      when torch is installed;
#   4. the extension is one file: libattnlab is linked in (no libattnlab.so needed), and
#      nothing in it points into the source or build tree;
#   5. `python3 -m pip install --no-build-isolation .` installs into a second venv.
# The build reuses setup.py's CMake tree (build-python/) and ccache: seconds when the
# release build has run (same compile commands: ccache hits), minutes from a cold cache.
#
# Usage: wheel_install.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1 python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset PYTHONPATH

version=$(sed -nE 's/^project\(attnlab VERSION ([0-9][0-9.]*).*/\1/p' "$src/CMakeLists.txt")
[[ -n "$version" ]] || fail "no 'project(attnlab VERSION x.y.z' line in CMakeLists.txt"

# 1. The wheel.
start=$SECONDS
if ! "$python" -m build --wheel --no-isolation --outdir "$work/dist" "$src" > "$work/build.log" 2>&1; then
  cat "$work/build.log"
  fail "python3 -m build --wheel --no-isolation failed (log above)"
fi
wheels=("$work"/dist/attnlab-"$version"-*.whl)
[[ -f "${wheels[0]}" ]] || fail "no attnlab-$version-*.whl in dist/: $(ls "$work/dist")"
echo "built $(basename "${wheels[0]}") in $((SECONDS - start)) s"

# 2. A fresh venv, the wheel installed offline.
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-index --no-cache-dir --quiet "${wheels[0]}"

# 3. Imported from the venv, outside the source tree.
cd "$work"
"$work/venv/bin/python" - "$work/venv" "$version" <<'PY'
import importlib.metadata
import sys

import attnlab

venv, version = sys.argv[1], sys.argv[2]
assert attnlab.__file__.startswith(venv + "/"), f"imported {attnlab.__file__}, not the venv's copy"
assert attnlab._attnlab.__file__.startswith(venv + "/"), attnlab._attnlab.__file__
assert attnlab.__version__ == version, (attnlab.__version__, version)
assert importlib.metadata.version("attnlab") == version, importlib.metadata.version("attnlab")
assert "torch" not in sys.modules
print("attnlab", attnlab.__version__, "imports from", attnlab.__file__)
PY
out=$("$work/venv/bin/python" "$src/python/examples/quickstart.py")
echo "$out"
[[ "$out" == "(2, 8, 128, 64) (2, 8, 128) (2, 8, 128, 64) (2, 2, 128, 64)" ]] || fail "quickstart printed: $out"
if "$work/venv/bin/python" -c "import torch" 2> /dev/null; then
  "$work/venv/bin/python" - "$work/venv" <<'PY'
import sys

import torch

import attnlab.torch

assert attnlab.torch.__file__.startswith(sys.argv[1] + "/"), attnlab.torch.__file__
q = torch.randn(1, 2, 16, 8, dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(lambda q: attnlab.torch.scaled_dot_product_attention(q, q, q, is_causal=True), (q,))
print("attnlab.torch from the wheel passes gradcheck")
PY
else
  echo "torch is not installed: attnlab.torch from the wheel not tried"
fi

# 4. One self-contained extension.
ext=("$work"/venv/lib/python3*/site-packages/attnlab/_attnlab*.so)
[[ -f "${ext[0]}" ]] || fail "no extension module installed"
dynamic=$(readelf -d "${ext[0]}")
if [[ "$dynamic" == *libattnlab* ]]; then fail "the extension needs a separate libattnlab:"$'\n'"$dynamic"; fi
if [[ "$dynamic" == *"$src"* ]]; then fail "the extension's RPATH points into the source tree:"$'\n'"$dynamic"; fi

# 5. pip install . (in-tree build, no isolation).
"$python" -m venv --system-site-packages "$work/venv2"
if ! "$work/venv2/bin/python" -m pip install --no-build-isolation --no-index --quiet "$src" > "$work/pip.log" 2>&1; then
  cat "$work/pip.log"
  fail "pip install --no-build-isolation . failed (log above)"
fi
"$work/venv2/bin/python" -c "
import sys, attnlab
assert attnlab.__file__.startswith(sys.argv[1] + '/') and attnlab.__version__ == sys.argv[2], attnlab.__file__
" "$work/venv2" "$version"
echo "wheel and pip install checks passed"
