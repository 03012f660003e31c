#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests, then the Python
# integration tests (tests/) against the real binary. CI (.ci/run) runs this.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -k bad_input    pass arguments to pytest
#   scripts/test.sh --long          the long loops too: the replication kill loop
#                                   runs 2000 rounds instead of 100, the failover
#                                   fault harness 2000 instead of 50 (TICKDB_LONG=1;
#                                   TICKDB_FAULT_ROUNDS=N sets the harness's rounds,
#                                   TICKDB_FAULT_SEED=S reruns from a printed seed)
#   SKIP_CARGO_TEST=1 scripts/test.sh   build, then only the Python tests
#   SKIP_FUZZ=1 scripts/test.sh     without the fuzz run (scripts/fuzz.sh: every
#                                   decoder's cargo-fuzz target, 20 s each, 60 s
#                                   under --long; skipped, saying so, when the
#                                   nightly toolchain is missing)
#
# Builds once: `cargo test --no-run` builds the test binaries and the tickdb
# binary with one feature resolution, so nothing is compiled twice.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=20
if [[ "${1:-}" == "--long" ]]; then
    export TICKDB_LONG=1
    fuzz_seconds=60
    shift
fi
# Each banner says how long the suite has run, so a slow CI run shows
# which step took the time.
banner() { printf '\n=== %s (at %d s) ===\n' "$*" "$SECONDS"; }

banner "Python environment (.venv)"
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
stamp=.venv/.requirements-installed
if [[ ! -f "$stamp" ]] || ! cmp -s tests/requirements.txt "$stamp"; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -r tests/requirements.txt
    cp tests/requirements.txt "$stamp"
fi

banner "cargo build (tests and the tickdb binary)"
cargo test --workspace --no-run

if [[ "${SKIP_CARGO_TEST:-0}" != "1" ]]; then
    banner "cargo test"
    cargo test --workspace
fi

banner "fuzz (every decoder, ${fuzz_seconds} s per target)"
if [[ "${SKIP_FUZZ:-0}" == "1" ]]; then
    echo "skipped: SKIP_FUZZ=1"
elif ! cargo +nightly --version >/dev/null 2>&1; then
    echo "skipped: the nightly toolchain is missing (cargo-fuzz needs it: rustup toolchain install nightly --profile minimal)"
else
    scripts/fuzz.sh --seconds "$fuzz_seconds"
fi

banner "Python integration tests"
export TICKDB_BIN="$PWD/target/debug/tickdb"
# --durations: the slowest tests, for when the suite grows slow.
exec .venv/bin/python -m pytest -q --durations=10 tests/ "$@"
