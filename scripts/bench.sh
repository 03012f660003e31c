#!/usr/bin/env bash
# Regenerates docs/benchmarks.md: builds the release binary, then runs every
# benchmark with its peer in the same run: ingest, latency and journal, Hot
# Restart (the key-value workload of Hot Restart Persistence against dd, a cold read and Redis 7;
# the rdb's restart against a full journal replay, and checkpoint pauses),
# robustness (acknowledged writes, quiet and under hostile queries and clients),
# replication (Zero-Impact Crash Recovery for kdb+: the cost to the primary, lag,
# acknowledgements per shipping mode, catch-up, restore), failover (RTO after
# kill -9 by hand and through etcd, switchover downtime, rows lost in async and
# semi-sync, false failovers in a 10-minute soak, the standby restore of Zero-Impact Crash Recovery,
# and Redis Sentinel's failover; its etcd parts need Debian's etcd-server and are
# skipped, saying so, without it), the market-data stack
# (the Optane kdb+ study: DRAM against fsmem rdbs), the bulk insert, kdb+ IPC
# and socket sharding (the KX whitepaper "Socket Sharding with kdb+ and Linux":
# rdbs sharing query ports with rp,PORT; 1000 connections over 4 listeners,
# listeners added on the fly, a large volume of requests, a busy listener with
# busy steering off and on, a rolling upgrade without and with a shared port,
# and the PostgreSQL query throughput of 1, 2 and 4 rdbs; it sets
# net.ipv4.tcp_migrate_req=1 for its run when root and puts it back)
# (`tickdb bench report`: QuestDB from Maven Central, which needs java and, on
# first use, network access to download the jar; Redis from Debian's
# redis-server, installed here when missing; dd), then SQL
# (scripts/bench_query.py: QuestDB and DuckDB), then the monitor query of the
# Optane kdb+ study on a 50M-row rdb (scripts/bench_monitor.py: the most active
# and a median symbol, against QuestDB and DuckDB), then end of day and history
# (scripts/bench_history.py: the end-of-day write of a 10M-trade + 40M-quote
# day, three times, and queries over 30 days of Parquet against DuckDB).
#
#   scripts/bench.sh                full sizes (about 105 minutes on 2 cores: QuestDB's
#                                   5M x 5M ASOF JOIN, 7 stack scenarios of 20 s run 3 times
#                                   each (about 9 minutes), 6 zero-latency
#                                   runs of one stack at 48,000 updates/s (about 2.5 minutes), the
#                                   study's scale on one stack 3 times (65M rows preloaded, then
#                                   10 minutes at 48,000 updates/s: about 12 minutes a run), 3 rounds of
#                                   2M x 1 KB entries in the store and in Redis (about 9 minutes),
#                                   9 restarts of 10M rows, 3 rounds of the robustness phases,
#                                   the replication sections (about 5 minutes), about
#                                   16 minutes of failover: 20 rounds of each kind, the
#                                   10-minute soak, 3 rounds of Sentinel's default 30 s,
#                                   and about 8 minutes of socket sharding: every
#                                   whitepaper scenario 3 times)
#   scripts/bench.sh --quick        small sizes, one repeat (a few minutes)
#   scripts/bench.sh --no-questdb   without QuestDB
#   scripts/bench.sh --no-redis     without Redis
#
# One section alone, replaced in place in docs/benchmarks.md (from its "## "
# heading to the next; appended when absent), the rest of the file (the SQL
# section included) kept, with a note under the header saying what was
# regenerated, when, and on which machine if it differs from the file's
# Machine section. `scripts/bench.sh --only SECTION` regenerates one of the
# report's sections and stops there; each of these regenerates one part:
#
#   cargo build --release -p tickdb
#   .venv/bin/python scripts/bench_history.py [--quick] --out docs/benchmarks.md
#                                   (end of day and history; --quick under 2 minutes)
#   .venv/bin/python scripts/bench_monitor.py [--quick] --out docs/benchmarks.md
#                                   (one symbol on a 50M-row rdb; about 4 minutes)
#   .venv/bin/python scripts/bench_build.py --out docs/benchmarks.md
#                                   (first build: clean quick and release builds,
#                                   then ingest and queries on both binaries;
#                                   about 30 minutes; not run by this script)
#   target/release/tickdb bench report --only sharding [--quick]
#                                   (about 8 minutes; --quick about 1;
#                                   sections: ingest (about 2 minutes), latency
#                                   (about 2 minutes), insert (under a minute),
#                                   journal (about a minute), sharding, ipc,
#                                   failover, replication, robustness,
#                                   hot-restart (about 10 minutes), stack (the
#                                   stack and insert, about 46 minutes))
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
if [[ ! -f .venv/.requirements-installed ]] || ! cmp -s tests/requirements.txt .venv/.requirements-installed; then
    .venv/bin/python -m pip install --quiet -r tests/requirements.txt
    cp tests/requirements.txt .venv/.requirements-installed
fi
if ! command -v redis-server >/dev/null 2>&1 && [[ " $* " != *" --no-redis "* ]]; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing redis-server (the Hot Restart benchmark's peer)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }
    else
        echo "redis-server is missing: install it (apt-get install redis-server) or pass --no-redis" >&2
        exit 1
    fi
fi
if ! command -v etcd >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing etcd-server (the failover benchmark elects a primary through it)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server; }
    else
        echo "etcd is missing: the failover benchmark skips its etcd sections (apt-get install etcd-server)" >&2
    fi
fi
cargo build --release -p tickdb
target/release/tickdb bench report "$@"
# One section (--only SECTION) is the report's alone: the Python parts below
# regenerate sections of their own and take no --only.
for arg in "$@"; do
    if [[ "$arg" == --only || "$arg" == --only=* ]]; then
        exit 0
    fi
done
.venv/bin/python scripts/bench_query.py "$@" --out docs/benchmarks.md
.venv/bin/python scripts/bench_monitor.py "$@" --out docs/benchmarks.md
.venv/bin/python scripts/bench_history.py "$@" --out docs/benchmarks.md
