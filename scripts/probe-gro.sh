#!/usr/bin/env bash
# What UDP GRO gives a userspace VTEP between kernel VXLAN endpoints (groundwork for issue 51,
# BENCHMARKS.md "Where a VPC node's time goes"): a small Python relay in namespace A forwards
# every message between S and R unchanged — a GRO message out again as one UDP_SEGMENT send —
# with GRO on A's interfaces and then off, and counts the datagrams each message carried.
#
#   S --vxlan--> A (relay: UDP_GRO receive, UDP_SEGMENT send) --vxlan--> R, iperf3 TCP S->R
#
#   scripts/probe-gro.sh [SECONDS]      (root; installs iperf3 and ethtool if missing)
#
# The endpoints keep TSO on their VXLAN devices and turn transmit offload off on the underlay
# (netns-lib.sh's veth: inner checksums completed in software), so each TSO burst leaves as a
# run of datagrams that GRO on A's veth can coalesce. Namespaces are removed on exit.
set -euo pipefail
secs=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
for t in iperf3:iperf3 ethtool:ethtool; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" probe-gro pg

cat >"$work/relay.py" <<'PY'
import select, socket, struct, sys, time
SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
def sock(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(SOL_UDP, UDP_GRO, 1)
    s.bind((addr, 4789)); s.setblocking(False)
    return s
left, right = sock("192.168.1.1"), sock("192.168.2.1")
peer = {left: (right, ("192.168.2.2", 4789)), right: (left, ("192.168.1.2", 4789))}
msgs = {left: 0, right: 0}; dgrams = {left: 0, right: 0}
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for s in select.select([left, right], [], [], 0.2)[0]:
        while True:
            try:
                data, anc, _, _ = s.recvmsg(65535, 64)
            except BlockingIOError:
                break
            gso = next((struct.unpack("i", d[:4])[0] for l, t, d in anc if (l, t) == (SOL_UDP, UDP_GRO)), 0)
            out, dst = peer[s]
            msgs[s] += 1
            if gso and len(data) > gso:
                dgrams[s] += (len(data) + gso - 1) // gso
                out.sendmsg([data], [(SOL_UDP, UDP_SEGMENT, struct.pack("H", gso))], 0, dst)
            else:
                dgrams[s] += 1
                out.sendto(data, dst)
for name, s in (("S->R", left), ("R->S", right)):
    print(f'"{name}": {{"messages": {msgs[s]}, "datagrams": {dgrams[s]}, "per_message": {dgrams[s] / max(msgs[s], 1):.1f}}}', end=", " if s is left else "")
PY

ns s; ns a; ns r
veth s 192.168.1.2 a 192.168.1.1
veth a 192.168.2.1 r 192.168.2.2
vxlan_ep s 192.168.1.2 192.168.1.1 10.1.0.1 1400
vxlan_ep r 192.168.2.2 192.168.2.1 10.1.0.2 1400
for gro in on off; do
  for i in $(ip -n "$P-a" -o link show type veth | awk -F'[ :@]+' '{print $2}'); do
    ip netns exec "$P-a" ethtool -K "$i" gro "$gro" >/dev/null
  done
  ip netns exec "$P-a" python3 "$work/relay.py" $((secs + 3)) >"$work/relay.out" & relay=$!; pids+=($relay)
  wait_for "relay up" listens a u 4789
  ip netns exec "$P-r" iperf3 -s -1 >/dev/null 2>&1 & pids+=($!)
  wait_for "iperf3 server" listens r t 5201
  gbps=$(ip netns exec "$P-s" iperf3 -c 10.1.0.2 -t "$secs" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
  wait "$relay"
  echo "{\"probe\":\"gro\",\"relay_veth_gro\":\"$gro\",\"iperf3_tcp_gbps\":$gbps,$(cat "$work/relay.out"),\"seconds\":$secs}"
done
