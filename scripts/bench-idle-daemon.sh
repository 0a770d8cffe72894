#!/bin/bash
# CPU an idle daemon uses, and how long an apply takes against it.
#
#   scripts/bench-idle-daemon.sh [BIN] [SECONDS]     (defaults: target/release/snic, 10)
#
# Starts BIN's daemon on loopback (API on a free port, state in a scratch directory), applies
# examples/demo.yaml, then reads the process's CPU time (utime + stime) before and after
# SECONDS without traffic, and times five more applies of the same manifests. Prints one JSON
# line. Run it for two binaries in turn to compare them in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/snic}
SECS=${2:-10}
DIR=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$DIR"
}
trap cleanup EXIT
printf 'data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: %s/state\nvtep_port: null\n' "$DIR" > "$DIR/node.yaml"
"$BIN" run --config "$DIR/node.yaml" > "$DIR/out" 2> "$DIR/err" &
PID=$!
# The first stdout line names the bound API address.
for _ in $(seq 100); do
    API=$(grep -o 'api http://[0-9.:]*' "$DIR/out" 2>/dev/null | head -1 | cut -d' ' -f2 || true)
    [ -n "$API" ] && break
    sleep 0.1
done
[ -n "$API" ] || { echo "the daemon did not start" >&2; cat "$DIR/err" >&2; exit 1; }
"$BIN" apply -f examples/demo.yaml --server "$API" > /dev/null
sleep 1
TCK=$(getconf CLK_TCK)
a=$(awk '{print $14 + $15}' "/proc/$PID/stat")
sleep "$SECS"
b=$(awk '{print $14 + $15}' "/proc/$PID/stat")
APPLIES=()
for _ in 1 2 3 4 5; do
    s=$(date +%s%N)
    "$BIN" apply -f examples/demo.yaml --server "$API" > /dev/null
    e=$(date +%s%N)
    APPLIES+=("$(( (e - s) / 1000 ))")
done
CPU=$(echo "scale=4; ($b - $a) / $TCK / $SECS" | bc)
echo "{\"bench\":\"idle-daemon\",\"bin\":\"$BIN\",\"seconds\":$SECS,\"cores\":$CPU,\"apply_us\":[$(IFS=,; echo "${APPLIES[*]}")]}"
