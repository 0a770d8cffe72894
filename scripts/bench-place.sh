#!/usr/bin/env bash
# Remote launch with real daemons on loopback: two `snic run` nodes in a pool; node A deploys the
# demo manifest and places its DAG `blue-edge` on node B (`POST /v1/pool/place`: A's request
# crosses the pool channel, B's data plane builds and launches the chain and hosts the DAG, B's
# answer comes back and A's data plane redirects the DAG) ROUNDS times. Prints the time each
# call took (the API's `took_ms`: request to redirect in place) and the median and worst.
# Each round hosts one more copy of the DAG on B (a benchmark, not an operation).
#
#   scripts/bench-place.sh [SNIC] [ROUNDS]     (defaults: target/release/snic, 20)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${1:-$here/target/release/snic}; rounds=${2:-20}
PYTHONPATH=$here/scripts python3 - "$snic" "$rounds" "$here/examples/demo.yaml" <<'PY'
import json, os, statistics, sys, tempfile, time, urllib.request
from snic_nodes import start
snic, rounds, demo = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()

def call(method, url, body):
    req = urllib.request.Request(url, data=body.encode(), method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)

with tempfile.TemporaryDirectory() as tmp:
    key = os.path.join(tmp, "pool.key")
    open(key, "w").write("a pool secret of 32 characters..\n")
    procs = []
    try:
        for i in range(2):
            os.makedirs(f"{tmp}/{i}")
            procs.append(start(snic, f"{tmp}/{i}", [procs[0][2]] if procs else [], key))
        (_, a, _), (_, b, b_pool) = procs
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            with urllib.request.urlopen(a + "/v1/status", timeout=5) as r:
                if len(json.load(r)["pool"]["members"]) == 1:
                    break
            time.sleep(0.01)
        call("POST", a + "/v1/apply", demo)
        took = []
        for _ in range(rounds):
            v = call("POST", a + "/v1/pool/place", json.dumps({"dag": "blue/blue-edge", "peer": b_pool}))
            took.append(v["placed"]["took_ms"])
            print(json.dumps({"bench": "place", "took_ms": took[-1]}))
        print(json.dumps({"bench": "place", "rounds": rounds, "median_ms": statistics.median(took), "worst_ms": max(took)}))
    finally:
        for p, _, _ in procs:
            p.terminate()
            p.wait()
PY
