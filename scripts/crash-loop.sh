#!/usr/bin/env bash
# The kill -9 loop against the real binary (crates/tickdb/tests/crash_loop.rs).
#   scripts/crash-loop.sh            200 kills under --fsync always (what CI runs)
#   scripts/crash-loop.sh --long     5000 kills (or TICKDB_CRASH_ITERATIONS=N)
# TICKDB_SEED=S reproduces a run; the seed is printed at the start.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--long" ]]; then
    export TICKDB_CRASH_ITERATIONS="${TICKDB_CRASH_ITERATIONS:-5000}"
fi
exec cargo test -p tickdb --test crash_loop -- --nocapture --test-threads=1
