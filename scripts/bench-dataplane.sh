#!/usr/bin/env bash
# Same-run data-plane benchmark: dpdk-testpmd (macswap, 5tswap) on net_null vdevs with one
# forwarding core, `snic bench dataplane` (dummy and vpc, 64 and 1400 B) on one core, ring's
# AES-GCM alone on one core, then testpmd macswap again to bracket the machine's drift.
# Prints JSON lines, then the ratios BENCHMARKS.md quotes.
#
#   scripts/bench-dataplane.sh [SECONDS_PER_CASE] > results.jsonl
#
# Installs Debian's dpdk-dev if dpdk-testpmd is missing (root). No network beyond the package
# registry; testpmd's net_null devices never touch a NIC.
set -euo pipefail
secs=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
snic="$here/target/release/snic"
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
if ! command -v dpdk-testpmd >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpdk-dev >/dev/null 2>&1 || true
fi

testpmd() { # MODE: one JSON line with the median Mpps forwarded on one core (both ports summed)
  local mode=$1 log
  log=$(mktemp)
  # testpmd needs ~3 s to start (no hugepages): give it five more than the measured window.
  timeout -s INT "$((secs + 5))" dpdk-testpmd -l 0-1 --no-huge -m 1024 --no-pci \
    --vdev net_null0 --vdev net_null1 --file-prefix snicbench$$ -- \
    --forward-mode="$mode" --nb-cores=1 --stats-period 1 >"$log" 2>&1 || true
  python3 - "$log" "$mode" <<'PY'
import re, sys, statistics
pps = [int(m) for m in re.findall(r"Rx-pps:\s+(\d+)", open(sys.argv[1]).read())]
periods = [pps[i] + pps[i + 1] for i in range(0, len(pps) - 1, 2)]
periods = [p for p in periods if p > 0][1:]
if not periods:
    sys.exit("testpmd printed no usable statistics")
print(f'{{"peer":"dpdk-testpmd","mode":"{sys.argv[2]}","cores":1,"mpps":{statistics.median(periods) / 1e6:.3f}}}')
PY
  rm -f "$log"
}

out=$(mktemp)
{
  if command -v dpdk-testpmd >/dev/null 2>&1; then
    testpmd macswap
    testpmd 5tswap
  fi
  "$snic" bench dataplane --json --seconds "$secs"
  "$snic" bench crypto --json --seconds "$secs" --size 1400
  if command -v dpdk-testpmd >/dev/null 2>&1; then testpmd macswap; fi
} | tee "$out"

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
mac = [r["mpps"] for r in rows if r.get("peer") == "dpdk-testpmd" and r["mode"] == "macswap"]
aes = [r["gbps"] for r in rows if r.get("bench") == "aes_gcm" and r["bytes"] == 1400]
dp = {(r["chain"], r["packet_size"]): r for r in rows if r.get("bench") == "dataplane"}
if mac and ("dummy", 64) in dp:
    m = sum(mac) / len(mac)
    print(f"# dummy 64 B / testpmd macswap (mean of {len(mac)}: {m:.2f} Mpps) = {dp['dummy', 64]['mpps'] / m:.3f}", file=sys.stderr)
if aes and ("vpc", 1400) in dp:
    print(f"# vpc 1400 B / ring AES-128-GCM 1400 B ({aes[0]:.2f} Gbit/s) = {dp['vpc', 1400]['gbps'] / aes[0]:.3f}", file=sys.stderr)
PY
rm -f "$out"
