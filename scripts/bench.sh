#!/usr/bin/env bash
# Regenerates docs/benchmarks.md: builds the release binary, then runs every
# benchmark with its peer in the same run (QuestDB from Maven Central, which
# needs java and, on first use, network access to download the jar; dd).
#
#   scripts/bench.sh            full sizes (about 10 minutes on 2 cores)
#   scripts/bench.sh --quick    small sizes, one repeat (about 2 minutes)
#   scripts/bench.sh --no-questdb
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p tickdb
exec target/release/tickdb bench report "$@"
