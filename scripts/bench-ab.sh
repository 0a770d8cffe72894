#!/usr/bin/env bash
# Old binary against new, in one run on one machine: `snic bench dataplane` (all four cases)
# alternating new, old, old, new (ABBA, so that a machine drifting during a round favours
# neither), ROUNDS times. Each round starts with the peers, dpdk-testpmd macswap and the
# AES-128-GCM seal at 1400 B (`snic bench crypto`), so that every round has its own measure of
# the machine's speed: on a shared guest it drifts by 10-20% within minutes, and peers taken
# only before and after the whole run made the ratios swing with it.
#
# Prints each run, then per case the median Mpps of each binary and new/old, with new/old's
# range over the rounds; then issue 16's two ratios for each binary, `dummy` 64 B against
# testpmd and `vpc` 1400 B against the seal, as the median (and range) of the rounds' ratios,
# each round's median run against that round's peer.
#
#   scripts/bench-ab.sh OLD_SNIC NEW_SNIC [ROUNDS] [SECONDS]    (defaults: 2 rounds, 2 s per case)
#
# The same binary on both sides (an A/A run) gives the machine's noise: a new/old range that
# does not leave it says nothing. Build the old binary from another commit with its own target
# directory, e.g.
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p snic)
# and compare /tmp/old-target/release/snic against target/release/snic. Keep the machine
# otherwise quiet while it runs (~45 s per round).
set -euo pipefail
old=${1:?old snic binary}; new=${2:?new snic binary}; rounds=${3:-2}; secs=${4:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
peer=$here/../shared/tools/peer-testpmd
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  local round=$1 which=$2 bin=$old
  [ "$which" = new ] && bin=$new
  "$bin" bench dataplane --json --seconds "$secs" | sed "s/^/$round $which /" | tee -a "$log"
}
peers() {
  local round=$1
  if [ -x "$peer" ]; then "$peer" macswap 6 | sed "s/^/$round peer /" | tee -a "$log"; fi
  "$new" bench crypto --size 1400 --seconds "$secs" | awk -v r="$round" '/aes-128-gcm/ {printf "%s seal {\"mops\":%s}\n", r, $4}' | tee -a "$log"
}
for r in $(seq "$rounds"); do peers "$r"; run "$r" new; run "$r" old; run "$r" old; run "$r" new; done
python3 - "$log" <<'PY'
import collections, json, statistics, sys
runs, peers = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    rnd, which, rest = line.split(" ", 2)
    r = json.loads(rest)
    if which == "peer":
        peers[("testpmd", rnd)].append(r["mpps"])
    elif which == "seal":
        peers[("seal", rnd)].append(r["mops"])
    else:
        runs[(r["chain"], r["packet_size"], which, rnd)].append(r["mpps"])
rounds = sorted({k[3] for k in runs}, key=int)
med = statistics.median
def span(xs):
    return f"{min(xs):.3f}-{max(xs):.3f}"
for chain, size in sorted({(k[0], k[1]) for k in runs}):
    every = {w: [x for r in rounds for x in runs[(chain, size, w, r)]] for w in ("old", "new")}
    o, n = med(every["old"]), med(every["new"])
    per_round = [med(runs[(chain, size, "new", r)]) / med(runs[(chain, size, "old", r)]) for r in rounds]
    print(f"# {chain} {size} B: old {o:.3f} Mpps, new {n:.3f} Mpps, new/old {n / o:.3f} (rounds {span(per_round)})")
goals = [("dummy", 64, "testpmd", 0.5), ("vpc", 1400, "seal", 0.6)]
for chain, size, peer, goal in goals:
    have = [r for r in rounds if peers[(peer, r)] and runs[(chain, size, "new", r)]]
    if not have:
        continue
    p = {r: statistics.mean(peers[(peer, r)]) for r in have}
    parts = []
    for w in ("old", "new"):
        ratios = [med(runs[(chain, size, w, r)]) / p[r] for r in have]
        parts.append(f"{w} {med(ratios):.3f} (rounds {span(ratios)})")
    print(f"# {chain} {size} B against {peer} ({med(p.values()):.3f}, rounds {span(p.values())}): {', '.join(parts)} (goal {goal})")
PY
