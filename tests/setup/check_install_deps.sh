#!/usr/bin/env bash
# scripts/install-deps --check runs, on every machine, the functions that decide whether a
# package is installed and whether apt can install it. Issue 12: those functions once said
# "cannot be had" for every package, and no machine with everything installed ever ran them.
# Here they must (1) find every listed package, and (2) say no to a package that does not exist,
# so a check that always says yes fails too.
set -euo pipefail
src=$1
deps="$src/scripts/install-deps"
fail() { echo "FAIL: $*" >&2; exit 1; }

report=$("$deps" --check) || fail "install-deps --check exited $? on the project's own list:"$'\n'"$report"
echo "$report"
while read -r name flag _; do
  [[ -z "${name:-}" || "$name" == \#* ]] && continue
  line=$(grep -E "^$name " <<< "$report") || fail "--check did not report $name"
  [[ "$line" == *"(none)"* && "${flag:-}" != optional ]] && fail "required package without a candidate: $line"
  [[ "$line" == *" yes "* || "$line" == *"would install"* || "${flag:-}" == optional ]] \
    || fail "neither installed nor installable: $line"
done < "$src/scripts/debian-packages.txt"

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'bash\nattnlab-no-such-package-xyz\nattnlab-no-such-optional-xyz optional\n' > "$tmp/list"
set +e; bogus=$(ATTNLAB_DEPS_LIST="$tmp/list" "$deps" --check); rc=$?; set -e
echo "$bogus"
[[ $rc -eq 1 ]] || fail "--check exited $rc, not 1, for a required package that does not exist"
[[ "$bogus" == *"attnlab-no-such-package-xyz"*"CANNOT BE HAD"* ]] || fail "the missing required package was not named"
[[ "$bogus" == *"attnlab-no-such-optional-xyz"*"would skip"* ]] || fail "the missing optional package was not skipped"
[[ "$(grep -E '^bash ' <<< "$bogus")" == *" yes "* ]] || fail "bash was not seen as installed"

set +e; out=$("$deps" --bogus-flag 2>&1); rc=$?; set -e
[[ $rc -eq 2 && "$out" == *"unknown argument"* ]] || fail "a bad flag gave exit $rc: $out"
echo "install-deps --check: every listed package found; a missing one is named"
