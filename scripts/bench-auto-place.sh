#!/usr/bin/env bash
# Automatic placement and move back with real daemons on loopback (docs/pool.md, "Automatic
# placement"): node A has one region, node B four. Tenant green keeps A's region busy (a packet
# a millisecond); tenant blue's packets then find no room at A, whose pool agent places blue's
# DAG on B (remote launch) and redirects. Green stops: once A has had room a whole
# MONITOR_PERIOD (200 ms here), blue comes home. Green starts again and takes the region back
# (blue idles into a victim, which makes way); the next round begins. Blue sends one packet
# every 2 ms throughout, each waited for (closed loop), so every packet is counted.
#
# Per round, JSON lines: `place_ms` (the first blue packet after blue lost its region: sent to
# delivered, through the remote launch), `redirected_p50_us` (blue's packets while on B),
# `back_ms` (the first blue packet served at home again: sent to delivered, through the state
# coming home from B and the local launch — the move-back pause a packet sees), `pause_ms` (the
# pause as A measures it: from the move-back decision, when blue's packets start to wait, to B's
# state restored; A's `moved back` event), `with_state` (the event says the state came),
# `home_p50_us`, and `lost` (blue packets that never arrived). Then the medians over the rounds.
#
#   scripts/bench-auto-place.sh [SNIC] [ROUNDS]     (defaults: target/release/snic, 5)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
snic=${1:-$here/target/release/snic}; rounds=${2:-5}
PYTHONPATH=$here/scripts python3 - "$snic" "$rounds" "$here/examples/demo.yaml" <<'PY'
import json, os, socket, statistics, struct, sys, tempfile, threading, time, urllib.request
from snic_nodes import start
snic, rounds, demo = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
MAC_A, MAC_B = bytes([2, 0, 0, 0, 0, 0xa]), bytes([2, 0, 0, 0, 0, 0xb])

def frame(vni, sport, seq):
    """VXLAN, Ethernet, IPv4 10.1.0.5 -> 10.2.0.9, UDP sport -> 5001, payload: seq."""
    payload = struct.pack(">Q", seq) + bytes(56)
    udp = struct.pack(">HHHH", sport, 5001, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes([10, 1, 0, 5]), bytes([10, 2, 0, 9])))
    s = sum(struct.unpack(">10H", ip))
    s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    ip[10:12] = struct.pack(">H", ~s & 0xffff)
    return struct.pack(">II", 0x08000000, vni << 8) + MAC_B + MAC_A + b"\x08\x00" + bytes(ip) + udp

def call(method, url, body=""):
    req = urllib.request.Request(url, data=body.encode() if body else None, method=method, headers={"content-type": "application/yaml"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)

def until(f, limit=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if f():
            return True
        time.sleep(0.01)
    return False

with tempfile.TemporaryDirectory() as tmp:
    key = os.path.join(tmp, "pool.key")
    open(key, "w").write("a pool secret of 32 characters..\n")
    elastic = "elastic: {enabled: true, autoscale: true, monitor_period_ms: 200}\n"
    procs = []
    try:
        os.makedirs(f"{tmp}/a"); os.makedirs(f"{tmp}/b")
        procs.append(start(snic, f"{tmp}/a", [], key, "regions: 1\n" + elastic))
        procs.append(start(snic, f"{tmp}/b", [procs[0][2]], key, "regions: 4\n" + elastic))
        (pa, a, _), (pb, b, _) = procs
        until(lambda: (call("GET", a + "/v1/status")["pool"]["members"] or [{}])[0].get("free_regions") is not None)
        rb, rg = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rb.bind(("127.0.0.1", 0)); rg.bind(("127.0.0.1", 0))
        routes = "".join(
            f"---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: {n}}}\nspec: {{vni: {v}, mac: '02:00:00:00:00:0b', vtep: '127.0.0.1:{s.getsockname()[1]}'}}\n"
            for n, v, s in [("blue-b", 100, rb), ("green-g", 300, rg)])
        full = demo + "\n" + routes
        green_only = "\n---\n".join(d for d in full.split("\n---\n") if "green" in d)
        call("POST", a + "/v1/apply", green_only)
        green_on, stop = threading.Event(), threading.Event()
        def green():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            f = frame(200, 4000, 0)
            t0 = time.monotonic()
            while not stop.is_set() and time.monotonic() - t0 < 600:
                if green_on.is_set():
                    s.sendto(f, pa.data)
                time.sleep(0.001)
        def drain():
            rg.settimeout(0.2)
            while not stop.is_set():
                try: rg.recv(2048)
                except OSError: pass
        threads = [threading.Thread(target=green), threading.Thread(target=drain)]
        for t in threads: t.start()
        green_on.set()
        def regions():
            return call("GET", a + "/v1/status")["regions"]["instances"]
        until(lambda: any(r["state"] == "running" and r["chain"][0] == "green/green-counter" for r in regions()))
        call("POST", a + "/v1/apply", full)
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rb.settimeout(2.0)
        seq = [0]
        def blue():
            """One blue packet: (latency s, delivered from) or None if lost."""
            seq[0] += 1
            t = time.monotonic()
            sender.sendto(frame(100, 4000, seq[0]), pa.data)
            while True:
                try:
                    d, frm = rb.recvfrom(2048)
                except OSError:
                    return None
                if struct.unpack(">Q", d[8 + 14 + 20 + 8:8 + 14 + 20 + 16])[0] == seq[0]:
                    return time.monotonic() - t, frm
        a_data, b_data = pa.data, pb.data
        rows = []
        def phase(at):
            """Blue packets until 50 came from `at`: the first one's latency, the others', lost."""
            first, lat, lost = None, [], 0
            t0 = time.monotonic()
            while len(lat) < 50 and time.monotonic() - t0 < 30:
                x = blue()
                if x is None:
                    lost += 1
                elif x[1] == at:
                    first = first if first is not None else x[0]
                    lat.append(x[0])
                time.sleep(0.002)
            return first, lat, lost
        last_back = [0.0]
        for r in range(rounds):
            # Blue placed on B: its first packet waits for the remote launch.
            first, at_b, lost_b = phase(b_data)
            # Green stops: blue comes home.
            green_on.clear()
            back, at_a, lost_a = phase(a_data)
            lost = lost_a + lost_b
            # (The status is published every 250 ms: wait for this round's move back in it.)
            # (Green may have been placed on B and moved back too: count blue's.)
            blue_back = lambda: [e for e in call("GET", a + "/v1/status")["elastic"]["events"] if "moved back from peer" in e["event"] and e["chain"].startswith("blue")]
            until(lambda: any(e["at_ms"] > last_back[0] for e in blue_back()))
            evs = blue_back()
            last_back[0] = evs[-1]["at_ms"] if evs else last_back[0]
            row = {"bench": "auto_place", "round": r, "place_ms": first * 1e3 if first else None,
                   "redirected_p50_us": statistics.median(at_b[1:]) * 1e6 if len(at_b) > 1 else None,
                   "back_ms": back * 1e3 if back else None,
                   "pause_ms": evs[-1]["took_us"] / 1e3 if evs else None, "with_state": bool(evs) and "with its state" in evs[-1]["event"],
                   "home_p50_us": statistics.median(at_a[1:]) * 1e6 if len(at_a) > 1 else None, "lost": lost}
            print(json.dumps(row), flush=True)
            rows.append(row)
            # Green takes the region back once blue idles into a victim.
            green_on.set()
            until(lambda: any(r["state"] == "running" and r["chain"][0] == "green/green-counter" for r in regions()))
        med = lambda k: statistics.median([x[k] for x in rows if x[k] is not None]) if any(x[k] is not None for x in rows) else None
        print(json.dumps({"bench": "auto_place", "rounds": rounds, "place_ms": med("place_ms"), "redirected_p50_us": med("redirected_p50_us"),
                          "back_ms": med("back_ms"), "pause_ms": med("pause_ms"), "with_state": sum(x["with_state"] for x in rows), "home_p50_us": med("home_p50_us"), "lost": sum(x["lost"] for x in rows)}))
        stop.set()
        for t in threads: t.join()
    finally:
        for p, _, _ in procs:
            p.terminate()
            p.wait()
PY
