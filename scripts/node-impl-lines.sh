#!/usr/bin/env bash
# Lines inside `impl<B: Backend> Node<B>` blocks in the data-plane crate (doc comments
# included), per block and in all: the measure of how much the driver still does itself
# (issue 50 wants it under 1,500, the policy being the core's). BENCHMARKS.md records it.
#
#   scripts/node-impl-lines.sh
set -euo pipefail
cd "$(dirname "$0")/../crates/dataplane/src"
grep -rl '^impl<B: Backend> Node<B> {' . | sort | while read -r f; do
  awk -v f="${f#./}" '/^impl<B: Backend> Node<B> \{/ { on = 1; s = NR }
    on && /^\}/ { printf "%-22s %4d-%-4d %4d\n", f, s, NR, NR - s + 1; on = 0 }' "$f"
done | awk '{ print; t += $3 } END { printf "%-22s %9s %4d\n", "total", "", t }'
