#!/usr/bin/env bash
# The AF_XDP backend against dpdk-testpmd's net_af_xdp PMD on the same veth (issue 51).
#
#   scripts/bench-afxdp.sh [SECONDS] [INNER_SIZES]      (root; defaults 5 s, "64 1400")
#
# Two namespaces joined by one veth pair: `gen` replays VXLAN frames (VNI 100, one inner flow of
# INNER bytes a frame) at top speed with tcpreplay on CPU 0; `node` runs, on CPU 1, either a snic
# node (`io: af_xdp`, native XDP on its veth, the dummy chain, a static route back to the
# generator's address on port 4790) or testpmd (`net_af_xdp` on the same veth, macswap, one
# forwarding core). Both send every frame back out the same veth; what the generator's veth
# receives in the window is the forwarded rate, what it sends the offered rate. Peers alternate
# (snic, testpmd, snic) for each size, so that drift shows. One JSON line per run, then ratios.
#
# PROFILE=DIR records a perf profile of each run's forwarder into DIR.
# Installs tcpreplay and dpdk-dev if missing (Debian); builds snic with --features af_xdp.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
sizes=${2:-64 1400}
. "$here/scripts/netns-lib.sh" bench-afxdp xb
[ "$(id -u)" = 0 ] || { echo "bench-afxdp: needs root (namespaces, XDP)" >&2; exit 1; }
for t in tcpreplay:tcpreplay dpdk-testpmd:dpdk-dev; do
  command -v "${t%%:*}" >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null
done
cargo build -q --release --manifest-path "$here/Cargo.toml" -p snic --features af_xdp >&2
snic="$here/target/release/snic"

ns gen
ns node
veth gen 192.168.60.2 node 192.168.60.1 keep-offload
gdev="${P}gennode"; gdev=${gdev:0:15}
ndev="${P}nodegen"; ndev=${ndev:0:15}
gmac=$(cat "/sys/class/net/$gdev/address" 2>/dev/null || ip netns exec "$P-gen" cat "/sys/class/net/$gdev/address")
nmac=$(ip netns exec "$P-node" cat "/sys/class/net/$ndev/address")
# The generator drops what comes back at its veth's ingress (counted there first), so that
# neither peer's frames cost the generator's kernel more than the other's: without it snic's
# (to a UDP port with no socket) went up the stack, testpmd's (to the node's address) did not —
# and the returned frames are processed on the forwarder's CPU (veth hands them to its backlog).
ip netns exec "$P-gen" nft "add table netdev sink; add chain netdev sink in { type filter hook ingress device $gdev priority 0; policy drop; }"

# pcap SIZE: 64 frames of one tenant's flow (inner UDP source ports differ) into $work/SIZE.pcap.
pcap() {
  python3 - "$1" "$gmac" "$nmac" "$work/$1.pcap" <<'PY'
import socket, struct, sys
size, gmac, nmac, out = int(sys.argv[1]), *sys.argv[2:4], sys.argv[4]
mac = lambda m: bytes.fromhex(m.replace(':', ''))
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def ip4(src, dst, payload):
    h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(payload), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack('!H', csum(h)) + h[12:] + payload
with open(out, 'wb') as f:
    f.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
    for i in range(64):
        data = b'\0' * (size - 14 - 20 - 8)
        inner = mac('02:00:00:00:00:0b') + mac('02:00:00:00:00:0a') + b'\x08\x00' + ip4('10.1.0.1', '10.1.0.2', struct.pack('!HHHH', 1000 + i, 9, 8 + len(data), 0) + data)
        vx = struct.pack('!II', 0x08000000, 100 << 8) + inner
        frame = mac(nmac) + mac(gmac) + b'\x08\x00' + ip4('192.168.60.2', '192.168.60.1', struct.pack('!HHHH', 40000, 4789, 8 + len(vx), 0) + vx)
        f.write(struct.pack('<IIII', 0, i, len(frame), len(frame)) + frame)
PY
}

counter() { ip netns exec "$P-gen" cat "/sys/class/net/$gdev/statistics/$1"; }
# cpu PID: the process's user + system time so far, in clock ticks (all its threads).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure PEER SIZE PID: replays SIZE's frames and prints the JSON line, with the share of one
# core the forwarder PID used (testpmd polls: always 1).
measure() {
  local peer=$1 size=$2 pid=$3 rx0 tx0 rx1 tx1 c0 c1
  ip netns exec "$P-gen" taskset -c 0 timeout $((secs + 4)) tcpreplay -q -i "$gdev" --topspeed --preload-pcap \
    --loop=1000000000 "$work/$size.pcap" >/dev/null 2>&1 &
  local gen=$!
  sleep 1.5
  rx0=$(counter rx_packets); tx0=$(counter tx_packets); c0=$(cpu "$pid")
  if [ -n "${PROFILE:-}" ]; then
    # PROFILE=DIR: a perf profile of the forwarder over the window, DIR/PEER-SIZE.perf.
    perf record -q -F 999 -g -o "$PROFILE/$peer-$size.perf" -p "$pid" -- sleep "$secs" >/dev/null 2>&1
  else
    sleep "$secs"
  fi
  rx1=$(counter rx_packets); tx1=$(counter tx_packets); c1=$(cpu "$pid")
  kill "$gen" 2>/dev/null || true; wait "$gen" 2>/dev/null || true
  python3 -c "import sys, os; p, s, r, t, w, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]); \
c = c / os.sysconf('SC_CLK_TCK') / w; \
print(f'{{\"peer\":\"{p}\",\"inner_bytes\":{s},\"outer_bytes\":{s + 50},\"offered_mpps\":{t / w / 1e6:.3f},\"forwarded_mpps\":{r / w / 1e6:.3f},\"forwarder_cores\":{c:.2f},\"forwarder_us_per_packet\":{c / max(r / w, 1) * 1e6:.2f}}}')" \
    "$peer" "$size" $((rx1 - rx0)) $((tx1 - tx0)) "$secs" $((c1 - c0))
}

snic_run() { # SIZE
  mkdir -p "$work/state"
  cat >"$work/node.yaml" <<EOF
rx_queues: shared
io: {af_xdp: {interface: $ndev, queue: 0, mode: native}}
EOF
  cat >"$work/m.yaml" <<EOF
apiVersion: snic/v1
kind: Tenant
metadata: {name: t}
spec: {vnis: [100]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: d}
spec: {tenant: t, config: {kind: dummy}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: path}
spec: {tenant: t, nodes: [d]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: all}
spec: {vni: 100, action: {dag: path}}
---
apiVersion: snic/v1
kind: Route
metadata: {name: back}
spec: {vni: 100, vtep: '192.168.60.2:4790', mac: '02:00:00:00:00:0b', vtep_mac: '$gmac'}
EOF
  ip netns exec "$P-node" taskset -c 1 "$snic" run --config "$work/node.yaml" --data 0.0.0.0:4789 --api 127.0.0.1:7878 \
    --state-dir "$work/state" >"$work/node.log" 2>&1 &
  local node=$!
  pids+=("$node")
  wait_for "the node answers" ip netns exec "$P-node" "$snic" status
  ip netns exec "$P-node" "$snic" apply -f "$work/m.yaml" >/dev/null
  measure snic-af_xdp-dummy "$1" "$node"
  kill -INT "$node"; wait "$node" 2>/dev/null || true
  rm -rf "$work/state"
}

testpmd_run() { # SIZE
  # (testpmd forwards until its standard input ends: a sleep holds it open.)
  sleep $((secs + 40)) | ip netns exec "$P-node" timeout -s INT $((secs + 40)) stdbuf -oL dpdk-testpmd -l 0,1 --no-huge -m 1024 --no-pci \
    --vdev "net_af_xdp0,iface=$ndev,start_queue=0,queue_count=1" --file-prefix "xb$$" -- \
    --forward-mode=macswap --nb-cores=1 --auto-start >"$work/testpmd.log" 2>&1 &
  local pmd=$!
  pids+=("$pmd")
  # (It checks the link for up to 9 s before it forwards.)
  local i
  for i in $(seq 300); do grep -q "Press enter to exit" "$work/testpmd.log" && break; sleep 0.1; done
  grep -q "Press enter to exit" "$work/testpmd.log" || { cat "$work/testpmd.log" >&2; return 1; }
  measure dpdk-testpmd-af_xdp-macswap "$1" "$(pgrep -n -f "file-prefix xb$$")"
  kill -INT "$pmd" 2>/dev/null; wait "$pmd" 2>/dev/null || true
}

out="$work/out.jsonl"
for s in $sizes; do
  pcap "$s"
  { snic_run "$s"; testpmd_run "$s"; snic_run "$s"; } | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for s in sorted({r['inner_bytes'] for r in rows}):
    sn = [r['forwarded_mpps'] for r in rows if r['inner_bytes'] == s and r['peer'].startswith('snic')]
    tp = [r['forwarded_mpps'] for r in rows if r['inner_bytes'] == s and r['peer'].startswith('dpdk')]
    if sn and tp and min(tp) > 0:
        print(json.dumps({"ratio": "snic-af_xdp/testpmd-af_xdp", "inner_bytes": s, "value": round(statistics.mean(sn) / statistics.mean(tp), 3)}))
PY
