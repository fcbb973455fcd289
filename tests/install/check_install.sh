#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and
# runs a consumer project that finds it with find_package(attnlab), and (when a
# site directory is given) imports the installed Python package.
set -euo pipefail
build_dir=$1 source_dir=$2 cxx_flags=${3:-} python_site=${4:-}
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
# A mask_mod and score_mod of the caller's, inlined through the installed headers.
out=$("$work/consumer/consumer_mask_mod")
echo "$out"
grep -qx "ok" <<< "$out" || { echo "consumer_mask_mod failed" >&2; exit 1; }
# The README's quick starts: the float32 engine, and decoding against a KV cache.
for quick in consumer_engine consumer_kv_cache consumer_paged_kv_cache; do
  out=$("$work/consumer/$quick")
  echo "$out"
  grep -Eq "^out -?[0-9.]+  lse [0-9.]+" <<< "$out" || { echo "$quick failed" >&2; exit 1; }
done
# README's compile line for an install, run as given with PREFIX set.
line=$("$source_dir/tests/install/readme_compile_lines.sh" "$source_dir" | grep -F -- '-I "$PREFIX/include"')
mkdir "$work/repo"
ln -s "$source_dir/examples" "$work/repo/examples"
echo "$line"
(cd "$work/repo" && PREFIX="$work/prefix" && eval "$line $cxx_flags") || { echo "README's install compile line failed" >&2; exit 1; }
out=$(env -u LD_LIBRARY_PATH "$work/repo/engine_attention")
grep -Eq "^out -?[0-9.]+  lse [0-9.]+  dk" <<< "$out" || { echo "README's install compile line: wrong output" >&2; exit 1; }
test -x "$work/prefix/bin/attnlab"
# The installed library is the attention library only (issue 13): it exports nothing of the
# lab, the training study, .npy I/O or the report, and links neither OpenBLAS, JSON, fmt nor
# anything of plotting. Its headers are the attention API.
lib=$(find "$work/prefix" -name 'libattnlab.so' -print -quit)
[[ -n "$lib" ]] || { echo "no libattnlab.so installed" >&2; exit 1; }
syms=$(nm -D --defined-only -C "$lib")
if grep -E 'attnlab::(lab|train|npy|engine::testing)|report|gnuplot|nlohmann|fmt::' <<< "$syms"; then
  echo "libattnlab.so exports symbols of the applications (above)" >&2; exit 1
fi
grep -q 'attnlab::attention_forward' <<< "$syms" || { echo "libattnlab.so does not export attention_forward" >&2; exit 1; }
if [[ -z "$cxx_flags" ]]; then  # a sanitized build links the sanitizer runtimes too
  deps=$(ldd "$lib")
  if grep -E 'blas|json|fmt|gnuplot|torch|python' <<< "$deps"; then
    echo "libattnlab.so links an application's dependency (above)" >&2; exit 1
  fi
fi
headers=$(ls "$work/prefix/include/attnlab")
if grep -E '^(lab|train|npy)\.hpp$' <<< "$headers"; then echo "application headers installed (above)" >&2; exit 1; fi
# The installed program must start without LD_LIBRARY_PATH (install RPATH).
# One version, CMakeLists.txt's project(VERSION): the installed header and --version say it.
want=$(sed -nE 's/^project\(attnlab VERSION ([0-9.]+).*/\1/p' "$source_dir/CMakeLists.txt")
[[ -n "$want" ]] || { echo "no project(attnlab VERSION ...) in CMakeLists.txt" >&2; exit 1; }
grep -q "^#define ATTNLAB_VERSION_STRING \"$want\"$" "$work/prefix/include/attnlab/version.hpp" ||
  { echo "installed attnlab/version.hpp does not say $want" >&2; exit 1; }
said=$(env -u LD_LIBRARY_PATH "$work/prefix/bin/attnlab" --version)
[[ "$said" == "attnlab $want" ]] || { echo "attnlab --version says '$said', not 'attnlab $want'" >&2; exit 1; }
env -u LD_LIBRARY_PATH "$work/prefix/bin/attnlab" demo > /dev/null
if [[ -n "$python_site" ]]; then
  # The installed extension must find the installed libattnlab by itself (its
  # RPATH), not the build tree's: checked with ldd after the import.
  test -f "$work/prefix/$python_site/attnlab/py.typed"
  env -u LD_LIBRARY_PATH PYTHONPATH="$work/prefix/$python_site" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import sys, numpy as np, attnlab
assert attnlab.__file__.startswith(sys.argv[1]), attnlab.__file__
q = np.ones((1, 1, 4, 8), np.float32)
out, lse = attnlab.attention_forward(q, q, q)
assert out.shape == (1, 1, 4, 8) and np.allclose(out, 1.0), out
print("python package imports from", sys.argv[1])
' "$work/prefix/$python_site"
  # ldd's output is captured first: `ldd | grep -q` under pipefail fails at random
  # when grep exits at the first match and ldd then dies of SIGPIPE.
  libs=$(ldd "$work/prefix/$python_site"/attnlab/_attnlab*.so)
  grep -q "libattnlab.so.0 => $work/prefix/" <<< "$libs" ||
    { echo "installed _attnlab does not load the installed libattnlab:" >&2; echo "$libs" >&2; exit 1; }
fi
echo "install check passed"
