"""`tickdb bench ipc --quick` against the binary under test. The benchmark
checks what it measures: every bulk-insert run (kdb+ IPC async + chaser,
IPC sync, ILP over TCP, ILP over HTTP, under each fsync policy) must end
with the same row count, sum(size) and sum(price) as the rows sent, and
every subscriber (kdb+ IPC `.u.sub`, and the tickdb subscription protocol)
must get exactly the rows the feed sent after it subscribed; a mismatch
fails it. So a short run is an end-to-end test of `.u.upd` (async, sync,
the chaser) and `.u.sub` against a live feed. Speed is not asserted."""

from __future__ import annotations

import json

from harness import run

QUICK_ROWS = 100_000
TRANSPORTS = ("ipc-async", "ipc-sync", "ilp-tcp", "ilp-http")


def md_rows(md: str, label: str) -> list[list[str]]:
    return [[c.strip() for c in l.split("|")[1:-1]] for l in md.splitlines() if l.startswith(f"| {label}")]


def test_bench_ipc_quick_measures_both_tables_and_checks_the_rows(tmp_path):
    out = tmp_path / "ipc.json"
    r = run(["bench", "ipc", "--quick", "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    rep = json.loads(out.read_text())
    assert rep["failures"] == [], rep["failures"]
    assert "Checks: all passed" in md, md

    # Bulk insert: four transports under each fsync policy, the same rows.
    assert "### Bulk insert: kdb+ IPC against ILP" in md, md
    assert "145.96 MB/s" in md and "Zero-Impact Crash Recovery for kdb+" in md, md
    cells = rep["insert"]
    assert [(c["fsync"], c["transport"]) for c in cells] == [
        (f, t) for f in ("never", "always") for t in TRANSPORTS]
    expected = rep["expected"]
    assert expected["rows"] == QUICK_ROWS
    for c in cells:
        (run1,) = c["runs"]
        assert run1["rows"] == QUICK_ROWS and run1["rows_s"] > 0 and run1["mb_s"] > 0, c
        assert 0 < run1["seconds"] <= run1["queryable_seconds"], c
        assert run1["totals"]["rows"] == QUICK_ROWS and run1["totals"]["sum_size"] == expected["sum_size"], c
        assert abs(run1["totals"]["sum_price"] - expected["sum_price"]) <= 1e-6 * expected["sum_price"], c
    # IPC is binary: fewer bytes per row than ILP's text.
    by = {(c["fsync"], c["transport"]): c["runs"][0] for c in cells}
    assert by[("never", "ipc-async")]["bytes"] < by[("never", "ilp-tcp")]["bytes"] < by[("never", "ilp-http")]["bytes"]

    table = md_rows(md, "kdb+ IPC, ") + md_rows(md, "ILP over")
    assert len(table) == 8, md
    for row in table:
        ratio = row[7]
        if row[0] == "ILP over TCP":
            assert ratio == "—", row
        else:
            assert ratio.endswith("×") and float(ratio[:-1]) > 0, row
    assert "Target: kdb+ IPC (async + chaser) at least as fast as ILP over TCP" in md, md

    # Latency: kdb+ IPC next to the native protocol, both modes, every row.
    assert "### Tick-to-subscriber latency: kdb+ IPC against the tickdb subscription protocol" in md, md
    lat = rep["latency"]
    assert [(c["protocol"], c["publish_interval_ms"]) for c in lat] == [
        ("kdb-ipc", 0), ("tickdb", 0), ("kdb-ipc", 50), ("tickdb", 50)]
    for c in lat:
        assert c["sent"] > 0 and c["received"] == c["sent"], c
        assert c["measured"] > 0 and 0 < c["p50_us"] <= c["p99_us"] <= c["max_us"], c
    lrows = md_rows(md, "kdb+ IPC (`.u.sub`)")
    assert len(lrows) == 2 and all(r[-1].endswith("×") for r in lrows), md
    assert len(md_rows(md, "tickdb subscription protocol")) == 2, md


def test_bench_ipc_refuses_an_unknown_section(tmp_path):
    r = run(["bench", "ipc", "--sections", "insert,bogus", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "bogus" in r.stderr, r.stderr
