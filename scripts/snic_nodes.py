"""Starting `snic run` nodes on loopback for the pool scripts (bench-pool.sh, bench-place.sh)."""
import os, subprocess


def start(snic, d, seeds, key, extra=""):
    """A node in directory `d` joining the pool through `seeds` with the secret in `key`, its
    node.yaml ending with `extra`: (process, API URL, pool address); the process's `data` is
    the node's data address (host, port)."""
    cfg = os.path.join(d, "node.yaml")
    with open(cfg, "w") as f:
        f.write(f"data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {d}/state\n{extra}"
                f"pool:\n  listen: 127.0.0.1:0\n  secret_file: {key}\n  seeds: [{', '.join(seeds)}]\n")
    p = subprocess.Popen([snic, "run", "--config", cfg, "--log", "warn"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().split()
    host, port = line[2].rsplit(":", 1)
    p.data = (host, int(port))
    api = next(w for w in line if w.startswith("http://")).rstrip(",")
    return p, api, line[-1]
