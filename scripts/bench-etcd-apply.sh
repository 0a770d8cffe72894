#!/usr/bin/env bash
# Time from `snic apply` on one node to the change deployed on every other node of a pool that
# keeps its desired state in etcd (node.yaml `pool.etcd`): a local etcd and N nodes on
# loopback; each round applies a new tenant with a DAG (a new chain) to node A and polls the
# others' API until the objects are there (a node swaps its state only once the plan is
# deployed). Prints one JSON line per round and a summary.
#
#   scripts/bench-etcd-apply.sh [SNIC] [NODES] [ROUNDS]     (defaults: target/release/snic 3 20)
#
# Needs etcd (Debian etcd-server). Every process it starts is stopped by PID on exit.
set -euo pipefail
snic=${1:-target/release/snic}; nodes=${2:-3}; rounds=${3:-20}
command -v etcd >/dev/null || { echo "etcd is not installed (apt-get install etcd-server)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
python3 - "$snic" "$nodes" "$rounds" <<'PY'
import json, os, socket, statistics, subprocess, sys, tempfile, time, urllib.request, urllib.error
snic, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tmp = tempfile.mkdtemp(prefix="snic-etcd-bench-")
procs = []
def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r: return r.status
    except urllib.error.HTTPError as e: return e.code
    except (urllib.error.URLError, OSError): return 0
try:
    cp, pp = free(), free()
    url = f"http://127.0.0.1:{cp}"
    procs.append(subprocess.Popen(["etcd", "--data-dir", f"{tmp}/etcd", "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{pp}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
        "--initial-cluster", f"default=http://127.0.0.1:{pp}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    t0 = time.time()
    while get(url + "/health") != 200:
        if time.time() - t0 > 20: sys.exit("etcd did not come up")
        time.sleep(0.05)
    key = f"{tmp}/pool.key"
    open(key, "w").write("a pool secret of 32 characters..\n")
    apis, seeds = [], []
    for i in range(n):
        d = f"{tmp}/n{i}"; os.makedirs(d)
        cfg = f"{d}/node.yaml"
        open(cfg, "w").write(f"data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {d}/state\nelastic: {{enabled: true}}\npool:\n  listen: 127.0.0.1:0\n"
                             f"  secret_file: {key}\n  seeds: [{', '.join(seeds)}]\n  etcd: [{url}]\n")
        p = subprocess.Popen([snic, "run", "--config", cfg, "--log", "warn"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
        line = p.stdout.readline().split()
        apis.append(next(w for w in line if w.startswith("http://")).rstrip(","))
        seeds.append(line[-1])
    times = []
    for r in range(rounds):
        name = f"t{r}"
        doc = (f"apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{vnis: [{1000 + r}]}}\n---\n"
               f"apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}-fw}}\nspec: {{tenant: {name}, config: {{kind: firewall, default: allow}}}}\n---\n"
               f"apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: {name}-dag}}\nspec: {{tenant: {name}, nodes: [{name}-fw]}}\n---\n"
               f"apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: {name}-all}}\nspec: {{vni: {1000 + r}, action: {{dag: {name}-dag}}}}\n")
        t0 = time.time()
        req = urllib.request.Request(apis[0] + "/v1/apply", data=doc.encode(), headers={"content-type": "application/yaml"}, method="POST")
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except urllib.error.HTTPError as e:
            sys.exit(f"apply refused: {e.code} {e.read().decode()}")
        applied = time.time() - t0
        last = 0.0
        for api in apis[1:]:
            while get(f"{api}/v1/objects/dag/{name}/{name}-dag") != 200:
                if time.time() - t0 > 10: sys.exit(f"{api} did not deploy {name} within 10 s")
                time.sleep(0.001)
            last = time.time() - t0
        times.append(last * 1e3)
        print(json.dumps({"bench": "etcd_apply", "round": r, "nodes": n, "apply_ms": round(applied * 1e3, 2), "deployed_everywhere_ms": round(last * 1e3, 2)}))
    print(json.dumps({"bench": "etcd_apply", "nodes": n, "rounds": rounds, "p50_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}))
finally:
    for p in procs:
        p.kill(); p.wait()
    subprocess.run(["rm", "-rf", tmp])
PY
