#!/usr/bin/env bash
# Usage: require_torch.sh PYTHON COMMAND [ARGS...]
# Runs COMMAND when PYTHON can import torch; otherwise says why and exits 77, which the
# ctest entries that use it declare as SKIP_RETURN_CODE (reported as skipped, not passed).
set -u
python=$1
shift
if ! why=$("$python" -c "import torch" 2>&1); then
  echo "skipped: $python cannot import torch (python3-torch is optional in scripts/debian-packages.txt): ${why##*$'\n'}"
  exit 77
fi
exec "$@"
