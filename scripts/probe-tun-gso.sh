#!/usr/bin/env bash
# What a userspace VTEP gets if a TCP burst leaves it as ONE tunnel super-packet (issue 51's
# redesign, BENCHMARKS.md "Keeping the burst whole: a tun device with tunnel GSO"). A small
# Python relay in namespace A forwards between kernel VXLAN endpoints S and R that keep their
# transmit offloads: with UDP_GRO on its socket it receives each TSO burst as one datagram (one
# VXLAN header over an inner TCP packet of up to 64 KB, the kernel giving the inner MSS) and
#   tap:   writes it, behind new outer Ethernet, IPv4 and UDP headers, into a tap device with a virtio-net
#          header that says "UDP tunnel GSO, inner TCPv4, this MSS, inner checksum partial"
#          (Linux 6.17+, TUN_F_UDP_TUNNEL_GSO; a tap, not a tun: the tunnel offsets count
#          from the outer MAC header). The kernel routes it to R as one GSO packet:
#          veth carries it whole, R's VXLAN device decapsulates it whole and its TCP takes one
#          64 KB packet. Nobody segments it and nobody sums its payload.
#   whole: sends it as one UDP datagram (the kernel fragments the outer packet and R's
#          reassembles it: the other way to keep it whole, probe-superpacket.sh's).
# Then the kernel router (nftables firewall + SNAT, routed, offloads on) on its own veths.
#
#   S --vxlan--> A (relay) --vxlan--> R, iperf3 TCP S->R, one stream
#
#   scripts/probe-tun-gso.sh [SECONDS]   (root; installs iperf3, ethtool, nftables,
#                                         python3-numpy if missing)
#
# Like for like with the kernel router's work: the relay drops TCP to port 22 and source-NATs S's
# inner address (address only), per burst. A probe, not a peer: IPv4/TCP only, no flow table,
# and the other direction (R's ACKs) datagram by datagram. Prints one JSON line per path. Namespaces are
# removed on exit.
set -euo pipefail
secs=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
for t in iperf3:iperf3 ethtool:ethtool nft:nftables; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
/usr/bin/python3 -c 'import numpy' 2>/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null; }
. "$here/scripts/netns-lib.sh" probe-tun-gso pt

cat >"$work/relay.py" <<'PY'
import fcntl, os, select, socket, struct, sys, time
import numpy as np
SOL_UDP, UDP_GRO = 17, 104
TUNSETIFF, TUNSETOFFLOAD, TUNSETVNETHDRSZ = 0x400454CA, 0x400454D0, 0x400454D8
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x0002, 0x1000, 0x4000
# Offloads (linux/if_tun.h): checksum, TSO, and GSO over UDP tunnels (6.17+).
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_UDP_TUNNEL_GSO = 0x01, 0x02, 0x04, 0x080
# virtio_net_hdr_v1_hash_tunnel: 12 bytes v1, 8 of hash, outer_th_offset, inner_nh_offset.
VNET = 24
GSO_TCPV4, GSO_UDP_TUNNEL_IPV4, F_NEEDS_CSUM = 1, 0x20, 1
mode, secs = sys.argv[1], float(sys.argv[2])
INNER_MTU = 1400
def sock(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.setsockopt(SOL_UDP, UDP_GRO, 1)
    s.bind((addr, 4789))
    return s
left, right = sock("192.168.81.1"), sock("192.168.82.1")
tun = None
if mode == "tap":
    tun = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", b"ptun0", IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
    # (A tap: tunnel offsets count from the outer MAC header, which a tun's packets lack.)
    mac = bytes.fromhex(open("/sys/class/net/ptun0/address").read().strip().replace(":", ""))
    ETH = mac + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    fcntl.ioctl(tun, TUNSETVNETHDRSZ, struct.pack("i", VNET))
    try:
        fcntl.ioctl(tun, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_UDP_TUNNEL_GSO)
    except OSError as e:
        print(f'"error": "TUNSETOFFLOAD with UDP tunnel GSO refused ({e}): kernel before 6.17"', end=""); sys.exit(0)
    open("/tmp/ptun.ready", "w").close()
def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s
def sum16(b):
    if len(b) & 1:
        b = bytes(b) + b"\0"
    return int(np.frombuffer(b, dtype=">u2").sum(dtype=np.uint64))
def complete(d):
    """Completes the partial inner TCP checksum the endpoints leave (they keep their offloads)."""
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
def ip_sum(h):
    s = sum(struct.unpack("!10H", h))
    while s >> 16: s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
def outer(n):
    """Outer IPv4 and UDP headers, A's right address to R, for a VXLAN payload of n bytes."""
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + n, 0, 0x4000, 64, 17, 0,
                               socket.inet_aton("192.168.82.1"), socket.inet_aton("192.168.82.2")))
    ip[10:12] = struct.pack("!H", ip_sum(bytes(ip)))
    return bytes(ip) + struct.pack("!HHHH", 4789, 4789, 8 + n, 0)
# Like for like with the kernel router: a firewall dropping TCP to port 22 and a source NAT of
# S's inner address to 10.8.0.100 (address only), its replies translated back. Header work
# only, once per burst: the rewrite adjusts a partial TCP checksum (the pseudo-header's sum,
# which the kernel completes) by the address's difference, RFC 1624.
INSIDE, PUBLIC = socket.inet_aton("10.8.0.1"), socket.inet_aton("10.8.0.100")
def words(b):
    return struct.unpack("!2H", b)
def rewrite(d, at, new, l4, partial):
    """Replaces the 4-byte address at d[at] (inner IPv4 at d[22]); fixes the IP checksum and, if
    `partial`, the partial TCP checksum at d[l4 + 16]."""
    old = bytes(d[at:at + 4])
    d[at:at + 4] = new
    e = 22
    ihl = (d[e] & 15) * 4
    d[e + 10:e + 12] = b"\0\0"
    d[e + 10:e + 12] = struct.pack("!H", ~fold(sum16(d[e:e + ihl])) & 0xFFFF)
    if partial:
        c = struct.unpack("!H", d[l4 + 16:l4 + 18])[0]
        c = fold(c + sum(~w & 0xFFFF for w in words(old)) + sum(words(new)))
        d[l4 + 16:l4 + 18] = struct.pack("!H", c)
dropped = 0
def fw_nat_out(d, partial):
    """S to R: False if the firewall drops it; else its source translated."""
    global dropped
    e = 22
    if len(d) < e + 40 or bytes(d[e - 2:e]) != b"\x08\x00":
        return True
    ihl = (d[e] & 15) * 4
    if d[e + 9] == 6 and struct.unpack("!H", d[e + ihl + 2:e + ihl + 4])[0] == 22:
        dropped += 1
        return False
    if bytes(d[e + 12:e + 16]) == INSIDE:
        rewrite(d, e + 12, PUBLIC, e + ihl, partial and d[e + 9] == 6)
    return True
def nat_back(d):
    """R to S: replies to the public address back to S's (checksums completed after)."""
    e = 22
    if len(d) >= e + 20 and bytes(d[e - 2:e]) == b"\x08\x00" and bytes(d[e + 16:e + 20]) == PUBLIC:
        rewrite(d, e + 16, INSIDE, e + (d[e] & 15) * 4, False)
buf = bytearray(70000)
tunneled = whole = single = 0
end = time.time() + secs
while time.time() < end:
    for s in select.select([left, right], [], [], 0.2)[0]:
        n, anc, _, _ = s.recvmsg_into([buf], 64)
        gso = next((struct.unpack("i", d[:4])[0] for l, t, d in anc if (l, t) == (SOL_UDP, UDP_GRO)), 0)
        d = memoryview(buf)[:n]
        if s is right:  # R's ACKs back to S, one by one
            step = gso if gso and n > gso else n
            for o in range(0, n, step):
                x = d[o:min(o + step, n)]
                nat_back(x); complete(x); left.sendto(x, ("192.168.81.2", 4789)); single += 1
            continue
        e = 8 + 14  # VXLAN, inner Ethernet
        tcp = n >= e + 40 and bytes(d[e - 2:e]) == b"\x08\x00" and d[e + 9] == 6
        big = tcp and n > 1600
        if tun is not None and tcp:
            # Into the tap, checksum left partial for the kernel (NEEDS_CSUM); a burst as one
            # tunnel-GSO packet at the inner MSS.
            if not fw_nat_out(d, True):
                continue
            ihl = (d[e] & 15) * 4
            thl = (d[e + ihl + 12] >> 4) * 4
            l4 = 14 + 28 + e + ihl
            # (The kernel gives no size for such a burst: segments as the endpoint's inner MTU,
            # 1400, allows, what the endpoint's own TSO would have cut.)
            mss = gso or INNER_MTU - ihl - thl
            kind = (GSO_TCPV4 | GSO_UDP_TUNNEL_IPV4) if big else 0
            hdr = struct.pack("<BBHHHHH", F_NEEDS_CSUM, kind, l4 + thl, mss if big else 0, l4, 16, 0)
            hdr += b"\0" * 8 + struct.pack("<HH", 14 + 20 if big else 0, 14 + 28 + e if big else 0)
            os.writev(tun, [hdr, ETH, outer(n), d]); tunneled += big
            single += not big
        elif big:
            if fw_nat_out(d, False):
                complete(d); right.sendto(d, ("192.168.82.2", 4789)); whole += 1
        else:
            step = gso if gso and n > gso and not big else n
            for o in range(0, n, step):
                x = d[o:min(o + step, n)]
                if fw_nat_out(x, False):
                    complete(x); right.sendto(x, ("192.168.82.2", 4789)); single += 1
print(f'"tunnel_gso_writes": {tunneled}, "whole_datagrams": {whole}, "single": {single}, "firewall_dropped": {dropped}', end="")
PY

gbps() { python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9, 3))'; }
for mode in tap whole; do
  for n in s a r; do ip netns del "$P-$n" 2>/dev/null || true; done
  rm -f /tmp/ptun.ready
  ns s; ns a; ns r
  veth s 192.168.81.2 a 192.168.81.1 keep-offload
  veth a 192.168.82.1 r 192.168.82.2 keep-offload
  vxlan_ep s 192.168.81.2 192.168.81.1 10.8.0.1 1400
  vxlan_ep r 192.168.82.2 192.168.82.1 10.8.0.2 1400
  ip netns exec "$P-a" /usr/bin/python3 "$work/relay.py" "$mode" $((secs + 4)) >"$work/relay.out" & relay=$!; pids+=($relay)
  wait_for "relay up" listens a u 4789
  if [ "$mode" = tap ]; then
    wait_for "tap up" test -e /tmp/ptun.ready
    # Packets the relay writes come from A's own address: accepted from the tap, forwarded to R.
    ip -n "$P-a" link set ptun0 up
    for k in net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.ptun0.rp_filter=0 net.ipv4.conf.ptun0.accept_local=1; do
      ip netns exec "$P-a" sysctl -qw "$k"
    done
  fi
  # The NAT's public address lives on the overlay: R must know where it is.
  ip -n "$P-r" neigh add 10.8.0.100 lladdr "$(ip -n "$P-s" link show vx0 | awk '/link\/ether/{print $2}')" dev vx0 nud permanent
  ip netns exec "$P-r" iperf3 -s -1 -J >"$work/server.json" 2>/dev/null & server=$!; pids+=($server)
  wait_for "iperf3 server" listens r t 5201
  ip netns exec "$P-s" ping -c 2 -W 2 10.8.0.2 >/dev/null
  # The firewall holds: a connection to port 22 gets nowhere.
  ! ip netns exec "$P-s" timeout 2 bash -c 'exec 3<>/dev/tcp/10.8.0.2/22' 2>/dev/null
  out=$(ip netns exec "$P-s" iperf3 -c 10.8.0.2 -t "$secs" -J || true)
  g=$(gbps <<<"$out" 2>/dev/null || echo 0)
  [ "$g" != 0 ] || echo "iperf3 through the $mode relay: $(tr -d '\n' <<<"$out" | head -c 300)" >&2
  wait "$relay"; wait "$server" || true
  # The source R saw: the NAT's public address.
  seen=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["start"]["connected"][0]["remote_host"])' <"$work/server.json" 2>/dev/null || echo none)
  echo "{\"probe\":\"tun-gso\",\"relay\":\"$mode\",\"iperf3_tcp_gbps\":$g,$(cat "$work/relay.out"),\"receiver_saw\":\"$seen\",\"seconds\":$secs}"
done
rm -f /tmp/ptun.ready

kernel_router s2 k r2 192.168.91 192.168.92
ip netns exec "$P-r2" iperf3 -s -1 >/dev/null 2>&1 & pids+=($!)
wait_for "iperf3 server" listens r2 t 5201
echo "{\"probe\":\"tun-gso\",\"relay\":\"kernel-router-nft-fw-nat\",\"iperf3_tcp_gbps\":$(ip netns exec "$P-s2" iperf3 -c 192.168.92.2 -t "$secs" -J | gbps),\"seconds\":$secs}"
