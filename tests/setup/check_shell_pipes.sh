#!/usr/bin/env bash
# Under `set -o pipefail`, `producer | grep -q`, `| head` or `| grep -m N` fail at random: the reader
# exits at its first match and the producer dies of SIGPIPE (status 141), which pipefail reports
# as the pipeline's status. This bit the project twice (install-deps, the install test). Every
# shell script in the repository that turns pipefail on must capture output first and match it
# afterwards.
set -euo pipefail
src=$1
cd "$src"
bad=0
while IFS= read -r -d '' f; do
  head_line=$(sed -n 1p "$f")
  [[ "$f" == *.sh || "$head_line" == '#!'*sh* ]] || continue
  body=$(<"$f")
  [[ "$body" == *pipefail* ]] || continue
  lineno=0
  while IFS= read -r line; do
    lineno=$((lineno + 1))
    code=${line%%#*}                       # comments may name the pattern
    if [[ "$code" =~ \|[[:space:]]*(grep[[:space:]]+(-[a-zA-Z]*[qm]|--quiet|--max-count)|head([[:space:]]|$)) ]]; then
      echo "$f:$lineno: early-exiting reader in a pipeline under pipefail: $line" >&2
      bad=1
    fi
  done <<< "$body"
done < <(git ls-files -z -- '*.sh' scripts .ci 2>/dev/null || find . -name '*.sh' -print0)
[[ $bad -eq 0 ]] && echo "no early-exiting readers in pipelines under pipefail"
exit $bad
