"""Starting `snic run` nodes on loopback for the pool scripts (bench-pool.sh, bench-place.sh)."""
import os, subprocess


def start(snic, d, seeds, key):
    """A node in directory `d` joining the pool through `seeds` with the secret in `key`:
    (process, API URL, pool address)."""
    cfg = os.path.join(d, "node.yaml")
    with open(cfg, "w") as f:
        f.write(f"data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {d}/state\n"
                f"pool:\n  listen: 127.0.0.1:0\n  secret_file: {key}\n  seeds: [{', '.join(seeds)}]\n")
    p = subprocess.Popen([snic, "run", "--config", cfg, "--log", "warn"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().split()
    api = next(w for w in line if w.startswith("http://")).rstrip(",")
    return p, api, line[-1]
