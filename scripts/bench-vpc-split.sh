#!/usr/bin/env bash
# Where a `vpc` 1400 B packet's time goes, in one run on one machine: the AES-128-GCM seal alone
# (`snic bench crypto`), then ROUNDS rounds of `snic bench dataplane` at 1400 B for the `vpc`
# chain, its cipher alone (`aes-gcm`) and `dummy`, each with the generator writing the whole
# frame and the headers only (`--rx-writes`, in the order frame, headers, headers, frame), then
# the seal again. Prints each run, then per chain and mode the median Mpps and its ratio to the
# seal's mean. BENCHMARKS.md turns the differences into nanoseconds a packet.
#
#   scripts/bench-vpc-split.sh [SNIC] [ROUNDS] [SECONDS]   (defaults: target/release/snic, 3, 2)
set -euo pipefail
snic=${1:-target/release/snic}; rounds=${2:-3}; secs=${3:-2}
mpps() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["mpps"])'; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "seal $("$snic" bench crypto --size 1400 --seconds "$secs" --json | mpps)" | tee -a "$log"
for _ in $(seq "$rounds"); do
  for mode in frame headers headers frame; do
    for chain in vpc aes-gcm dummy; do
      echo "$mode $chain $("$snic" bench dataplane --chain "$chain" --size 1400 --seconds "$secs" --rx-writes "$mode" --json | mpps)" | tee -a "$log"
    done
  done
done
echo "seal $("$snic" bench crypto --size 1400 --seconds "$secs" --json | mpps)" | tee -a "$log"
python3 - "$log" <<'PY'
import collections, statistics, sys
runs, seal = collections.defaultdict(list), []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "seal":
        seal.append(float(f[1]))
    else:
        runs[(f[1], f[0])].append(float(f[2]))
s = statistics.mean(seal)
print(f"# seal: {s:.3f} Mops (mean of {len(seal)}), {1e3 / s:.0f} ns a seal")
for (chain, mode), v in sorted(runs.items()):
    m = statistics.median(v)
    print(f"# {chain} {mode}: {m:.3f} Mpps, {1e3 / m:.0f} ns a packet, {m / s:.3f}x the seal (median of {len(v)})")
PY
