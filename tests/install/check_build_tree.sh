#!/usr/bin/env bash
# The build tree as a package and as a compile line, without installing: a consumer project
# configured with attnlab_DIR=<build dir>, and README.md's build-tree compile line run from a
# copy of the repository's layout (include/, examples/, build/).
set -euo pipefail
build_dir=$1 source_dir=$2 cxx_flags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$source_dir/tests/install/consumer" -B "$work/consumer" -G Ninja -Dattnlab_DIR="$build_dir" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$cxx_flags" \
      > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
out=$("$work/consumer/consumer_engine")
echo "$out"
grep -Eq "^out -?[0-9.]+  lse [0-9.]+  dk" <<< "$out" || { echo "consumer_engine against the build tree failed" >&2; exit 1; }

line=$("$source_dir/tests/install/readme_compile_lines.sh" "$source_dir" | grep -- '-I build/include')
mkdir "$work/repo"
ln -s "$source_dir/include" "$work/repo/include"
ln -s "$source_dir/examples" "$work/repo/examples"
ln -s "$build_dir" "$work/repo/build"
echo "$line"
(cd "$work/repo" && eval "$line $cxx_flags") || { echo "README's build-tree compile line failed" >&2; exit 1; }
out=$(env -u LD_LIBRARY_PATH "$work/repo/engine_attention")
echo "$out"
grep -Eq "^out -?[0-9.]+  lse [0-9.]+  dk" <<< "$out" || { echo "README's build-tree program failed" >&2; exit 1; }
echo "build tree check passed"
