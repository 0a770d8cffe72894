#!/usr/bin/env bash
# Old binary against new, in one run on one machine: `snic bench dataplane` (all four cases)
# alternating new, old, old, new (ABBA, so that a machine drifting during the run favours
# neither), ROUNDS times, with dpdk-testpmd macswap before and after as the machine's speed.
# Prints each run, then the median Mpps per case and new/old.
#
#   scripts/bench-ab.sh OLD_SNIC NEW_SNIC [ROUNDS] [SECONDS]    (defaults: 2 rounds, 2 s per case)
#
# Build the old binary from another commit with its own target directory, e.g.
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p snic)
# and compare /tmp/old-target/release/snic against target/release/snic. Keep the machine
# otherwise quiet while it runs (~1 min per round).
set -euo pipefail
old=${1:?old snic binary}; new=${2:?new snic binary}; rounds=${3:-2}; secs=${4:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
peer=$here/../shared/tools/peer-testpmd
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  local which=$1 bin=$old
  [ "$which" = new ] && bin=$new
  "$bin" bench dataplane --json --seconds "$secs" | sed "s/^/$which /" | tee -a "$log"
}
[ -x "$peer" ] && "$peer" macswap 10
for _ in $(seq "$rounds"); do run new; run old; run old; run new; done
[ -x "$peer" ] && "$peer" macswap 10
python3 - "$log" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    which, rest = line.split(" ", 1)
    r = json.loads(rest)
    runs[(r["chain"], r["packet_size"], which)].append(r["mpps"])
for chain, size in sorted({(c, s) for c, s, _ in runs}):
    o, n = statistics.median(runs[(chain, size, "old")]), statistics.median(runs[(chain, size, "new")])
    print(f"# {chain} {size} B: old {o:.3f} Mpps, new {n:.3f} Mpps, new/old {n / o:.3f}")
PY
