#!/usr/bin/env bash
# The pool behind a switch (docs/pool.md, "Behind a switch"), measured on namespaces (root):
# a ToR namespace routes the anycast address 10.0.0.100 over a resilient next-hop group to three
# `snic run` nodes (pool.slots 3, one desired state in etcd on a ToR address); endpoints a, b
# (tenant blue: firewall → SNAT) and c, d (tenant green: counter) point their kernel VXLAN at
# the anycast address.
#
#  1. Throughput with the group holding 3, 2 and 1 nodes: iperf3 TCP -P 8 for SECONDS, green,
#     then blue both ways (a sends; b sends, -R, so that the bulk is the SNAT's return
#     traffic); for blue, the share of the packets the nodes received that were forwarded to
#     their state's owner, and the nodes' CPU time (user + system, all nodes) per blue packet
#     received — with 1 node nothing is forwarded.
#  2. Failover, ROUNDS times: with `snic tor` on the ToR, node 2 is killed with SIGKILL; the
#     time until the group no longer holds it, and until 8 new blue connections succeed; node 2
#     is restarted and waited for before the next round.
#
#   scripts/bench-switch.sh [SNIC] [SECONDS] [ROUNDS]   (defaults: target/release/snic, 5, 3)
#
# Prints JSON lines. Needs root, iproute2, iperf3, etcd (Debian etcd-server), python3.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${1:-$here/target/release/snic}; secs=${2:-5}; rounds=${3:-3}
. "$here/scripts/netns-lib.sh" bench-switch sw

# link NS ADDR/24-PREFIX MTU: a veth between NS (.2) and the ToR (.1), tx offload off on NS's side.
link() {
  local a="$P$1t" b="$P$1e"
  ip link add "${a:0:15}" mtu "$3" type veth peer name "${b:0:15}" mtu "$3"
  ip link set "${a:0:15}" netns "$P-tor"; ip link set "${b:0:15}" netns "$P-$1"
  ip -n "$P-tor" addr add "$2.1/24" dev "${a:0:15}"; ip -n "$P-tor" link set "${a:0:15}" up
  ip -n "$P-$1" addr add "$2.2/24" dev "${b:0:15}"; ip -n "$P-$1" link set "${b:0:15}" up
  ip netns exec "$P-$1" ethtool -K "${b:0:15}" tx off >/dev/null
  ip -n "$P-$1" route add default via "$2.1"
  tordev="${a:0:15}"
}
ns tor
ip netns exec "$P-tor" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1
ip -n "$P-tor" addr add 10.0.99.1/32 dev lo
for i in 1 2 3; do
  ns "node$i"; link "node$i" "10.0.$i" 1600; gro "node$i"
  ip -n "$P-node$i" addr add 10.0.0.100/32 dev lo
  ip -n "$P-tor" nexthop add id "$i" via "10.0.$i.2" dev "$tordev"
done
ip -n "$P-tor" nexthop add id 10 group 1/2/3 type resilient buckets 64 idle_timer 2
ip -n "$P-tor" route add 10.0.0.100/32 nhid 10
i=11
for e in a:100:10.1.0.1 b:100:10.1.0.2 c:200:10.1.0.1 d:200:10.1.0.2; do
  IFS=: read -r n vni inner <<<"$e"
  ns "$n"; link "$n" "10.0.$i" 1500
  ip -n "$P-$n" link add vx0 type vxlan id "$vni" remote 10.0.0.100 local "10.0.$i.2" dstport 4789 nolearning
  ip -n "$P-$n" addr add "$inner/24" dev vx0; ip -n "$P-$n" link set vx0 up
  ip netns exec "$P-$n" sysctl -qw net.core.txrehash=0
  i=$((i + 1))
done
ip netns exec "$P-tor" etcd --data-dir "$work/etcd" --name b --listen-client-urls http://10.0.99.1:2379 \
  --advertise-client-urls http://10.0.99.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster b=http://127.0.0.1:2380 >"$work/etcd.log" 2>&1 & pids+=($!)
healthy() { ip netns exec "$P-tor" bash -c 'exec 3<>/dev/tcp/10.0.99.1/2379 && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' | grep -q true; }
wait_for "etcd healthy" healthy
head -c 32 /dev/urandom | base64 >"$work/pool.key"
declare -A node_pid
start_node() {
  local i=$1 seeds=""
  [ "$i" = 1 ] || seeds=10.0.1.2:7946
  printf 'pool:\n  listen: 10.0.%s.2:7946\n  secret_file: %s\n  seeds: [%s]\n  etcd: [http://10.0.99.1:2379]\n  slots: 3\n  slot: %s\n' \
    "$i" "$work/pool.key" "$seeds" "$((i - 1))" >"$work/node$i.yaml"
  ip netns exec "$P-node$i" "$snic" run --config "$work/node$i.yaml" --data 0.0.0.0:4789 --api 0.0.0.0:7878 \
    --state-dir "$work/state$i" >>"$work/node$i.log" 2>&1 & pids+=($!); node_pid[$i]=$!
  wait_for "node $i up" ip netns exec "$P-node$i" "$snic" status
}
for i in 1 2 3; do start_node "$i"; done
st() { ip netns exec "$P-node$1" "$snic" status -o json; }
holders2() { [ "$(st "$1" | python3 -c 'import json,sys; print(len((json.load(sys.stdin).get("owners") or {}).get("holders", [])))')" = 2 ]; }
for i in 1 2 3; do wait_for "node $i knows the others' slots" holders2 "$i"; done
cat >"$work/m.yaml" <<'Y'
{apiVersion: snic/v1, kind: Tenant, metadata: {name: blue}, spec: {vnis: [100]}}
---
{apiVersion: snic/v1, kind: Tenant, metadata: {name: green}, spec: {vnis: [200]}}
---
{apiVersion: snic/v1, kind: NT, metadata: {name: blue-fw}, spec: {tenant: blue, config: {kind: firewall, default: allow, rules: [{proto: 6, dst_ports: {lo: 22, hi: 22}, action: deny}]}}}
---
{apiVersion: snic/v1, kind: NT, metadata: {name: blue-nat}, spec: {tenant: blue, config: {kind: nat, snat: {inside: 10.1.0.1/32, public: 10.1.0.100}}}}
---
{apiVersion: snic/v1, kind: NT, metadata: {name: green-count}, spec: {tenant: green, config: {kind: counter}}}
---
{apiVersion: snic/v1, kind: DAG, metadata: {name: blue-edge}, spec: {tenant: blue, nodes: [blue-fw, blue-nat]}}
---
{apiVersion: snic/v1, kind: DAG, metadata: {name: green-path}, spec: {tenant: green, nodes: [green-count]}}
---
{apiVersion: snic/v1, kind: Rule, metadata: {name: blue-all}, spec: {vni: 100, action: {dag: blue-edge}}}
---
{apiVersion: snic/v1, kind: Rule, metadata: {name: green-all}, spec: {vni: 200, action: {dag: green-path}}}
Y
for e in a:100:11 b:100:12 c:200:13 d:200:14; do
  IFS=: read -r n vni i <<<"$e"
  printf -- "---\n{apiVersion: snic/v1, kind: Route, metadata: {name: f%s}, spec: {vni: %s, vtep: '10.0.%s.2:4789', flood: true}}\n" "$n" "$vni" "$i" >>"$work/m.yaml"
done
ip netns exec "$P-node1" "$snic" apply -f "$work/m.yaml" >/dev/null
deployed() { [ "$(st "$1" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tenants"]))')" = 2 ]; }
for i in 2 3; do wait_for "node $i deploys the state" deployed "$i"; done
ip -n "$P-b" neigh add 10.1.0.100 lladdr "$(ip -n "$P-a" link show vx0 | awk '/link\/ether/{print $2}')" dev vx0 nud permanent
listens() { [ -n "$(ip netns exec "$P-$1" ss -Hltn "sport = :$2")" ]; }
server() { ip netns exec "$P-$1" iperf3 -s -p "$2" >/dev/null 2>&1 & pids+=($!); wait_for "iperf3 server in $1" listens "$1" "$2"; }
server d 5201; server b 5201; server b 5202

# Node CPU ticks (all nodes), blue packets received and forwarded to their owner (all nodes).
counters() {
  local ticks=0 t
  for i in 1 2 3; do
    t=$(awk '{print $14 + $15}' "/proc/${node_pid[$i]}/stat" 2>/dev/null || echo 0); ticks=$((ticks + t))
  done
  local fw=0 rx=0 f r
  for i in 1 2 3; do
    read -r f r < <(st "$i" | python3 -c 'import json,sys
v=json.load(sys.stdin); b=[t for t in v["tenants"] if t["name"]=="blue"][0]["stats"]
print((v.get("owners") or {}).get("forwarded", 0), b["rx_packets"])')
    fw=$((fw + f)); rx=$((rx + r))
  done
  echo "$ticks $fw $rx"
}
hz=$(getconf CLK_TCK)
gbps() { python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); print(v["end"]["sum_received"]["bits_per_second"]/1e9)'; }
for group in 1/2/3 1/2 1; do
  k=$(tr -cd / <<<"$group" | wc -c); k=$((k + 1))
  ip -n "$P-tor" nexthop replace id 10 group "$group" type resilient
  sleep 3  # (buckets settle: the group's idle timer is 2 s)
  g=$(ip netns exec "$P-c" iperf3 -c 10.1.0.2 -p 5201 -P 8 -t "$secs" -J | gbps)
  echo "{\"bench\":\"switch\",\"nodes\":$k,\"tenant\":\"green\",\"iperf3_tcp_P8_gbps\":$g,\"seconds\":$secs}"
  # Blue both ways: a sends (the replies through SNAT are ACKs), then b sends (-R: the bulk
  # is the SNAT's return traffic, which lands anywhere and is brought to its owner).
  for dir in a-sends b-sends; do
    R=""; [ "$dir" = b-sends ] && R=-R
    read -r t0 f0 r0 < <(counters)
    b=$(ip netns exec "$P-a" iperf3 -c 10.1.0.2 -p 5201 -P 8 -t "$secs" $R -J | gbps)
    read -r t1 f1 r1 < <(counters)
    python3 -c "
import json; k,b,t,f,r,hz,s=$k,$b,$((t1 - t0)),$((f1 - f0)),$((r1 - r0)),$hz,$secs
print(json.dumps({'bench':'switch','nodes':k,'tenant':'blue','direction':'$dir','iperf3_tcp_P8_gbps':b,
  'forwarded_share':round(f/max(r,1),3),'node_cpu_ns_per_packet':round(t/hz*1e9/max(r,1)),'packets':r,'seconds':s}))"
  done
done

# Failover.
ip -n "$P-tor" nexthop replace id 10 group 1/2/3 type resilient
ip netns exec "$P-tor" "$snic" tor --group 10 --member 1=http://10.0.1.2:7878 --member 2=http://10.0.2.2:7878 \
  --member 3=http://10.0.3.2:7878 >"$work/tor.log" 2>&1 & pids+=($!)
in_group() { ip -n "$P-tor" nexthop show id 10 | grep -q "group $1 "; }
has_buckets() { ip -n "$P-tor" nexthop bucket show id 10 | grep -Eq "nhid $1 *\$"; }
for r in $(seq "$rounds"); do
  wait_for "node 2 in the group" in_group 1/2/3; wait_for "node 2 has buckets" has_buckets 2
  t0=$(date +%s.%N)
  kill -9 "${node_pid[2]}"; wait "${node_pid[2]}" 2>/dev/null || true
  wait_for "node 2 out of the group" in_group 1/3
  t_out=$(date +%s.%N)
  ok=0
  for _ in $(seq 30); do  # (bounded: 30 tries of at most 3 s)
    if timeout 3 ip netns exec "$P-a" iperf3 -c 10.1.0.2 -p 5202 -P 8 -n 64K >/dev/null 2>&1; then ok=1; break; fi
  done
  [ "$ok" = 1 ] || { echo "bench-switch: no new connection succeeded after node 2 died" >&2; exit 1; }
  t_new=$(date +%s.%N)
  python3 -c "import json; print(json.dumps({'bench':'switch-failover','round':$r,'out_of_group_s':round($t_out-$t0,3),'new_connections_s':round($t_new-$t0,3)}))"
  start_node 2
done
