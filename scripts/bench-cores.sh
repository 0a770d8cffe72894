#!/usr/bin/env bash
# `data_cores` through veth: one snic node, firewall -> NAT (examples/vpc-fw-nat.yaml), between
# two kernel VXLAN endpoints, with 1 and with 2 dispatcher threads, alternated, beside the
# kernel router (nftables firewall + SNAT, kernel forwarding) on the same kind of topology:
#   S --vxlan--> N [firewall -> NAT] --vxlan--> R        (snic, data_cores 1 and 2)
#   S2 --> K (nftables firewall + SNAT) --> R2           (kernel)
# Each measurement: iperf3 TCP with 8 streams from consecutive source ports (the steering
# rule puts half on each thread), and iperf3 UDP 8 streams of 64-byte datagrams offered flat
# out (delivered datagrams per second at the receiver). For snic also the node's CPU per
# datagram received (user + system of its process) and how its two threads shared the work.
# Prints a JSON line per measurement, then the ratios 2 threads / 1 thread per round.
#
#   scripts/bench-cores.sh [SECONDS] [ROUNDS]      (root; default 5 s, 2 rounds)
#
# SNIC_BIN selects the binary (default target/release/snic, built if missing). Every namespace
# is created here and deleted on exit; every process started here is stopped by PID.
set -euo pipefail
secs=${1:-5}
rounds=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in iperf3:iperf3 nft:nftables ethtool:ethtool ping:iputils-ping; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-cores bc

vxmac() { ip -n "$P-$1" link show vx0 | awk '/link\/ether/{print $2}'; }
server() { ip netns exec "$P-$1" iperf3 -s >/dev/null 2>&1 & pids+=($!); wait_for "iperf3 server in $1" listens "$1" t 5201; }
# tcp NS DST: Gbit/s of 8 TCP streams.
tcp() {
  ip netns exec "$P-$1" iperf3 -c "$2" -t "$secs" -P 8 --cport 40000 -J |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9, 3))'
}
# udp NS DST: datagrams per second delivered of 8 UDP streams of 64 bytes, offered flat out.
udp() {
  ip netns exec "$P-$1" iperf3 -c "$2" -t "$secs" -u -b 0 -l 64 -P 8 --cport 40000 -J |
    python3 -c 'import json,sys; e=json.load(sys.stdin)["end"]["sum"]; print(round((e["packets"]-e["lost_packets"])/e["seconds"]))'
}

# ---- kernel: S2 - K - R2 --------------------------------------------------------------------
kernel_router s2 k r2 192.168.11 192.168.12
server r2

# ---- snic: S - N - R ------------------------------------------------------------------------
ns s; ns n; ns r
veth s 192.168.31.2 n 192.168.31.1
veth n 192.168.32.1 r 192.168.32.2
vxlan_ep s 192.168.31.2 192.168.31.1 10.1.0.1 1400
vxlan_ep r 192.168.32.2 192.168.32.1 10.1.0.2 1400
gro n
ip -n "$P-r" neigh add 10.1.0.100 lladdr "$(vxmac s)" dev vx0 nud permanent
server r

node=
# start_node CORES: the node with that many dispatcher threads, the manifest applied.
start_node() {
  printf 'data_cores: %s\n' "$1" >"$work/node.yaml"
  rm -rf "$work/state"
  ip netns exec "$P-n" "$snic" run --config "$work/node.yaml" --data 0.0.0.0:4789 --state-dir "$work/state" >"$work/n-$1.log" 2>&1 &
  node=$!; pids+=($node)
  wait_for "node up" ip netns exec "$P-n" "$snic" status
  ip netns exec "$P-n" "$snic" apply -f "$here/examples/vpc-fw-nat.yaml" >/dev/null
  wait_for "a path through the node" ip netns exec "$P-s" ping -c 1 -W 1 10.1.0.2
}
stop_node() {
  kill "$node"; wait "$node" 2>/dev/null || true
  local keep=() p; for p in "${pids[@]}"; do [ "$p" = "$node" ] || keep+=("$p"); done; pids=("${keep[@]}")
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$node/stat"; }
# What the node received, and the packets each thread's regions ran: "DATAGRAMS T0 T1".
counts() {
  ip netns exec "$P-n" "$snic" status -o json | python3 -c '
import json, sys
v = json.load(sys.stdin); by = [0, 0]
for r in v["regions"]["instances"]:
    by[min(r.get("thread", 0), 1)] += r["packets"]
print(v["receive"]["datagrams"], by[0], by[1])'
}

for round in $(seq "$rounds"); do
  for cores in 1 2; do
    start_node "$cores"
    read -r d0 a0 b0 < <(counts); t0=$(cpu_ticks)
    g=$(tcp s 10.1.0.2)
    u=$(udp s 10.1.0.2)
    read -r d1 a1 b1 < <(counts); t1=$(cpu_ticks)
    stop_node
    python3 -c '
import json, os, sys
cores, rnd, g, u, d0, d1, a0, a1, b0, b1, t0, t1 = sys.argv[1:]
dg = int(d1) - int(d0); ran = [int(a1) - int(a0), int(b1) - int(b0)]
cpu = (int(t1) - int(t0)) / os.sysconf("SC_CLK_TCK")
print(json.dumps({"bench": "cores", "round": int(rnd), "path": "snic-fw-nat", "data_cores": int(cores), "tcp8_gbps": float(g),
    "udp8_64b_pps": int(u), "cpu_us_per_datagram": round(cpu * 1e6 / dg, 3) if dg else None,
    "thread_share": [round(x / max(sum(ran), 1), 3) for x in ran]}))' "$cores" "$round" "$g" "$u" "$d0" "$d1" "$a0" "$a1" "$b0" "$b1" "$t0" "$t1" | tee -a "$work/rows"
  done
  g=$(tcp s2 192.168.12.2); u=$(udp s2 192.168.12.2)
  echo "{\"bench\":\"cores\",\"round\":$round,\"path\":\"kernel-router-nft-fw-nat\",\"tcp8_gbps\":$g,\"udp8_64b_pps\":$u}" | tee -a "$work/rows"
done
python3 - "$work/rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for rnd in sorted({r["round"] for r in rows}):
    s = {r["data_cores"]: r for r in rows if r["round"] == rnd and r["path"] == "snic-fw-nat"}
    k = next(r for r in rows if r["round"] == rnd and r["path"].startswith("kernel"))
    out = {"bench": "cores", "round": rnd, "ratios": {
        "tcp8_2_over_1": round(s[2]["tcp8_gbps"] / s[1]["tcp8_gbps"], 3),
        "udp8_2_over_1": round(s[2]["udp8_64b_pps"] / max(s[1]["udp8_64b_pps"], 1), 3),
        "tcp8_2_over_kernel": round(s[2]["tcp8_gbps"] / k["tcp8_gbps"], 3),
        "udp8_2_over_kernel": round(s[2]["udp8_64b_pps"] / max(k["udp8_64b_pps"], 1), 3)}}
    print(json.dumps(out))
PY
