#!/usr/bin/env bash
# A rolling upgrade, tried with real daemons: this build's `snic` beside another release's, each
# way round, through the pool tests that use every pool message (membership, load reports, a
# remote launch and its answer, unhost, a chain moved home with its state). The older release
# speaks only the pool protocol's version 4; this build speaks 4 and 5, and must talk 4 to it
# (docs/pool.md, "Versions and rolling upgrades").
#
#   scripts/upgrade-check.sh [REF]   (default d3a9343: the last commit that spoke only version 4)
#
# Builds REF's binary in a git worktree of its own (removed on exit) into target/upgrade-ref.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-d3a9343}
protocol=${PROTOCOL:-4}
wt=$(mktemp -d /tmp/snic-upgrade.XXXXXX)
cleanup() { git -C "$here" worktree remove --force "$wt/src" 2>/dev/null || true; rm -rf "$wt"; }
trap cleanup EXIT
git -C "$here" worktree add -q --detach "$wt/src" "$ref"
t0=$(date +%s)
CARGO_TARGET_DIR=$here/target/upgrade-ref cargo build -q --manifest-path "$wt/src/Cargo.toml" -p snic --bin snic
old=$here/target/upgrade-ref/debug/snic
echo "built $ref in $(( $(date +%s) - t0 )) s: $old"
cd "$here"
cargo build -q -p snic --tests
tests=(a_chain_with_no_room_at_home_runs_on_a_peer_and_comes_home_when_room_returns
       an_overloaded_chain_spills_a_share_of_its_new_flows_to_a_peer_and_each_flow_keeps_its_node)
for who in A B; do
  echo "== node $who runs $ref, the other this build"
  for t in "${tests[@]}"; do
    env "SNIC_TEST_BIN_$who=$old" SNIC_TEST_PROTOCOL="$protocol" \
      cargo test -q -p snic --test daemon -- --exact "$t" 2>&1 | grep -E '^test |test result' || { echo "FAILED: $t with $who on $ref"; exit 1; }
  done
done
echo "upgrade check passed: $ref and this build interoperate, either node on either"
