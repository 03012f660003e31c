#!/usr/bin/env bash
# Regenerates docs/benchmarks.md: builds the release binary, then runs every
# benchmark with its peer in the same run: ingest, latency and journal, the
# market-data stack (seed 004: DRAM against fsmem rdbs) and the bulk insert
# (seed 000) (`tickdb bench report`: QuestDB from Maven Central, which needs
# java and, on first use, network access to download the jar; dd), then SQL
# (scripts/bench_query.py: QuestDB and DuckDB).
#
#   scripts/bench.sh                full sizes (about 15 minutes on 2 cores: QuestDB's
#                                   5M x 5M ASOF JOIN, and 7 stack scenarios of 20 s)
#   scripts/bench.sh --quick        small sizes, one repeat (a few minutes)
#   scripts/bench.sh --no-questdb   without QuestDB
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
if [[ ! -f .venv/.requirements-installed ]] || ! cmp -s tests/requirements.txt .venv/.requirements-installed; then
    .venv/bin/python -m pip install --quiet -r tests/requirements.txt
    cp tests/requirements.txt .venv/.requirements-installed
fi
cargo build --release -p tickdb
target/release/tickdb bench report "$@"
.venv/bin/python scripts/bench_query.py "$@" --append docs/benchmarks.md
