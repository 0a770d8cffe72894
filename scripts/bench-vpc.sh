#!/usr/bin/env bash
# VPC between two snic nodes (paper §6.2), beside references, in one run:
#   snic:   S --vxlan--> node A [firewall -> NAT -> AES-GCM encrypt] --> node B [decrypt] --vxlan--> R
#   snic1:  S4 --vxlan--> node N [firewall -> NAT] --vxlan--> R4  (like for like with the kernel's),
#           then again with the node's TCP runs leaving whole through a tap (egress_tap)
#   kernel: S2 --> router namespace (nftables firewall + SNAT, kernel forwarding) --> R2,
#           then again with every offload off on its veths (TSO, GSO, GRO, checksums): frames
#           cross one by one, the ceiling of any per-packet forwarder on these veths
#   socat:  S3 --vxlan--> relay namespace (socat copies each datagram, no processing) --vxlan--> R3
#   ovs:    S5 --vxlan--> O [Open vSwitch, userspace datapath: VXLAN, firewall, conntrack SNAT]
#           --vxlan--> R5  (the userspace peer of the one-node path: same endpoints, same work)
# Each: iperf3 TCP S->R (one stream) and ping RTT. Prints one JSON line per path, then the
# snic and OVS paths' ratios to the kernel router's, and the one-node path's to OVS's and to
# the kernel's per-packet forwarding ("ratios"). For each one-node path, the node's CPU per
# datagram it received ("…-cpu"; needs a binary with `receive` in its status) and what left
# joined through the tap ("…-joined": writes, datagrams, refused). VPC_EGRESS_TAP=0 leaves the
# tap path out (it needs Linux 6.17+).
#
#   scripts/bench-vpc.sh [SECONDS]       (root; installs iperf3, socat, nftables, ethtool,
#                                         openvswitch-switch if missing)
#
# VPC_ENDPOINT_OFFLOAD=1 lets the one-node path's endpoints keep their transmit offloads: their
# TCP bursts then reach the node unsegmented, one datagram each, and the node cuts them.
# The nodes' interfaces have GRO on (netns-lib.sh's gro: runs of datagrams reach the nodes
# coalesced, docs/endpoints.md); GRO=off leaves it off, for the comparison.
# VPC_PROFILE=FILE samples node A with perf during the snic path's iperf3 run.
# VPC_TAP_RPS=MASK sets the one-node path's tap's receive packet steering (rps_cpus): which CPUs
# run the receiving endpoint's work a packet written into the tap causes (measured: no gain on
# two cores, BENCHMARKS.md "Issue 51: whole bursts a write").

# SNIC_BIN selects the snic binary (default: target/release/snic, built if missing). The nodes
# are configured with examples/vpc-node-a.yaml and examples/vpc-node-b.yaml; SNIC_NODE_CONFIG
# names a node.yaml both nodes start with (e.g. one with `rx_queues: shared`).
# VPC_ENDPOINT_MTU sets the endpoints' VXLAN MTU (default 1400: the encrypted datagram fits a
# 1500-byte link; 1500, the README tour's, makes the nodes' datagrams larger than the links'
# MTU, which the nodes fragment: docs/endpoints.md, "MTU"). After the snic path, a line
# "snic-mtu" says how many of 5 pings came back that fill the endpoint's path MTU with DF set
# (1422 bytes: a 1450-byte inner packet, the most a 1500-byte link carries in VXLAN; node A's
# encrypted datagram is 32 bytes more), and the nodes' tx_error drops.
#
# Every namespace is created here and deleted on exit, pass or fail. Traffic stays inside them.
set -euo pipefail
secs=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in iperf3:iperf3 socat:socat nft:nftables ethtool:ethtool ping:iputils-ping ovs-vswitchd:openvswitch-switch; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-vpc vb

# vxlan NS LOCAL REMOTE INNER
vxlan() { vxlan_ep "$1" "$2" "$3" "$4" "${VPC_ENDPOINT_MTU:-1400}"; }
vxmac() { ip -n "$P-$1" link show vx0 | awk '/link\/ether/{print $2}'; }
# measure NAME SENDER DEST: iperf3 and ping from SENDER to DEST (server already in the receiver)
measure() {
  local name=$1 s=$2 dst=$3 out
  ip netns exec "$P-$s" ping -c 3 -i 0.2 -W 2 "$dst" >/dev/null || { echo "{\"bench\":\"vpc\",\"path\":\"$name\",\"error\":\"no connectivity\"}"; return; }
  out=$(ip netns exec "$P-$s" iperf3 -c "$dst" -t "$secs" -J)
  local gbps rtt
  gbps=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"]/1e9)' <<<"$out")
  rtt=$(ip netns exec "$P-$s" ping -c 50 -i 0.02 -W 2 "$dst" | awk -F/ '/rtt/{print $5}')
  echo "{\"bench\":\"vpc\",\"path\":\"$name\",\"iperf3_tcp_gbps\":$gbps,\"ping_avg_ms\":$rtt,\"seconds\":$secs}"
  echo "$name $gbps" >>"$work/gbps"
}
# server NS: an iperf3 server in NS, once it listens.
server() { ip netns exec "$P-$1" iperf3 -s >/dev/null 2>&1 & pids+=($!); wait_for "iperf3 server in $1" listens "$1" t 5201; }


# ---- snic: S - A - B - R ----------------------------------------------------------------
ns s; ns a; ns b; ns r
veth s 192.168.1.2 a 192.168.1.1
veth a 192.168.2.1 b 192.168.2.2
veth b 192.168.3.1 r 192.168.3.2
vxlan s 192.168.1.2 192.168.1.1 10.1.0.1
vxlan r 192.168.3.2 192.168.3.1 10.1.0.2
gro a; gro b
for n in a b; do
  ip netns exec "$P-$n" "$snic" run ${SNIC_NODE_CONFIG:+--config "$SNIC_NODE_CONFIG"} --data 0.0.0.0:4789 --state-dir "$work/state-$n" >"$work/$n.log" 2>&1 & pids+=($!)
  [ "$n" = a ] && node_a=$!
done
for n in a b; do
  wait_for "node $n up" ip netns exec "$P-$n" "$snic" status
  ip netns exec "$P-$n" "$snic" apply -f "$here/examples/vpc-node-$n.yaml" >/dev/null
done
ip -n "$P-r" neigh add 10.1.0.100 lladdr "$(vxmac s)" dev vx0 nud permanent
server r
# VPC_PROFILE=FILE: node A is sampled (perf record -g, 1999 Hz) for the middle half of its
# iperf3 run, into FILE (BENCHMARKS.md, "Where a VPC node's time goes").
if [ -n "${VPC_PROFILE:-}" ]; then
  (sleep $(( secs / 4 + 1 )); exec perf record -q -g -F 1999 -p "$node_a" -o "$VPC_PROFILE" -- sleep $(( secs / 2 ))) >/dev/null 2>&1 &
  pids+=($!)
fi
measure snic-2node-fw-nat-aesgcm s 10.1.0.2
# The largest DF ping the endpoint's path carries (the endpoint's VXLAN device holds inner
# packets with DF to 1450 bytes on a 1500-byte link), through both nodes: node A's encrypted
# datagram is over the link's MTU, and fragmented, never dropped.
big=$(ip netns exec "$P-s" ping -c 5 -i 0.2 -W 2 -s 1422 -M do 10.1.0.2 | awk '/received/{print $4}' || true)
txerr=$(for n in a b; do ip netns exec "$P-$n" "$snic" status -o json; done | python3 -c '
import json, sys
d = json.JSONDecoder(); s = sys.stdin.read(); i = 0; n = 0; per = []
while i < len(s):
    if s[i].isspace(): i += 1; continue
    v, i = d.raw_decode(s, i)
    n += sum(c for t in v["tenants"] for r, c in t["stats"]["drops"] if r == "tx_error")
    r = v.get("receive", {})  # (a binary from before GRO has none)
    per.append(round(r.get("datagrams", 0) / max(r.get("messages", 0), 1), 1))
print(n, json.dumps(per).replace(" ", ""))')
echo "{\"bench\":\"vpc\",\"path\":\"snic-mtu\",\"endpoint_mtu\":${VPC_ENDPOINT_MTU:-1400},\"ping_1422_df_of_5\":${big:-0},\"tx_error\":${txerr% *},\"rx_datagrams_per_message_a_b\":${txerr#* }}"

# ---- kernel: S2 - K (nftables firewall + SNAT, forwarding) - R2 -------------------------------
kernel_router s2 k r2 192.168.11 192.168.12
server r2
measure kernel-router-nft-fw-nat s2 192.168.12.2
for n in s2 k r2; do
  for i in $(ip -n "$P-$n" -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip netns exec "$P-$n" ethtool -K "$i" tso off gso off gro off tx off >/dev/null
  done
done
measure kernel-router-per-packet s2 192.168.12.2

# ---- socat: S3 - relay (copies datagrams) - R3 ----------------------------------------------
ns s3; ns x; ns r3
veth s3 192.168.21.2 x 192.168.21.1
veth x 192.168.22.1 r3 192.168.22.2
vxlan s3 192.168.21.2 192.168.21.1 10.3.0.1
vxlan r3 192.168.22.2 192.168.22.1 10.3.0.2
ip netns exec "$P-x" socat -u UDP4-RECV:4789,bind=192.168.21.1 UDP4-SENDTO:192.168.22.2:4789 & pids+=($!)
ip netns exec "$P-x" socat -u UDP4-RECV:4789,bind=192.168.22.1 UDP4-SENDTO:192.168.21.2:4789 & pids+=($!)
wait_for "socat relays bound" sh -c "[ \$(ip netns exec $P-x ss -Hlun 'sport = :4789' | wc -l) -ge 2 ]"
server r3
measure socat-relay-no-processing s3 10.3.0.2

# ---- snic, one node, like for like: S4 - N [firewall -> NAT] - R4 -------------------------
ns s4; ns n; ns r4
veth s4 192.168.31.2 n 192.168.31.1 ${VPC_ENDPOINT_OFFLOAD:+keep-offload}
veth n 192.168.32.1 r4 192.168.32.2 ${VPC_ENDPOINT_OFFLOAD:+keep-offload}
vxlan s4 192.168.31.2 192.168.31.1 10.1.0.1
vxlan r4 192.168.32.2 192.168.32.1 10.1.0.2
gro n
ip -n "$P-r4" neigh add 10.1.0.100 lladdr "$(vxmac s4)" dev vx0 nud permanent
server r4
# one_node NAME CONFIG: node N started with node.yaml CONFIG (or none), the firewall and NAT
# applied, measured, and its CPU per datagram it received (user + system of its process, which
# includes the kernel's receive and transmit work done in its context) over the whole
# measurement (issue 18's measure); then stopped.
one_node() {
  local name=$1 config=$2
  ip netns exec "$P-n" "$snic" run ${config:+--config "$config"} --data 0.0.0.0:4789 --state-dir "$work/state-$name" >"$work/$name.log" 2>&1 & pids+=($!)
  node_n=$!
  if ! wait_for "node n up" ip netns exec "$P-n" "$snic" status 2>/dev/null; then
    echo "{\"bench\":\"vpc\",\"path\":\"$name\",\"error\":$(tail -c 300 "$work/$name.log" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}"
    return
  fi
  ip netns exec "$P-n" "$snic" apply -f "$here/examples/vpc-fw-nat.yaml" >/dev/null
  # (VPC_TAP_RPS=MASK: the tap's receive packet steering, which CPUs run what the kernel does
  # with a packet written into it: the receiving endpoint's decapsulation and TCP receive.)
  if [ -n "${VPC_TAP_RPS:-}" ] && ip -n "$P-n" link show snictap0 >/dev/null 2>&1; then
    ip netns exec "$P-n" sh -c "echo $VPC_TAP_RPS > /sys/class/net/snictap0/queues/rx-0/rps_cpus"
  fi
  local t0 t1 r0 r1
  t0=$(cpu_ticks); r0=$(received)
  measure "$name" s4 10.1.0.2
  t1=$(cpu_ticks); r1=$(received)
  python3 -c 'import os,sys; t0,t1,r0,r1=map(int,sys.argv[2:]); hz=os.sysconf("SC_CLK_TCK"); print("{\"bench\":\"vpc\",\"path\":\"%s-cpu\",\"datagrams\":%d,\"cpu_us_per_datagram\":%s}" % (sys.argv[1], r1-r0, round((t1-t0)/hz*1e6/(r1-r0), 3) if r1 > r0 else "null"))' "$name" "$t0" "$t1" "$r0" "$r1"
  ip netns exec "$P-n" "$snic" status -o json | python3 -c 'import json,sys; j=json.load(sys.stdin).get("transmit", {}).get("joined"); j and print(json.dumps({"bench": "vpc", "path": sys.argv[1] + "-joined", **j}))' "$name"
  kill "$node_n"; wait "$node_n" 2>/dev/null || true
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$node_n/stat"; }
received() { ip netns exec "$P-n" "$snic" status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("receive", {}).get("datagrams", 0))'; }
one_node snic-1node-fw-nat "${SNIC_NODE_CONFIG:-}"
# The same with the node's TCP runs leaving whole through a tap (egress_tap, Linux 6.17+:
# docs/dataplane.md, "Sending runs whole"); VPC_EGRESS_TAP=0 leaves it out.
if [ "${VPC_EGRESS_TAP:-1}" != 0 ]; then
  ip netns exec "$P-n" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0
  { [ -n "${SNIC_NODE_CONFIG:-}" ] && cat "$SNIC_NODE_CONFIG"; echo "egress_tap: snictap0"; } >"$work/tap.yaml"
  one_node snic-1node-fw-nat-tap "$work/tap.yaml"
fi

# ---- ovs: S5 - O [OVS userspace datapath: VXLAN, firewall, conntrack SNAT] - R5 --------------
# Open vSwitch as Debian ships it (no DPDK): datapath_type=netdev, its ports the veths (read
# and written by ovs-vswitchd over AF_PACKET), userspace tunnelling (the VTEP addresses on the
# physical bridges' internal ports), the same firewall and SNAT as the one-node path in
# OpenFlow with conntrack. Its own database and sockets in $work; both daemons are ours (PIDs).
ns s5; ns o; ns r5
veth s5 192.168.41.2 o 192.168.41.1
veth o 192.168.42.1 r5 192.168.42.2
vxlan s5 192.168.41.2 192.168.41.1 10.1.0.1
vxlan r5 192.168.42.2 192.168.42.1 10.1.0.2
ovs=$work/ovs; mkdir -p "$ovs"
export OVS_RUNDIR=$ovs OVS_LOGDIR=$ovs OVS_DBDIR=$ovs
ovsdb-tool create "$ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ip netns exec "$P-o" ovsdb-server "$ovs/conf.db" --remote=punix:"$ovs/db.sock" --unixctl="$ovs/ovsdb.ctl" --log-file="$ovs/ovsdb.log" -vconsole:off >/dev/null 2>&1 & pids+=($!)
wait_for "ovsdb-server" test -S "$ovs/db.sock"
vsctl() { ip netns exec "$P-o" ovs-vsctl --db=unix:"$ovs/db.sock" "$@"; }
vsctl --no-wait init
ip netns exec "$P-o" ovs-vswitchd unix:"$ovs/db.sock" --unixctl="$ovs/vswitchd.ctl" --log-file="$ovs/vswitchd.log" -vconsole:off >/dev/null 2>&1 & pids+=($!)
wait_for "ovs-vswitchd" test -S "$ovs/vswitchd.ctl"
i=0
for v in $(ip -n "$P-o" -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1); do
  a=$(ip -n "$P-o" -4 -o addr show dev "$v" | awk '{print $4}')
  ip -n "$P-o" addr flush dev "$v"
  vsctl add-br br-phy$i -- set bridge br-phy$i datapath_type=netdev -- add-port br-phy$i "$v"
  ip -n "$P-o" addr add "$a" dev br-phy$i; ip -n "$P-o" link set br-phy$i up
  i=$((i + 1))
done
vsctl add-br br-int -- set bridge br-int datapath_type=netdev \
  -- add-port br-int vxs -- set interface vxs type=vxlan options:remote_ip=192.168.41.2 options:local_ip=192.168.41.1 options:key=100 \
  -- add-port br-int vxr -- set interface vxr type=vxlan options:remote_ip=192.168.42.2 options:local_ip=192.168.42.1 options:key=100
ip netns exec "$P-o" ovs-ofctl del-flows br-int
ip netns exec "$P-o" ovs-ofctl add-flows br-int - <<F
priority=200,tcp,tp_dst=22,actions=drop
priority=100,ip,in_port=vxs,actions=ct(commit,zone=1,nat(src=10.1.0.100)),output:vxr
priority=100,ip,in_port=vxr,actions=ct(zone=1,nat,table=1)
table=1,priority=100,ct_state=+trk+est,ip,actions=output:vxs
table=1,priority=100,ct_state=+trk+rel,ip,actions=output:vxs
priority=50,arp,actions=NORMAL
F
ip -n "$P-r5" neigh add 10.1.0.100 lladdr "$(vxmac s5)" dev vx0 nud permanent
server r5
# (Its first packets wait while OVS resolves the tunnel's next hops: measure pings first.)
ip netns exec "$P-s5" ping -c 3 -i 0.3 -W 3 10.1.0.2 >/dev/null || true
measure ovs-userspace-fw-nat s5 10.1.0.2

python3 - "$work/gbps" <<'PY'
import json, sys
g = dict(l.split() for l in open(sys.argv[1]))
k = float(g.get("kernel-router-nft-fw-nat", 0)) or float("nan")
o = float(g.get("ovs-userspace-fw-nat", 0)) or float("nan")
pp = float(g.get("kernel-router-per-packet", 0)) or float("nan")
r = {p: round(float(v) / k, 3) for p, v in g.items() if p.startswith(("snic", "ovs", "kernel-router-per"))}
r["snic-1node-fw-nat/ovs"] = round(float(g.get("snic-1node-fw-nat", 0)) / o, 3)
r["snic-1node-fw-nat/kernel-per-packet"] = round(float(g.get("snic-1node-fw-nat", 0)) / pp, 3)
print(json.dumps({"bench": "vpc", "ratios": r}))
PY
