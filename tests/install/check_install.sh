#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and
# runs a consumer project that finds it with find_package(attnlab).
set -euo pipefail
build_dir=$1 source_dir=$2 cxx_flags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$source_dir/tests/install/consumer" -B "$work/consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$cxx_flags" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
# Check output and exit status here: ctest ignores the exit status of a test
# that has a PASS_REGULAR_EXPRESSION, so the script must fail by itself.
out=$("$work/consumer/consumer")
echo "$out"
grep -q "error: k: head dim 4 does not match q's 8" <<< "$out" || { echo "consumer output is wrong" >&2; exit 1; }
test -x "$work/prefix/bin/attnlab"
# The installed program must start without LD_LIBRARY_PATH (install RPATH).
env -u LD_LIBRARY_PATH "$work/prefix/bin/attnlab" --version
env -u LD_LIBRARY_PATH "$work/prefix/bin/attnlab" demo > /dev/null
echo "install check passed"
