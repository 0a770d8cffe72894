#!/usr/bin/env bash
# memcached over UDP, directly and through snic's KV NTs, in one run (docs/kv.md). One client
# namespace, one memcached server (two more for replication), one snic node:
#   direct:          client --veth--> server                                  (no snic)
#   snic:            client --vxlan--> node [counter] --vxlan--> server        (VNI 200)
#   snic-cache:      client --vxlan--> node [kv_cache, clock] --> server       (VNI 100)
#   snic-cache-fifo: client --vxlan--> node [kv_cache, fifo] --> server        (VNI 300)
#   snic-replicate:  client --vxlan--> node [kv_replicate] --> server, E, F    (VNI 400)
#   client-replicate: the client writes each of its three copies itself           (VNI 500,
#                    node [counter] --> server, E, F): the peer of snic-replicate
#   snic-cache-big:  as snic-cache with a second cache size (CACHE2_BYTES)      (VNI 600)
# `snic bench kv` (YCSB-style: zipfian 0.99, values 100 B-4 KB, load then run) runs in the
# client's namespace against each path, workloads A, B and C: one JSON line each.
#
#   scripts/bench-kv.sh [SECONDS] [KEYS] [CACHE_BYTES] [PATHS] [CACHE2_BYTES]
#
# Defaults: 10 s per workload, 100000 keys, a 16 MiB cache (64 MiB for snic-cache-big), every
# path (comma-separated list to choose). SNIC_BIN selects the snic binary (default target/release/snic, built if missing).
# Root; installs memcached, iproute2 and ethtool if missing. Every namespace is created here and
# deleted on exit, pass or fail; traffic stays inside them.
set -euo pipefail
secs=${1:-10}
keys=${2:-100000}
cache_bytes=${3:-16777216}
paths=${4:-direct,snic,snic-cache,snic-cache-fifo,snic-cache-big,snic-replicate,client-replicate}
cache2_bytes=${5:-67108864}
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${SNIC_BIN:-$here/target/release/snic}
[ -x "$snic" ] || cargo build --release --manifest-path "$here/Cargo.toml" -p snic >&2
for t in memcached:memcached memcaslap:libmemcached-tools ip:iproute2 ethtool:ethtool; do
  command -v "${t%%:*}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${t#*:}" >/dev/null; }
done
. "$here/scripts/netns-lib.sh" bench-kv kv

# vxlan NS VNI LOCAL REMOTE INNER: kernel VXLAN device vxVNI toward the node.
vxlan() {
  ip -n "$P-$1" link add "vx$2" type vxlan id "$2" remote "$4" local "$3" dstport 4789
  ip -n "$P-$1" addr add "$5/24" dev "vx$2"; ip -n "$P-$1" link set "vx$2" up
}
listens() { [ -n "$(ip netns exec "$P-$1" ss -Hlnu "sport = :11211")" ]; }

ns c; ns n; ns s; ns e; ns f
veth c 192.168.1.2 n 192.168.1.1
veth s 192.168.2.2 n 192.168.2.1
veth e 192.168.3.2 n 192.168.3.1
veth f 192.168.4.2 n 192.168.4.1
veth c 10.9.0.1 s 10.9.0.2 keep-offload
for v in 100 200 300 400 500 600; do
  vxlan c $v 192.168.1.2 192.168.1.1 "10.$((v / 100)).0.1"
  vxlan s $v 192.168.2.2 192.168.2.1 "10.$((v / 100)).0.2"
done
for v in 400 500; do
  vxlan e $v 192.168.3.2 192.168.3.1 "10.$((v / 100)).0.3"
  vxlan f $v 192.168.4.2 192.168.4.1 "10.$((v / 100)).0.4"
done

for m in s:0.0.0.0 e:0.0.0.0 f:0.0.0.0; do
  ip netns exec "$P-${m%%:*}" memcached -U 11211 -p 0 -l "${m#*:}" -u root -m 1024 -t 1 >/dev/null 2>&1 & pids+=($!)
  wait_for "memcached in ${m%%:*}" listens "${m%%:*}"
done

gro n
ip netns exec "$P-n" "$snic" run --data 0.0.0.0:4789 --state-dir "$work/state" >"$work/node.log" 2>&1 & pids+=($!)
wait_for "node up" ip netns exec "$P-n" "$snic" status
tenant() { printf -- '---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: %s}\nspec: {vnis: [%s]}\n' "$1" "$2"; }
nt() { printf -- '---\napiVersion: snic/v1\nkind: NT\nmetadata: {name: %s}\nspec: {tenant: %s, payload: true, config: %s}\n' "$1" "$2" "$3"; }
dag() { printf -- '---\napiVersion: snic/v1\nkind: DAG\nmetadata: {name: %s}\nspec: {tenant: %s, nodes: [%s]}\n---\napiVersion: snic/v1\nkind: Rule\nmetadata: {name: %s}\nspec: {vni: %s, action: {dag: %s}}\n' "$1" "$2" "$3" "$1-rule" "$4" "$1"; }
route() { printf -- '---\napiVersion: snic/v1\nkind: Route\nmetadata: {name: r%s-%s}\nspec: {vni: %s, vtep: "%s:4789", flood: true}\n' "$1" "${2//./-}" "$1" "$2"; }
{
  tenant blue 100; tenant green 200; tenant red 300; tenant grey 400; tenant white 500; tenant black 600
  nt cache blue "{kind: kv_cache, backend: \"10.1.0.2:11211\", bytes: $cache_bytes, policy: clock}"
  nt count green "{kind: counter}"
  nt fifo red "{kind: kv_cache, backend: \"10.3.0.2:11211\", bytes: $cache_bytes, policy: fifo}"
  nt repl grey '{kind: kv_replicate, replicas: ["10.4.0.2:11211", "10.4.0.3:11211", "10.4.0.4:11211"]}'
  nt count5 white "{kind: counter}"
  nt big black "{kind: kv_cache, backend: \"10.6.0.2:11211\", bytes: $cache2_bytes, policy: clock}"
  dag blue-kv blue cache 100; dag green-kv green count 200; dag red-kv red fifo 300; dag grey-kv grey repl 400
  dag white-kv white count5 500; dag black-kv black big 600
  for v in 100 200 300 400 500 600; do route $v 192.168.1.2; route $v 192.168.2.2; done
  for v in 400 500; do route $v 192.168.3.2; route $v 192.168.4.2; done
} >"$work/kv.yaml"
ip netns exec "$P-n" "$snic" apply -f "$work/kv.yaml" >/dev/null

bench() {
  ip netns exec "$P-c" "$snic" bench kv --json --server "$2:11211" --path "$1" --workload A,B,C --keys "$keys" --seconds "$secs" "${@:3}"
}
for p in ${paths//,/ }; do
  case $p in
    direct) bench direct 10.9.0.2 ;;
    snic) bench snic 10.2.0.2 ;;
    snic-cache) bench snic-cache 10.1.0.2 ;;
    snic-cache-fifo) bench snic-cache-fifo 10.3.0.2 ;;
    snic-replicate) bench snic-replicate 10.4.0.2 --no-hit-rate ;;
    client-replicate) bench client-replicate 10.5.0.2 --no-hit-rate --replicas 10.5.0.2:11211,10.5.0.3:11211,10.5.0.4:11211 ;;
    snic-cache-big) bench snic-cache-big 10.6.0.2 ;;
    *) echo "bench-kv: unknown path $p" >&2; exit 2 ;;
  esac
done
# NT $1's own counter $2 (summed over its regions), from a status the node published after
# this call began (it publishes every 250 ms; asked again until one is that young, 5 s at most).
nt_counter() {
  local t0 waited got
  t0=$(date +%s%N)
  while waited=$(( ($(date +%s%N) - t0) / 1000000 )); [ "$waited" -lt 5000 ]; do
    got=$(ip netns exec "$P-n" "$snic" status -o json | python3 -c '
import json, sys
v = json.load(sys.stdin)
if int(sys.argv[3]) > v["data_plane"]["last_update_ms"] + 1:
    print(sum(c[2] for r in v["regions"]["instances"] for c in r["counters"] if c[0] == sys.argv[1] and c[1] == sys.argv[2]))
' "$1" "$2" "$waited")
    [ -z "$got" ] || { echo "$got"; return 0; }
    sleep 0.02
  done
  echo "bench-kv: no status snapshot of the node within 5 s" >&2
  return 1
}
# A second client, Debian's memcaslap over UDP (its own workload: 90% gets, values ~1 KB),
# verifying a tenth of the values it reads, on the paths a plain client can use; with a cache
# NT ($3), the keys it answered (`node_hits`).
caslap() {
  local before=0
  [ -z "${3:-}" ] || before=$(nt_counter "$3" hits)
  ip netns exec "$P-c" timeout -s KILL 120 memcaslap -s "$2:11211" --udp -t "${secs}s" -c 16 -T 1 --verify=0.1 >"$work/caslap.out" 2>&1 || true
  local hits=null
  [ -z "${3:-}" ] || hits=$(( $(nt_counter "$3" hits) - before ))
  python3 -c '
import json, re, sys
t = open(sys.argv[2]).read()
v = {k: int(n) for k, n in re.findall(r"^(\w+): (\d+)$", t, re.M)}
m = re.search(r"TPS: (\d+)", t)
print(json.dumps({"bench": "memcaslap", "path": sys.argv[1], "tps": int(m.group(1)) if m else None, **{k: v.get(k) for k in ("cmd_get", "cmd_set", "get_misses", "verify_failed", "udp_timeout", "packet_drop")}, "node_hits": json.loads(sys.argv[3])}))
' "$1" "$work/caslap.out" "$hits"
}
if command -v memcaslap >/dev/null 2>&1; then
  for p in ${paths//,/ }; do
    case $p in
      direct) caslap direct 10.9.0.2 ;;
      snic) caslap snic 10.2.0.2 ;;
      snic-cache) caslap snic-cache 10.1.0.2 blue/cache ;;
    esac
  done
fi
# What the node counted (drops by reason, per tenant), for the record.
ip netns exec "$P-n" "$snic" status -o json | python3 -c '
import json, sys
v = json.load(sys.stdin)
for t in v["tenants"]:
    d = {k: n for k, n in t["stats"]["drops"]}
    print(json.dumps({"bench": "kv-node", "tenant": t["name"], "rx_packets": t["stats"]["rx_packets"], "tx_packets": t["stats"]["tx_packets"], "drops": d}))
'
