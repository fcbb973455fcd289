#!/usr/bin/env bash
# Prints README.md's compile lines (`g++ ...`, continuation lines joined), one a line: the
# install and build-tree checks run them as the README gives them.
set -euo pipefail
sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' "$1/README.md" | grep -E '^g\+\+ '
