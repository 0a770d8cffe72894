#!/usr/bin/env bash
# Runs one test binary for scripts/test.sh (as cargo's target runner) with each test's time on its
# result line (`test name ... ok <1.234s>`), so that the run can end with the slowest tests.
# libtest's --report-time is unstable; RUSTC_BOOTSTRAP here reaches the test binary only, not
# the compiler (where it would change every artifact's hash and rebuild the workspace).
case "$(basename "$1")" in
  # Binaries that are not libtest harnesses (none today) would go here and run as they are.
  *) RUSTC_BOOTSTRAP=1 exec "$@" -Zunstable-options --report-time ;;
esac
