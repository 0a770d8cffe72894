# Shared by the namespace benches (sourced, not run): the namespaces and processes a bench
# creates are removed when it exits, pass or fail.
#
#   . "$(dirname "$0")/netns-lib.sh" NAME PREFIX
#
# NAME goes into messages; PREFIX (two letters) and the shell's PID name the namespaces. Gives
# $P, a scratch directory $work, the arrays nslist and pids (append what you create), ns NAME
# (a namespace with lo up), veth NS1 ADDR1 NS2 ADDR2 [keep-offload], gro NS, listens NS PROTO
# PORT, wait_for WHAT CMD..., vxlan_ep (a kernel VXLAN endpoint) and kernel_router (the kernel
# reference path). A bench that defines before_cleanup has it called first on exit.
bench_name=$1
P=$2$$
work=$(mktemp -d)
nslist=()
pids=()
cleanup() {
  if declare -F before_cleanup >/dev/null; then before_cleanup; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for n in "${nslist[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

ns() { ip netns add "$P-$1"; nslist+=("$P-$1"); ip -n "$P-$1" link set lo up; }

# wait_for WHAT CMD...: polls CMD every 50 ms until it succeeds; fails after 10 s.
wait_for() {
  local what=$1; shift
  for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "$bench_name: $what: not within 10 s" >&2; return 1
}

# gro NS: GRO on every veth in namespace NS (a node's receiving interfaces): runs of one flow's
# datagrams then reach the node's sockets coalesced, one message per run (docs/endpoints.md).
# GRO=off leaves it off (the comparison).
gro() {
  [ "${GRO:-on}" = on ] || return 0
  local i
  for i in $(ip -n "$P-$1" -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip netns exec "$P-$1" ethtool -K "$i" gro on >/dev/null
  done
}

# listens NS PROTO PORT: something listens on PORT (PROTO t or u) in namespace NS.
listens() { [ -n "$(ip netns exec "$P-$1" ss -Hln"$2" "sport = :$3")" ]; }

# veth NS1 ADDR1 NS2 ADDR2 [keep-offload]: a veth pair between two namespaces (/24 addresses).
# VXLAN underlays turn transmit offload off (inner checksums completed in software,
# docs/endpoints.md); a routed kernel path keeps its offloads (keep-offload).
veth() {
  local a="$P$1$3" b="$P$3$1"
  ip link add "${a:0:15}" type veth peer name "${b:0:15}"
  ip link set "${a:0:15}" netns "$P-$1"; ip link set "${b:0:15}" netns "$P-$3"
  ip -n "$P-$1" addr add "$2/24" dev "${a:0:15}"; ip -n "$P-$1" link set "${a:0:15}" up
  ip -n "$P-$3" addr add "$4/24" dev "${b:0:15}"; ip -n "$P-$3" link set "${b:0:15}" up
  if [ "${5:-}" != keep-offload ]; then
    ip netns exec "$P-$1" ethtool -K "${a:0:15}" tx off >/dev/null
    ip netns exec "$P-$3" ethtool -K "${b:0:15}" tx off >/dev/null
  fi
}

# vxlan_ep NS LOCAL REMOTE INNER MTU [VNI]: a kernel VXLAN endpoint in NS (device vx0, VNI 100
# unless given, port 4789) from underlay address LOCAL to REMOTE, with inner address INNER/24
# and MTU.
vxlan_ep() {
  ip -n "$P-$1" link add vx0 type vxlan id "${6:-100}" remote "$3" local "$2" dstport 4789
  ip -n "$P-$1" link set vx0 mtu "$5"
  ip -n "$P-$1" addr add "$4/24" dev vx0; ip -n "$P-$1" link set vx0 up
}

# kernel_router S K R NET1 NET2: the kernel as the VPC benches' reference — S (NET1.2) routed
# through K (NET1.1, NET2.1: forwarding, an nftables firewall dropping TCP 22, SNAT of S to
# NET2.1) to R (NET2.2); the veths keep their offloads. NET1, NET2: /24 prefixes (a.b.c).
kernel_router() {
  ns "$1"; ns "$2"; ns "$3"
  veth "$1" "$4.2" "$2" "$4.1" keep-offload
  veth "$2" "$5.1" "$3" "$5.2" keep-offload
  ip -n "$P-$1" route add default via "$4.1"
  ip -n "$P-$3" route add default via "$5.1"
  ip netns exec "$P-$2" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$P-$2" nft -f - <<N
table inet snicbench {
  chain forward { type filter hook forward priority 0; policy accept; tcp dport 22 drop; }
  chain post { type nat hook postrouting priority 100; ip saddr $4.2 snat to $5.1; }
}
N
}
