#!/usr/bin/env bash
# What configured but idle tenants cost a node (issue 15): one active tenant's iperf3 TCP through
# a real node (kernel VXLAN endpoints A and B, DAG: a counter NT), with the node holding only that
# tenant, and with 1022 more tenants configured that send nothing (each its VNI, a DAG on the
# shared counter NT and a rule: the node's maximum, 1023 tenants). Per state, interleaved over
# ROUNDS rounds (a fresh node each): the node's CPU with no traffic, the active tenant's TCP
# throughput, and the time of a small apply (one tenant and one rule) against that state.
#
#   scripts/bench-idle.sh [SECONDS] [ROUNDS]     (root; installs iperf3, ethtool if missing)
#
# SNIC_BIN selects the snic binary (default: target/release/snic, built if missing). Prints one
# JSON line per round and state. Every namespace is created here and deleted on exit, pass or
# fail; traffic stays inside them.
set -euo pipefail
secs=${1:-5}
rounds=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in iperf3:iperf3 ethtool:ethtool ping:iputils-ping; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-idle bi
node_pid=
before_cleanup() { [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null || true; }

# endpoint NS I INNER: veth to the node (192.168.I.0/24), kernel VXLAN vx0 on VNI 100.
endpoint() {
  ns "$1"
  local en="$P$1n" ee="$P$1e"
  ip link add "$en" type veth peer name "$ee"
  ip link set "$en" netns "$P-node"; ip link set "$ee" netns "$P-$1"
  ip -n "$P-node" addr add "192.168.$2.1/24" dev "$en"; ip -n "$P-node" link set "$en" up
  ip -n "$P-$1" addr add "192.168.$2.2/24" dev "$ee"; ip -n "$P-$1" link set "$ee" up
  ip netns exec "$P-$1" ethtool -K "$ee" tx off >/dev/null
  ip -n "$P-$1" link add vx0 type vxlan id 100 remote "192.168.$2.1" local "192.168.$2.2" dev "$ee" dstport 4789
  ip -n "$P-$1" link set vx0 mtu 1400
  ip -n "$P-$1" addr add "$3" dev vx0; ip -n "$P-$1" link set vx0 up
}
doc() { printf -- '---\napiVersion: snic/v1\nkind: %s\nmetadata: {name: %s}\nspec: %s\n' "$1" "$2" "$3"; }

ns node
endpoint a 1 10.1.0.1/24
endpoint b 2 10.1.0.2/24
{
  doc Tenant blue '{vnis: [100]}'
  doc NT count '{tenant: blue, shared_with: ["*"], config: {kind: counter}}'
  doc DAG blue-path '{tenant: blue, nodes: [count]}'
  doc Rule blue-all '{vni: 100, action: {dag: blue-path}}'
  doc Route ra "{vni: 100, vtep: '192.168.1.2:4789', flood: true}"
  doc Route rb "{vni: 100, vtep: '192.168.2.2:4789', flood: true}"
} >"$work/active.yaml"
for i in $(seq 1 1022); do
  doc Tenant "idle-$i" "{vnis: [$((1000 + i))]}"
  doc DAG "idle-$i" "{tenant: idle-$i, nodes: [count]}"
  doc Rule "idle-$i" "{vni: $((1000 + i)), action: {dag: idle-$i}}"
done >"$work/idle.yaml"
{
  doc Tenant probe '{vnis: [99]}'
  doc Rule probe '{vni: 99, action: pass_through}'
} >"$work/probe.yaml"

ip netns exec "$P-b" iperf3 -s >/dev/null 2>&1 & pids+=($!)
wait_for "iperf3 server" sh -c "[ -n \"\$(ip netns exec $P-b ss -Hltn 'sport = :5201')\" ]"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
measure() { # STATE ROUND
  local state=$1 round=$2 tps ticks0 ticks1 cpu gbps applies=()
  rm -rf "$work/state"
  gro node
  ip netns exec "$P-node" "$snic" run --data 0.0.0.0:4789 --state-dir "$work/state" >"$work/node.log" 2>&1 &
  node_pid=$!
  wait_for "node up" ip netns exec "$P-node" "$snic" status
  ip netns exec "$P-node" "$snic" apply -f "$work/active.yaml" >/dev/null
  if [ "$state" = idle ]; then
    # 1021 idle tenants and the probe: 1023 tenants, the node's maximum.
    head -n $(( 3 * 5 * 1021 )) "$work/idle.yaml" >"$work/idle-part.yaml"
    ip netns exec "$P-node" "$snic" apply -f "$work/idle-part.yaml" >/dev/null
  fi
  # A small apply and its undo, five times: the median apply time.
  for _ in 1 2 3 4 5; do
    local t0 t1
    t0=$(date +%s%N)
    ip netns exec "$P-node" "$snic" apply -f "$work/probe.yaml" >/dev/null
    t1=$(date +%s%N)
    applies+=($(( (t1 - t0) / 1000 )))
    ip netns exec "$P-node" "$snic" delete rule probe >/dev/null
    ip netns exec "$P-node" "$snic" delete tenant probe >/dev/null
  done
  # The node's CPU with no traffic, over 2 s.
  tps=$(getconf CLK_TCK)
  ticks0=$(cpu_ticks "$node_pid"); sleep 2; ticks1=$(cpu_ticks "$node_pid")
  cpu=$(awk -v a="$ticks0" -v b="$ticks1" -v h="$tps" 'BEGIN { printf "%.3f", (b - a) / h / 2 }')
  ip netns exec "$P-a" ping -c 3 -i 0.2 -W 2 10.1.0.2 >/dev/null
  gbps=$(ip netns exec "$P-a" iperf3 -c 10.1.0.2 -t "$secs" -J |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
  local tenants
  tenants=$(ip netns exec "$P-node" "$snic" status -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tenants"]))')
  local median
  median=$(printf '%s\n' "${applies[@]}" | sort -n | sed -n 3p)
  echo "{\"bench\":\"idle_tenants\",\"state\":\"$state\",\"round\":$round,\"tenants\":$tenants,\"idle_cpu_cores\":$cpu,\"iperf3_tcp_gbps\":$gbps,\"small_apply_ms\":$(awk -v u="$median" 'BEGIN { printf "%.1f", u / 1000 }'),\"seconds\":$secs}"
  kill "$node_pid"; wait "$node_pid" 2>/dev/null || true; node_pid=
}
for r in $(seq 1 "$rounds"); do
  measure alone "$r"
  measure idle "$r"
done
