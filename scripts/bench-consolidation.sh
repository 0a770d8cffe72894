#!/usr/bin/env bash
# Consolidation (paper 000 §7.1, Fig. 21, its throughput half): four senders and four receivers
# with ETC-shaped loads, through one snic node whose single uplink is shaped (tbf), against the
# same pairs on direct links of their own shaped to the same rate — at two rates standing for
# the paper's 100 and 40 Gbit/s, scaled to what this machine carries.
#
#   snic:     S1..S4 --vxlan--> node N [counter, one tenant a pair] --uplink (tbf RATE)--> F
#             (a router) --> R1..R4
#   shared:   the same topology with N a kernel router instead (the pairs' VXLAN end to end):
#             what sharing the shaped uplink costs without the node
#   baseline: B1s..B4s --vxlan, a veth each (tbf RATE)--> B1r..B4r
#
# Each sender runs the same schedule in both: SEGMENTS one-second iperf3 UDP runs (1300-byte
# datagrams) at rates drawn (seed SEED) from a log-normal whose median and 95th percentile are
# 24% and 32% of the high rate, the paper's measured ETC load against its 100 Gbit/s link. So
# four senders mostly fit the high rate and often exceed the low one (0.4×), as in the paper.
# Prints one JSON line per (rate, path): offered and delivered Mbit/s, summed over senders; then
# at each rate ("overhead") the node's overhead against the baseline, and how much of it
# sharing the uplink costs alone (the shared kernel router against the baseline) and how much
# the node adds (snic against the shared kernel router).
#
#   scripts/bench-consolidation.sh [SEGMENTS] [HIGH_MBIT]     (root; default 8 and 400; installs
#                                                              iperf3 and ethtool if missing)
#
# LOAD="MEDIAN P95" sets each sender's median and 95th percentile, in percent of the high rate
# (default "24 32": the paper's figures read as each sender's; "6 8" reads them as the four
# senders' sum — the paper's text allows both, BENCHMARKS.md). SEED (default 1) picks the
# schedules; SNIC_BIN the snic binary (default target/release/snic,
# built if missing). Every namespace is created here and deleted on exit, pass or fail.
set -euo pipefail
segments=${1:-8}
high=${2:-400}
low=$(( high * 2 / 5 ))
seed=${SEED:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in iperf3:iperf3 ethtool:ethtool ping:iputils-ping tc:iproute2; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-consolidation cb
mtu=1400
vxmac() { ip -n "$P-$1" link show vx0 | awk '/link\/ether/{print $2}'; }
# shape NS DEV RATE: tbf on DEV's egress in NS.
shape() { ip netns exec "$P-$1" tc qdisc replace dev "$2" root tbf rate "${3}mbit" burst 64kb latency 50ms; }
server() { ip netns exec "$P-$1" iperf3 -s >/dev/null 2>&1 & pids+=($!); wait_for "iperf3 server in $1" listens "$1" t 5201; }
# The schedules: one line per sender, SEGMENTS rates in Mbit/s. The load is the tenants', not
# the link's: the same offered load meets both uplink rates, as in the paper.
load=${LOAD:-24 32}
python3 - "$segments" "$high" "$seed" $load >"$work/schedule" <<'PY'
import math, random, sys
n, high, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
median, p95 = float(sys.argv[4]) / 100 * high, float(sys.argv[5]) / 100 * high
if not 0 < median < p95:
    sys.exit("bench-consolidation: LOAD must be MEDIAN P95 with 0 < MEDIAN < P95")
sigma = math.log(p95 / median) / 1.645
for _ in range(4):
    print(" ".join(f"{median * math.exp(rng.gauss(0, sigma)):.1f}" for _ in range(n)))
PY
# run_pairs NAME RATE SENDER_PREFIX RECEIVER_INNER_PREFIX: the four senders' schedules at once;
# one JSON line with what they offered and what arrived (iperf3's receiver counts).
run_pairs() {
  local name=$1 rate=$2 sp=$3 i clients=()
  for i in 1 2 3 4; do
    (
      for r in $(sed -n "${i}p" "$work/schedule"); do
        ip netns exec "$P-$sp$i" iperf3 -c "10.$i.0.2" -u -b "${r}M" -l 1300 -t 1 -J 2>/dev/null || echo '{}'
      done >"$work/$name-$rate-$i.json"
    ) &
    clients+=($!)
  done
  wait "${clients[@]}"   # (not the servers and the node, which run on)
  python3 - "$work" "$name" "$rate" "$segments" "$high" "$load" <<'PY'
import json, sys
work, name, rate, segs, high = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
offered = delivered = lost = 0.0
errors = 0
for i in range(1, 5):
    text = open(f"{work}/{name}-{rate}-{i}.json").read()
    dec = json.JSONDecoder(); k = 0
    while k < len(text):
        if text[k].isspace(): k += 1; continue
        v, k = dec.raw_decode(text, k)
        s = v.get("end", {}).get("sum")
        if not s or "error" in v: errors += 1; continue
        secs = s["seconds"] or 1.0
        offered += s["packets"] * 1300 * 8 / secs / 1e6
        delivered += (s["packets"] - s["lost_packets"]) * 1300 * 8 / secs / 1e6
        lost += s["lost_packets"]
print(json.dumps({"bench": "consolidation", "path": name, "uplink_mbit": rate, "high_mbit": int(high), "load_pct": sys.argv[6],
                  "segments": segs, "offered_mbit": round(offered / segs, 1),
                  "delivered_mbit": round(delivered / segs, 1), "lost_packets": int(lost), "failed_runs": errors}))
PY
}

# ---- snic: S1..S4 - N - (uplink, tbf) - F - R1..R4 -------------------------------------------
ns n; ns f
veth n 192.168.50.1 f 192.168.50.2
ip netns exec "$P-f" sysctl -qw net.ipv4.ip_forward=1
manifest=$work/node.yaml
: >"$manifest"
for i in 1 2 3 4; do
  ns "s$i"; ns "r$i"
  veth "s$i" "192.168.4$i.2" n "192.168.4$i.1"
  veth f "192.168.5$i.1" "r$i" "192.168.5$i.2"
  ip -n "$P-r$i" route add default via "192.168.5$i.1"
  ip -n "$P-n" route add "192.168.5$i.0/24" via 192.168.50.2
  vxlan_ep "s$i" "192.168.4$i.2" "192.168.4$i.1" "10.$i.0.1" $mtu $((100 + i))
  vxlan_ep "r$i" "192.168.5$i.2" 192.168.50.1 "10.$i.0.2" $mtu $((100 + i))
  ip -n "$P-s$i" neigh add "10.$i.0.2" lladdr "$(vxmac "r$i")" dev vx0 nud permanent
  ip -n "$P-r$i" neigh add "10.$i.0.1" lladdr "$(vxmac "s$i")" dev vx0 nud permanent
  cat >>"$manifest" <<Y
apiVersion: snic/v1
kind: Tenant
metadata: {name: t$i}
spec: {vnis: [$((100 + i))]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: count$i}
spec: {tenant: t$i, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: dag$i}
spec: {tenant: t$i, nodes: [count$i]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: rule$i}
spec: {vni: $((100 + i)), action: {dag: dag$i}}
---
apiVersion: snic/v1
kind: Route
metadata: {name: to-r$i}
spec: {vni: $((100 + i)), mac: '$(vxmac "r$i")', vtep: '192.168.5$i.2:4789'}
---
apiVersion: snic/v1
kind: Route
metadata: {name: to-s$i}
spec: {vni: $((100 + i)), mac: '$(vxmac "s$i")', vtep: '192.168.4$i.2:4789'}
---
Y
done
gro n
ip netns exec "$P-n" "$snic" run --data 0.0.0.0:4789 --state-dir "$work/state" >"$work/n.log" 2>&1 & pids+=($!); node=$!
wait_for "node up" ip netns exec "$P-n" "$snic" status
ip netns exec "$P-n" "$snic" apply -f "$manifest" >/dev/null
for i in 1 2 3 4; do
  server "r$i"
  ip netns exec "$P-s$i" ping -c 2 -i 0.2 -W 2 "10.$i.0.2" >/dev/null || { echo "bench-consolidation: no connectivity through the node to r$i" >&2; exit 1; }
done
nup=${P}nf; nup=${nup:0:15}
for rate in "$high" "$low"; do
  shape n "$nup" "$rate"
  run_pairs snic "$rate" s >>"$work/results"
done
ip netns exec "$P-n" "$snic" status -o json >"$work/status.json" || true

# ---- the same shared uplink without snic: N forwards (kernel), the pairs' VXLAN end to end ----
# What sharing one shaped uplink costs by itself; against it, what the node adds.
kill "$node"; wait "$node" 2>/dev/null || true
ip netns exec "$P-n" sysctl -qw net.ipv4.ip_forward=1
ip -n "$P-f" route add 192.168.40.0/21 via 192.168.50.1
for i in 1 2 3 4; do
  ip -n "$P-s$i" route add default via "192.168.4$i.1"
  ip -n "$P-s$i" link del vx0; ip -n "$P-r$i" link del vx0
  vxlan_ep "s$i" "192.168.4$i.2" "192.168.5$i.2" "10.$i.0.1" $mtu $((100 + i))
  vxlan_ep "r$i" "192.168.5$i.2" "192.168.4$i.2" "10.$i.0.2" $mtu $((100 + i))
  ip -n "$P-s$i" neigh add "10.$i.0.2" lladdr "$(vxmac "r$i")" dev vx0 nud permanent
  ip -n "$P-r$i" neigh add "10.$i.0.1" lladdr "$(vxmac "s$i")" dev vx0 nud permanent
  ip netns exec "$P-s$i" ping -c 2 -i 0.2 -W 2 "10.$i.0.2" >/dev/null || { echo "bench-consolidation: no connectivity through the kernel router to r$i" >&2; exit 1; }
done
for rate in "$high" "$low"; do
  shape n "$nup" "$rate"
  run_pairs shared-router "$rate" s >>"$work/results"
done

# ---- baseline: B1s..B4s - (own link, tbf) - B1r..B4r -----------------------------------------
for i in 1 2 3 4; do
  ns "b$i"; ns "c$i"
  veth "b$i" "192.168.6$i.2" "c$i" "192.168.6$i.1"
  vxlan_ep "b$i" "192.168.6$i.2" "192.168.6$i.1" "10.$i.0.1" $mtu $((100 + i))
  vxlan_ep "c$i" "192.168.6$i.1" "192.168.6$i.2" "10.$i.0.2" $mtu $((100 + i))
  server "c$i"
done
for rate in "$high" "$low"; do
  for i in 1 2 3 4; do l=$P"b$i""c$i"; shape "b$i" "${l:0:15}" "$rate"; done
  run_pairs baseline "$rate" b >>"$work/results"
done
cat "$work/results"
python3 - "$work/results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["path"], r["uplink_mbit"]): r for r in rows}
for rate in sorted({r["uplink_mbit"] for r in rows}, reverse=True):
    s, b, k = (by.get((p, rate)) for p in ("snic", "baseline", "shared-router"))
    if s and b and k and b["delivered_mbit"] > 0 and k["delivered_mbit"] > 0:
        d = lambda x, y: round(100 * (1 - x["delivered_mbit"] / y["delivered_mbit"]), 1)
        print(json.dumps({"bench": "consolidation", "path": "overhead", "uplink_mbit": rate,
                          "snic_over_baseline": round(s["delivered_mbit"] / b["delivered_mbit"], 3),
                          "overhead_pct": d(s, b), "sharing_alone_pct": d(k, b), "node_over_shared_router_pct": d(s, k)}))
PY
