#!/usr/bin/env bash
# Old binary against new, in one run on one machine: `snic bench dataplane` (all four cases)
# alternating new, old, old, new (ABBA, so that a machine drifting during the run favours
# neither), ROUNDS times, with dpdk-testpmd macswap and the AES-128-GCM seal at 1400 B
# (`snic bench crypto`) before and after as the machine's speed. Prints each run, then the
# median Mpps per case and new/old, then issue 16's two ratios for each binary: `dummy` 64 B
# against testpmd and `vpc` 1400 B against the seal (medians against the peers' means).
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
peers() {
  [ -x "$peer" ] && "$peer" macswap 10 | sed "s/^/peer /" | tee -a "$log"
  "$new" bench crypto --size 1400 | awk '/aes-128-gcm/ {printf "seal {\"mops\":%s}\n", $4}' | tee -a "$log"
}
peers
for _ in $(seq "$rounds"); do run new; run old; run old; run new; done
peers
python3 - "$log" <<'PY'
import collections, json, statistics, sys
runs, peers = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    which, rest = line.split(" ", 1)
    r = json.loads(rest)
    if which == "peer":
        peers["testpmd"].append(r["mpps"])
    elif which == "seal":
        peers["seal"].append(r["mops"])
    else:
        runs[(r["chain"], r["packet_size"], which)].append(r["mpps"])
for chain, size in sorted({(c, s) for c, s, _ in runs}):
    o, n = statistics.median(runs[(chain, size, "old")]), statistics.median(runs[(chain, size, "new")])
    print(f"# {chain} {size} B: old {o:.3f} Mpps, new {n:.3f} Mpps, new/old {n / o:.3f}")
goals = [("dummy", 64, "testpmd", 0.5), ("vpc", 1400, "seal", 0.6)]
for chain, size, peer, goal in goals:
    if peers[peer] and runs[(chain, size, "new")]:
        p = statistics.mean(peers[peer])
        ratios = ", ".join(f"{w} {statistics.median(runs[(chain, size, w)]) / p:.3f}" for w in ("old", "new"))
        print(f"# {chain} {size} B against {peer} ({p:.3f}, mean of {len(peers[peer])}): {ratios} (goal {goal})")
PY
