#!/usr/bin/env bash
# The pool's membership with real daemons on loopback: N `snic run` nodes with a `pool:` section
# join through the first; the time until every node lists every other (formation), then one node
# is killed with SIGKILL and the time until every survivor lists it down (detection) is measured
# by polling each node's /v1/status (±30 ms). ROUNDS rounds, a fresh pool each; prints one JSON
# line per round and the median and worst.
#
#   scripts/bench-pool.sh [SNIC] [NODES] [ROUNDS]     (defaults: target/release/snic, 5, 5)
#
# The simulator measures the same with the same code on a virtual clock:
#   snic sim scenarios/pool-membership.toml
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${1:-$here/target/release/snic}; nodes=${2:-5}; rounds=${3:-5}
PYTHONPATH=$here/scripts python3 - "$snic" "$nodes" "$rounds" <<'PY'
import json, os, signal, statistics, subprocess, sys, tempfile, time, urllib.request
from snic_nodes import start
snic, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def status(api):
    with urllib.request.urlopen(api + "/v1/status", timeout=5) as r:
        return json.load(r)

def members(api):
    return {m["addr"] for m in status(api)["pool"]["members"]}

def until(cond, limit=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic()
        time.sleep(0.01)
    raise SystemExit("timed out")

form, detect = [], []
for r in range(rounds):
    with tempfile.TemporaryDirectory() as tmp:
        key = os.path.join(tmp, "pool.key")
        open(key, "w").write("a pool secret of 32 characters..\n")
        procs = []
        try:
            os.makedirs(f"{tmp}/0")
            procs.append(start(snic, f"{tmp}/0", [], key))
            for i in range(1, n):
                os.makedirs(f"{tmp}/{i}")
                procs.append(start(snic, f"{tmp}/{i}", [procs[0][2]], key))
            t0 = time.monotonic()
            addrs = {p[2] for p in procs}
            t1 = until(lambda: all(members(api) == addrs - {me} for _, api, me in procs))
            time.sleep(1.0)
            victim = procs.pop()
            victim[0].send_signal(signal.SIGKILL); victim[0].wait()
            t2 = time.monotonic()
            t3 = until(lambda: all(victim[2] not in members(api) for _, api, _ in procs))
            form.append(t1 - t0); detect.append(t3 - t2)
            print(json.dumps({"bench": "pool_membership", "nodes": n, "round": r, "formed_s": round(t1 - t0, 3), "detected_s": round(t3 - t2, 3)}), flush=True)
        finally:
            for p, _, _ in procs:
                p.send_signal(signal.SIGTERM)
            for p, _, _ in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill(); p.wait()
print(f"# {n} nodes: formed median {statistics.median(form):.3f} s, worst {max(form):.3f} s; "
      f"death seen by all survivors median {statistics.median(detect):.3f} s, worst {max(detect):.3f} s")
PY
