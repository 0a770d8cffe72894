#!/usr/bin/env bash
# What keeping a TCP burst whole through a userspace VTEP gives (issue 51, BENCHMARKS.md "The
# kernel's own per-packet forwarding"): a small Python relay in namespace A forwards between
# kernel VXLAN endpoints S and R. With UDP_GRO on its sockets, an endpoint that keeps its
# transmit offloads hands it each TSO burst as one datagram (up to 64 KB); the relay completes
# the burst's partial inner TCP checksum and sends it on as ONE datagram — the kernel fragments
# the outer IP packet, R's kernel reassembles it and its VXLAN device delivers one 64 KB inner
# packet to TCP. Then the same relay with endpoints that segment (transmit offload off): every
# datagram one by one. Then the kernel router (nftables firewall + SNAT) on its own veths.
#
#   S --vxlan--> A (relay) --vxlan--> R, iperf3 TCP S->R, one stream
#
#   scripts/probe-superpacket.sh [SECONDS]   (root; installs iperf3, ethtool, nftables,
#                                             python3-numpy if missing)
#
# A probe, not a peer: the relay does no firewall or NAT and handles IPv4/TCP only. Namespaces
# are removed on exit.
set -euo pipefail
secs=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
for t in iperf3:iperf3 ethtool:ethtool nft:nftables; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
py=/usr/bin/python3
$py -c 'import numpy' 2>/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null; }
. "$here/scripts/netns-lib.sh" probe-superpacket ps

cat >"$work/relay.py" <<'PY'
import select, socket, struct, sys, time
import numpy as np
SOL_UDP, UDP_GRO = 17, 104
def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s
def sum16(b):
    if len(b) & 1:
        b = bytes(b) + b"\0"
    return int(np.frombuffer(b, dtype=">u2").sum(dtype=np.uint64))
def complete(d):
    """Completes the inner TCP checksum of a VXLAN datagram d (Ethernet, IPv4, TCP)."""
    e = 8 + 14
    if len(d) < e + 40 or bytes(d[e - 2:e]) != b"\x08\x00" or d[e + 9] != 6:
        return
    ihl = (d[e] & 15) * 4
    tot = struct.unpack("!H", d[e + 2:e + 4])[0]
    l4, end = e + ihl, e + tot
    if end > len(d):
        return
    d[l4 + 16:l4 + 18] = b"\0\0"
    pseudo = bytes(d[e + 12:e + 20]) + struct.pack("!BBH", 0, 6, tot - ihl)
    d[l4 + 16:l4 + 18] = struct.pack("!H", ~fold(sum16(pseudo) + sum16(d[l4:end])) & 0xFFFF)
def sock(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.setsockopt(SOL_UDP, UDP_GRO, 1)
    s.bind((addr, 4789))
    return s
left, right = sock("192.168.61.1"), sock("192.168.62.1")
peer = {left: (right, ("192.168.62.2", 4789)), right: (left, ("192.168.61.2", 4789))}
buf = bytearray(70000)
whole = single = 0
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for s in select.select([left, right], [], [], 0.2)[0]:
        n, anc, _, _ = s.recvmsg_into([buf], 64)
        out, dst = peer[s]
        gso = next((struct.unpack("i", d[:4])[0] for l, t, d in anc if (l, t) == (SOL_UDP, UDP_GRO)), 0)
        if gso and n > gso:  # a GRO run of equal datagrams: on one by one
            for o in range(0, n, gso):
                d = memoryview(buf)[o:min(o + gso, n)]
                complete(d); out.sendto(d, dst); single += 1
            continue
        d = memoryview(buf)[:n]
        complete(d)
        out.sendto(d, dst)
        whole += n > 1600
        single += n <= 1600
print(f'"sent_whole_over_1600_bytes": {whole}, "sent_single": {single}', end="")
PY

gbps() { python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9, 3))'; }
for mode in whole segmented; do
  for n in s a r; do ip netns del "$P-$n" 2>/dev/null || true; done
  ns s; ns a; ns r
  veth s 192.168.61.2 a 192.168.61.1 $([ $mode = whole ] && echo keep-offload)
  veth a 192.168.62.1 r 192.168.62.2 $([ $mode = whole ] && echo keep-offload)
  vxlan_ep s 192.168.61.2 192.168.61.1 10.6.0.1 1400
  vxlan_ep r 192.168.62.2 192.168.62.1 10.6.0.2 1400
  ip netns exec "$P-a" $py "$work/relay.py" $((secs + 4)) >"$work/relay.out" & relay=$!; pids+=($relay)
  wait_for "relay up" listens a u 4789
  ip netns exec "$P-r" iperf3 -s -1 >/dev/null 2>&1 & pids+=($!)
  wait_for "iperf3 server" listens r t 5201
  ip netns exec "$P-s" ping -c 2 -W 2 10.6.0.2 >/dev/null
  g=$(ip netns exec "$P-s" iperf3 -c 10.6.0.2 -t "$secs" -J | gbps)
  wait "$relay"
  echo "{\"probe\":\"superpacket\",\"relay\":\"$mode\",\"iperf3_tcp_gbps\":$g,$(cat "$work/relay.out"),\"seconds\":$secs}"
done

kernel_router s2 k r2 192.168.71 192.168.72
ip netns exec "$P-r2" iperf3 -s -1 >/dev/null 2>&1 & pids+=($!)
wait_for "iperf3 server" listens r2 t 5201
echo "{\"probe\":\"superpacket\",\"relay\":\"kernel-router-nft-fw-nat\",\"iperf3_tcp_gbps\":$(ip netns exec "$P-s2" iperf3 -c 192.168.72.2 -t "$secs" -J | gbps),\"seconds\":$secs}"
