"""`scripts/bench_monitor.py` at a small size against the binary under test,
into a temporary copy of docs/benchmarks.md, without QuestDB. The benchmark
checks what it measures: tickdb, DuckDB and numpy over the rows sent
(scripts/asof_floor.py) must give the same count and sum of the as-of join
for the most active and the median symbol, or it exits 1.
So a short run is an end-to-end test of the one-symbol as-of join over a
time-ordered rdb (the as-of merge) against DuckDB. Speed is not asserted.
The section must replace itself in place."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness import BIN

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_monitor.py"
SECTION = "## One symbol on a 50M-row rdb"


def bench(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--trades", "100000", "--quotes", "900000",
                           "--repeats", "2", "--no-questdb", "--bin", BIN, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)


def test_bench_monitor_agrees_with_duckdb_and_writes_its_section_once(tmp_path):
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    for _ in range(2):
        r = bench(doc)
        assert r.returncode == 0, r.stderr[-4000:]
    md = doc.read_text()
    assert md.count(SECTION) == 1, md
    section = md[md.index(SECTION):]
    if "\n## " in section:
        section = section[: section.index("\n## ")]
    # numpy's answer over the rows sent is a third check beside tickdb's
    # and DuckDB's (the run exits 1 when any differs).
    assert ("All systems returned the same count and sum for every query, and so did numpy over the rows sent."
            in section), section
    assert section.count("| most active (S0000) |") == 2 and section.count("| median (S0500) |") == 2, section
    # The floors: what the join must read in each layout, at the rate and
    # round trip measured in the same run.
    floors = section[section.index("Floors (`scripts/asof_floor.py`"):]
    assert " GB/s reading a warm array" in floors and "round trip of `select 1`" in floors, floors
    assert "(trade times " in floors and ", symbol index " in floors, floors
    # It states the machine it ran on, in the words the other sections use.
    sys.path.insert(0, str(ROOT / "scripts"))
    import benchutil

    assert f" on {benchutil.machine_text(benchutil.machine(tmp_path))}. " in section, section
    # The sections around it are untouched.
    assert md.count("## SQL") == 1 and md.count("## End of day and history") == 1


def test_settle_says_when_the_machine_stays_busy(monkeypatch):
    """benchutil.settle, which the benchmark waits on before timing each
    system, must see CPU work on every core and give up, saying so, after
    its longest wait: one busy process per core keeps it below its idle
    threshold."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import benchutil

    monkeypatch.setattr(benchutil, "SETTLE_WAIT_MAX_S", 1.0)
    cores = len(os.sched_getaffinity(0))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.3)
        waited, idle = benchutil.settle()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert idle < benchutil.SETTLE_IDLE, idle
    assert 1.0 <= waited < 5.0, waited


def test_a_server_whose_port_was_taken_starts_again_on_other_ports(monkeypatch, tmp_path):
    """free_port() chooses a port that another process may bind before the
    server does (the suite's run once lost bench_history's tickdb that way):
    the benchmarks start the server again on fresh ports. Here the first
    port handed out is one a socket holds."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_query
    import benchutil

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    ports = iter([held.getsockname()[1]])
    real = benchutil.free_port
    monkeypatch.setattr(bench_query, "free_port", lambda: next(ports, None) or real())
    try:
        server, http, _pg = bench_query.start_tickdb(BIN, tmp_path)
        try:
            log = (tmp_path / "tickdb.log").read_text()
            assert "address already in use" in log.lower(), log
            assert http != held.getsockname()[1]
            assert bench_query.http_exec(http, "select 1")[0][0] == 1
        finally:
            server.stop()
    finally:
        held.close()
