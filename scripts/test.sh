#!/usr/bin/env bash
# The whole test suite, as README states it and CI runs it (.ci/run calls exactly this).
# Works on a fresh machine of the project's kind: it installs what the tests need first.
#
#   scripts/test.sh            # everything
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the time-bounded cargo-fuzz run
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
fuzz_seconds=${FUZZ_SECONDS:-60}

step() { printf '\n==> %s\n' "$*"; }

step "toolchain: $(cargo --version)"

# System tools the namespace tests drive (real endpoints: kernel VXLAN, ping, iperf3).
need=()
for t in ip:iproute2 ethtool:ethtool ping:iputils-ping iperf3:iperf3; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  step "installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "not root: the namespace tests will skip themselves"
  fi
fi

step "format"
cargo fmt --all -- --check

step "lint (clippy, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests (unit, property, integration, corpus replay)"
test_log=$(mktemp)
cargo test --workspace --locked 2>&1 | tee "$test_log"

step "isolation against antagonists (optimized build: the test measures a real core)"
cargo test --release --locked -p snic --test fair 2>&1 | tee -a "$test_log"
totals=$(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed", p, f }' "$test_log")
rm -f "$test_log"

if [ "$fuzz_seconds" -gt 0 ]; then
  step "fuzz: parser, ${fuzz_seconds}s"
  # cargo-fuzz needs sanitizer flags; RUSTC_BOOTSTRAP lets the stable toolchain accept them.
  if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet || echo "cargo-fuzz could not be installed; the corpus replay above ran the same harness"
  fi
  if command -v cargo-fuzz >/dev/null 2>&1; then
    # New inputs go to a scratch directory (first corpus argument); the committed seeds are read
    # only. A crash writes fuzz/artifacts/parse/crash-* and fails the run.
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run parse "$scratch" corpus/parse -- \
        -max_total_time="$fuzz_seconds" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 8)
  fi
fi

step "done"
# The plain closing line CI reads.
echo "tests: $totals"
