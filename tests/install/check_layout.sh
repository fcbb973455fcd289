#!/usr/bin/env bash
# The architecture's boundary (issue 13): only the library's own targets (src/) see src/;
# tests of internals, tools, bench and python reach internals through the testing
# library attnlab_internals, never by an include path into src/. Exit 1 naming the lines.
set -euo pipefail
root="$1"
hits=$(cd "$root" && grep -rnE --include=CMakeLists.txt '(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)\}/src' \
         tests tools bench python examples 2>/dev/null || true)
if [[ -n "$hits" ]]; then
  echo "an include path into src/ outside the library (link attnlab_internals instead):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no include path into src/ outside the library"
