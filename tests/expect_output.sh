#!/usr/bin/env bash
# Usage: expect_output.sh STATUS REGEX COMMAND [ARGS...]
# Runs COMMAND and passes only if it exits with STATUS *and* its output
# (stdout and stderr) matches the extended regular expression REGEX.
# (ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status, so a program
# that printed the right line and then crashed would pass.)
set -u
want_status=$1 regex=$2
shift 2
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [[ $status -ne $want_status ]]; then
  echo "expect_output: exit status $status, expected $want_status" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<< "$out"; then
  echo "expect_output: output does not match /$regex/" >&2
  exit 1
fi
