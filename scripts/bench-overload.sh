#!/usr/bin/env bash
# Weights, goodput and latency at overload through the daemon, with real senders (issue 49):
# three tenants of weights 1, 2 and 5, each with its own NT (synthetic, COST_NS a packet, on the
# dispatcher's core: the dispatcher is the bottleneck), each sending small UDP datagrams from
# iperf3 through a kernel VXLAN endpoint at the same rate. The node's capacity is measured first
# (all three flat out, its delivered rate); then the senders offer 1x, 3x and 10x of it, split
# evenly. One JSON line per multiple: each tenant's offered rate (counted at its sender), the
# rate that reached the node (what it received, plus what it dropped at its ingress: over the
# limit, its own receive queue full, no buffer), its delivered rate, and that over its weighted
# max-min fair share of what was delivered in all given what reached the node (water-filling:
# a tenant that sends less than its weight's part keeps what it sends, the rest is split by
# weight), its p99 and its drops by reason, the total goodput, the datagrams the kernel's
# per-CPU backlog dropped (`/proc/net/softnet_stat`, all CPUs; only one of the places where a
# packet can be lost before the node: offered minus reached counts them all, and snic can share
# none of them), how far each
# tenant's ingress limit ranged over the status snapshots (every 250 ms; (max - min) / max), and
# the share of a core the dispatcher thread got and the share it spent runnable but waiting for
# one (its schedstat: on this machine the senders and the kernel's receive path share its cores).
#
#   scripts/bench-overload.sh [SECONDS] [MULTIPLES...]   (root; installs iperf3 if missing)
#
# SNIC_BIN selects the snic binary (default target/release/snic, built if missing); COST_NS the
# NT's cost (default 100000: about 8 kpps a core). Namespaces and processes are removed on exit.
set -euo pipefail
secs=${1:-5}
shift || true
multiples=${*:-1 3 10}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
cost=${COST_NS:-100000}
# PIN=NODE:PEERS (default 0:1 on a machine of two or more CPUs; PIN= for none) runs the node
# on CPU NODE and the senders and receivers on CPU PEERS: the kernel's sending and receiving
# paths for a veth run on the sender's CPU, so the node's core is its own, as on a node with
# dedicated cores. Unpinned, the senders take a share of the node's core that grows with the
# offered load (dispatcher_waiting). NICE=N runs the node at that niceness, in a session of
# its own whose scheduling autogroup gets it too (e.g. -20, as docs/operations.md advises for a
# node that shares its machine).
pin=${PIN-$([ "$(nproc)" -ge 2 ] && echo 0:1)}
pin_node= pin_peers=
if [ -n "$pin" ]; then pin_node="taskset -c ${pin%%:*}"; pin_peers="taskset -c ${pin#*:}"; fi
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in iperf3:iperf3 ethtool:ethtool; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-overload ov

ns node
manifest=$work/m.yaml
: > "$manifest"
for i in 1 2 3; do
  w=$([ $i = 1 ] && echo 1 || { [ $i = 2 ] && echo 2 || echo 5; })
  vni=$((100 * i))
  ns s$i; ns r$i
  veth s$i 192.168.$i.2 node 192.168.$i.1
  veth r$i 192.168.$((10 + i)).2 node 192.168.$((10 + i)).1
  for e in s r; do
    local_ip=$([ $e = s ] && echo 192.168.$i.2 || echo 192.168.$((10 + i)).2)
    remote_ip=$([ $e = s ] && echo 192.168.$i.1 || echo 192.168.$((10 + i)).1)
    inner=$([ $e = s ] && echo 10.$i.0.1 || echo 10.$i.0.2)
    ip -n "$P-$e$i" link add vx0 type vxlan id $vni remote $remote_ip local $local_ip dstport 4789
    ip -n "$P-$e$i" link set vx0 mtu 1450
    ip -n "$P-$e$i" addr add $inner/24 dev vx0; ip -n "$P-$e$i" link set vx0 up
  done
  cat >> "$manifest" <<Y
apiVersion: snic/v1
kind: Tenant
metadata: {name: t$i}
spec: {vnis: [$vni], weight: $w}
---
apiVersion: snic/v1
kind: NT
metadata: {name: t$i-nt}
spec: {tenant: t$i, config: {kind: synthetic, cost_ns: $cost}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: t$i-path}
spec: {tenant: t$i, nodes: [t$i-nt]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: t$i-all}
spec: {vni: $vni, action: {dag: t$i-path}}
---
apiVersion: snic/v1
kind: Route
metadata: {name: t$i-s}
spec: {vni: $vni, vtep: '192.168.$i.2:4789', flood: true}
---
apiVersion: snic/v1
kind: Route
metadata: {name: t$i-r}
spec: {vni: $vni, vtep: '192.168.$((10 + i)).2:4789', flood: true}
---
Y
done
# With NICE, the node gets a session of its own (setsid execs in place: the PID stays the
# node's) and that session's scheduling autogroup the same nice value: where the kernel groups
# processes by session, nice alone counts only against this script's own processes.
gro node
${NICE:+nice -n $NICE setsid} $pin_node ip netns exec "$P-node" "$snic" run --data 0.0.0.0:4789 --state-dir "$work/state" >"$work/node.log" 2>&1 & pids+=($!)
node_pid=$!
if [ -n "${NICE:-}" ] && [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ]; then
  for _ in $(seq 100); do
    [ "$(awk '{print $6}' /proc/$node_pid/stat 2>/dev/null)" = "$node_pid" ] && break
    sleep 0.05
  done
  echo "$NICE" > /proc/$node_pid/autogroup
fi
wait_for "node up" ip netns exec "$P-node" "$snic" status
ip netns exec "$P-node" "$snic" apply -f "$manifest" >/dev/null
for i in 1 2 3; do
  # Each receiver knows its sender's MAC (no ARP needed across the node).
  ip netns exec "$P-s$i" ping -c 1 -W 2 10.$i.0.2 >/dev/null
done

status() { ip netns exec "$P-node" "$snic" status -o json; }
# send PPS: each sender offers PPS packets/s of 64-byte UDP until `stop_senders` ends it (their
# PIDs in `senders`; a sender still runs at most 600 s). Senders run until stopped, not for a
# fixed time, so that a measurement window that takes longer than planned (status answers
# slowly on a loaded machine) still lies wholly inside the time all three send: a window that
# outlasted the senders, who start one after another, read the tail in which only some still
# sent as if the node split its capacity that way (the loaded CI run of 3f61673).
# Every phase has its own one-test iperf3 servers on a port of its own: a server whose last test
# has not ended (its control connection's packets queued or lost at an overloaded node) would
# turn the next phase's sender away as busy.
senders=()
clients=()
port=5200
send() {
  local bps=$(( $1 * 64 * 8 ))
  port=$(( port + 1 ))
  for i in 1 2 3; do
    $pin_peers ip netns exec "$P-r$i" timeout -s KILL 620 iperf3 -s -1 -p $port >/dev/null 2>&1 & pids+=($!); senders+=($!)
    wait_for "iperf3 server $i" sh -c "[ -n \"\$(ip netns exec $P-r$i ss -Hltn 'sport = :$port')\" ]"
    $pin_peers ip netns exec "$P-s$i" timeout -s KILL 610 iperf3 -c 10.$i.0.2 -p $port -u -b "$bps" -l 64 -t 600 >"$work/client$i.log" 2>&1 & pids+=($!); senders+=($!); clients[$i]=$!
  done
}
# still_sending: fails, naming it, if a sender has ended (its iperf3 log says why).
still_sending() {
  for i in 1 2 3; do
    kill -0 "${clients[$i]}" 2>/dev/null || { echo "sender $i stopped before the window ended: $(tail -n 3 "$work/client$i.log")" >&2; return 1; }
  done
}
stop_senders() {
  for p in "${senders[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${senders[@]}"; do wait "$p" 2>/dev/null || true; done
  senders=()
}
# sent: the time, each sender's VXLAN transmit count, the kernel's backlog drops (all CPUs)
# and the dispatcher thread's schedstat (ns on a CPU, ns runnable but waiting for one), on one
# line.
sent() {
  local line; line=$(date +%s.%N)
  for i in 1 2 3; do line+=" $(ip netns exec "$P-s$i" cat /sys/class/net/vx0/statistics/tx_packets)"; done
  local backlog=0 _a b _rest
  while read -r _a b _rest; do backlog=$(( backlog + 0x$b )); done < /proc/net/softnet_stat
  line+=" $backlog"
  local task
  for task in /proc/$node_pid/task/*; do
    if [ "$(cat "$task/comm")" = snic-dataplane ]; then line+=" $(cut -d' ' -f1,2 "$task/schedstat")"; fi
  done
  echo "$line"
}
# window SECONDS: status snapshots every 0.25 s over SECONDS; prints the JSON summary.
window() {
  local snaps=$work/snaps.json
  : > "$snaps"
  local end=$(( $(date +%s%N) + $1 * 1000000000 ))
  sent > "$work/sent0"
  # Snapshots every 0.25 s until SECONDS have passed (fewer when status answers slowly).
  while status >> "$snaps" && echo >> "$snaps" && [ "$(date +%s%N)" -lt "$end" ]; do sleep 0.25; done
  sent > "$work/sent1"
  still_sending
  python3 - "$snaps" "$2" "$3" "$work/sent0" "$work/sent1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec = json.JSONDecoder(); snaps = []; i = 0
while i < len(text):
    if text[i].isspace(): i += 1; continue
    v, i = dec.raw_decode(text, i); snaps.append(v)
mult, cap = float(sys.argv[2]), float(sys.argv[3])
first, last = snaps[0], snaps[-1]
def t(v, name): return next(x for x in v["tenants"] if x["name"] == name)
weights = {"t1": 1, "t2": 2, "t3": 5}
# What each sender offered: its VXLAN device's transmitted packets over the window (counted at
# the sender, so a node that loses packets where it cannot count them is measured alike).
s0, s1 = (open(f).read().split() for f in sys.argv[4:6])
dt = float(s1[0]) - float(s0[0])
offered = {n: (int(s1[k + 1]) - int(s0[k + 1])) / dt for k, n in enumerate(weights)}
backlog = (int(s1[4]) - int(s0[4])) / dt
# How much of a core the dispatcher got, and how long it waited for one, over the window.
cpu, waiting = ((int(s1[k]) - int(s0[k])) / 1e9 / dt for k in (5, 6))
deliv = {n: (t(last, n)["stats"]["tx_packets"] - t(first, n)["stats"]["tx_packets"]) / dt for n in weights}
# What reached the node: received, or dropped at its ingress (nothing else is dropped before a
# packet is counted received).
AT_INGRESS = ("rate_limit", "rx_queue_full", "store_full")
def ingress(v, n):
    st = t(v, n)["stats"]
    return st["rx_packets"] + sum(c for r, c in st["drops"] if r in AT_INGRESS)
reached = {n: (ingress(last, n) - ingress(first, n)) / dt for n in weights}
total = sum(deliv.values()) or 1
# Weighted max-min fair shares of `total` for what reached the node (water-filling).
fair, left, open_ = {}, total, set(weights)
while open_:
    unit = left / sum(weights[n] for n in open_)
    sat = [n for n in open_ if reached[n] <= unit * weights[n]]
    if not sat:
        for n in open_: fair[n] = unit * weights[n]
        break
    for n in sat: fair[n] = reached[n]; left -= reached[n]; open_.discard(n)
out = {"bench": "overload", "multiple": mult, "capacity_pps": round(cap), "goodput_pps": round(total),
       "kernel_backlog_drops_pps": round(backlog),
       "dispatcher_cpu": round(cpu, 2), "dispatcher_waiting": round(waiting, 2),
       "dispatcher_capacity": [round(f(r["capacity"] for s in snaps for r in s["fairness"]["resources"] if r["name"] == "dispatcher"), 2) for f in (min, max)],
       "tenants": []}
for n, w in weights.items():
    lims = [t(s, n)["stats"]["fair"]["limit_pps"] for s in snaps]
    lim = [x for x in lims if x is not None]
    spread = 1.0 if len(lim) < len(lims) and lim else ((max(lim) - min(lim)) / max(lim) if lim and max(lim) > 0 else 0.0)
    drops = {}
    for r, c in t(last, n)["stats"]["drops"]:
        before = dict(t(first, n)["stats"]["drops"]).get(r, 0)
        if c - before: drops[r] = c - before
    out["tenants"].append({"name": n, "weight": w, "offered_pps": round(offered[n]), "reached_pps": round(reached[n]), "delivered_pps": round(deliv[n]),
        "over_fair_share": round(deliv[n] / fair[n], 3) if fair.get(n) else None,
        "p99_ms": round(t(last, n)["stats"]["latency_p99_ns"] / 1e6, 2), "limit_range": round(spread, 2), "drops": drops})
print(json.dumps(out))
PY
}

# Capacity: all three flat out (each 2x what the NT allows the whole node).
nominal=$(( 800000000 / cost ))
send $(( 2 * nominal ))
sleep 2
cap=$(window "$secs" 0 0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["goodput_pps"])')
stop_senders
sleep 1
for m in $multiples; do
  each=$(python3 -c "print(max(1, round($m * $cap / 3)))")
  send "$each"
  sleep 2
  window "$secs" "$m" "$cap"
  stop_senders
  sleep 1
done
