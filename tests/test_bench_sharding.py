"""`tickdb bench sharding --quick` (shortened further) against the binary
under test: the experiments of the KX whitepaper "Socket Sharding with kdb+
and Linux" against rdbs sharing query ports (rp,PORT), and the PostgreSQL
throughput of 1, 2 and 4 rdbs behind one port. The benchmark checks what it
measures: every kdb+ IPC request must be answered with the expected value
by a listener of its group, every rdb must give the same answer to the
throughput query (and so must every psycopg client), and the rolling upgrade
on rp must fail no request; a miss fails it. So a short run is an
end-to-end test of shared ports (join when ready, the kernel's spread, busy
steering, drain on SIGTERM) with real clients. Speed is not asserted, only
what holds on any machine: one single-threaded listener answers at most
five 0.2 s requests a second."""

from __future__ import annotations

import json

from harness import run

MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req"
SECTIONS = (
    "### 3. Basic sharding implementation",
    "### 4. Adding more listeners on the fly (the paper's Table 1)",
    "### 5. Sending a large volume of requests",
    "### 6. Routing connections to multiple listeners when one is busy (the paper's Figure 4)",
    "### 7. Minimizing downtime with rolling updates",
    "### Query throughput: rdbs sharing one PostgreSQL port",
)


def migrate_req() -> str | None:
    try:
        with open(MIGRATE_REQ) as f:
            return f.read().strip()
    except OSError:
        return None


def md_rows(md: str, label: str) -> list[list[str]]:
    return [[c.strip() for c in l.split("|")[1:-1]] for l in md.splitlines() if l.startswith(f"| {label}")]


def test_bench_sharding_quick_runs_the_whitepaper_and_checks_every_answer(tmp_path):
    before = migrate_req()
    out = tmp_path / "sharding.json"
    r = run(["bench", "sharding", "--quick", "--period-s", "6", "--volume-s", "3", "--block-s", "4",
             "--throughput-s", "3", "--throughput-runs", "2", "--scenario-runs", "2",
             "--rolling-rows", "500k",
             "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=360)
    assert r.returncode == 0, r.stderr[-4000:]
    # The sysctl is as it was (the benchmark puts back what it set).
    assert migrate_req() == before
    md = r.stdout
    rep = json.loads(out.read_text())
    assert rep["failures"] == [], rep["failures"]
    assert "Checks: all passed" in md, md
    for h in SECTIONS:
        assert h in md, h
    assert rep["cores"] >= 1 and f"({rep['cores']} cores available" in md, md
    steering = rep["sysctl"]["during"] == "1"

    # §3: two runs, each 1000 connections kept open over 4 new listeners,
    # each a fair share.
    assert [b["run"] for b in rep["basic"]] == [0, 1]
    pids = set()
    for b in rep["basic"]:
        assert b["connections"] == 1000 and len(b["per_listener"]) == 4
        assert sum(n for _, n in b["per_listener"]) == 1000
        assert all(n > 150 for _, n in b["per_listener"]), b["per_listener"]
        assert 0 < b["same_as_previous"] < 999 and len(b["differ_head"]) == 20
        pids |= {p for p, _ in b["per_listener"]}
    assert len(pids) == 8, pids
    rows3 = [row for row in md_rows(md, "listener ") if row[0] != "listener"]
    assert len(rows3) == 4 and "25.7%" in md, md
    # Each listener's count: the median of the two runs, with their range.
    for k, row in enumerate(rows3):
        ns = sorted(b["per_listener"][k][1] for b in rep["basic"])
        assert row[1].startswith(f"{(ns[0] + ns[1]) / 2:.0f}"), (row, ns)
        assert ns[0] == ns[1] or f"({ns[0]}–{ns[1]})" in row[1], (row, ns)

    # §4: two runs of off and on, three periods each, a listener joining
    # each period.
    assert [(f["run"], f["steering"]) for f in rep["fly"]] == [(0, "off"), (0, "on"), (1, "off"), (1, "on")]
    for f in rep["fly"]:
        assert [j["listener"] for j in f["joins"]] == [1, 2, 3]
        for j in f["joins"][1:]:
            assert j["ready_s"] >= j["started_s"] and j["load_s"] > 0, j
        periods = f["periods"]
        assert [p["listeners"] for p in periods] == [1, 2, 3]
        for p in periods:
            st = p["stats"]
            assert st["failed"] == 0 and st["answered"] > 0, p
            # A 2 s request cannot take less than 2 s.
            assert st["p50_s"] >= 1.9, p
        assert all(r["error"] is None for r in f["requests"])
    # Three listeners process at least as many as one (both runs together:
    # the kernel's choice is random).
    answered = [[p["stats"]["answered"] for p in f["periods"]] for f in rep["fly"]]
    assert sum(a[2] for a in answered) >= sum(a[0] for a in answered), answered
    assert "3.909 s" in md and "42.33 (" in md, md
    # One row per period and steering, each figure a median with its range.
    p1 = md_rows(md, "1 (0–6 s)")
    assert len(p1) == 2, md
    assert all("–" in row[3] for row in p1), p1
    assert "2 run(s) of the scenario, steering off and on in each" in md, md

    # §5: two runs of 1, 2, 3 listeners, steering off and on.
    v = rep["volume"]
    assert [(c["run"], c["listeners"], c["steering"]) for c in v] == [
        (k, n, s) for k in (0, 1) for n in (1, 2, 3) for s in ("off", "on")]
    for c in v:
        assert c["stats"]["failed"] == 0 and c["stats"]["answered"] > 0, c
        assert c["stats"]["p50_s"] >= 0.19, c
        assert len(c["stats"]["per_listener"]) <= c["listeners"], c
    # One single-threaded listener answers at most 1 / 0.2 s = 5 a second.
    for c in v:
        if c["listeners"] == 1:
            assert c["throughput"] <= 5.5, c
    vrows = md_rows(md, "1 | steering")
    assert len(vrows) == 2 and all(int(row[2]) == sum(
        c["stats"]["sent"] for c in v if c["listeners"] == 1 and row[1].startswith(f"steering {c['steering']}"))
        for row in vrows), (vrows, md)

    # §6: two runs of off and on. The kernel alone keeps sending
    # connections to the blocked listener, which hold them until the block
    # ends; steering takes it out.
    busy = rep["busy"]
    assert [(x["run"], x["steering"]) for x in busy] == [(0, "off"), (0, "on"), (1, "off"), (1, "on")]
    for x in busy:
        assert x["block_status"] == 200 and x["during"] > 10 and x["failed"] == 0, x
        assert x["to_blocked"] + x["to_other"] == x["during"], x
    for off, on in (busy[0:2], busy[2:4]):
        assert off["to_blocked"] >= 1 and off["blocked_max_wait_s"] >= 1.0, off
        assert off["listeners_min"] == 2, off
        if steering:
            assert on["to_blocked_after_busy_ms"] == 0, on
            assert on["listeners_min"] == 1 and on["left_at_s"] is not None, on
            assert on["max_wait_after_busy_ms_s"] < 1.0, on
    s6 = md.split("### 6.")[1].split("### 7.")[0]
    assert "met" in s6 and "2 run(s), steering off and on in each" in s6, s6
    rows6 = md_rows(s6, "steering o")
    assert len(rows6) == 2, s6
    # Connections during the block: the median of the two runs.
    for row, st in zip(rows6, ("off", "on")):
        n = sorted(x["during"] for x in busy if x["steering"] == st)
        assert row[1].startswith(f"{(n[0] + n[1]) / 2:.0f}"), (row, n)
        assert row[5] == str(sum(x["failed"] for x in busy if x["steering"] == st)), row

    # §7: two runs of both upgrades against one journal; each reaches the
    # new listener, none on rp fails a request.
    ro = rep["rolling"]
    assert ro["rows"] == 500_000 and ro["trades"] > 0
    assert [(u["run"], u["shared"]) for u in ro["upgrades"]] == [(0, False), (0, True), (1, False), (1, True)]
    for u in ro["upgrades"]:
        assert u["by_old"] > 0 and u["by_new"] > 0 and u["new_trades_equal"] and u["wrong"] == 0, u
        assert u["old_exit"] == "exit status: 0", u
        assert u["load_s"] > 0, u
        if u["shared"]:
            assert u["failed"] == 0, u
    assert "Target: zero failed requests in the rolling upgrade on `rp`, in every run (0, 0: met)" in md, md
    rows7 = md_rows(md, "(a) plain") + md_rows(md, "(b) `rp")
    assert len(rows7) == 2 and all("–" in row[1] for row in rows7), rows7
    assert rows7[0][4] == str(sum(u["failed"] for u in ro["upgrades"] if not u["shared"])), rows7
    assert "run 1: " in md and "run 2: " in md.split("### 7.")[1], md

    # Throughput: three setups in two rounds, the same answer everywhere, no
    # client error; each setup's queries/s a median with the rounds' range.
    t = rep["throughput"]
    if t["skipped"] is None:
        assert [(c["run"], c["rdbs"]) for c in t["cells"]] == [(0, 1), (0, 2), (0, 4), (1, 1), (1, 2), (1, 4)]
        assert t["answer_rows"] == 500
        for c in t["cells"]:
            assert c["queries"] > 0 and c["errors"] == 0, c
            assert len(c["per_rdb"]) == c["rdbs"], c
        assert "2 round(s), every setup in turn" in md, md
        rows = md_rows(md, "4 |")
        assert len(rows) >= 1 and "–" in rows[-1][1], md
    else:
        assert "Skipped:" in md


def test_bench_sharding_refuses_an_unknown_section(tmp_path):
    r = run(["bench", "sharding", "--sections", "basic,bogus", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "bogus" in r.stderr, r.stderr
    r = run(["bench", "sharding", "--scenario-runs", "0", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "--scenario-runs" in r.stderr, r.stderr


def test_bench_report_only_refuses_an_unknown_section(tmp_path):
    out = tmp_path / "b.md"
    out.write_text("# Benchmarks\n")
    r = run(["bench", "report", "--only", "bogus", "--out", str(out), "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "bogus" in r.stderr and "sharding" in r.stderr, r.stderr
    assert out.read_text() == "# Benchmarks\n"


def test_bench_sharding_throughput_counts_cpu_again_in_a_reused_work_dir(tmp_path):
    """A second run in the same --work-dir must not read the first run's
    results file as phases already done (its CPU then read 0.00 cores)."""
    work = tmp_path / "work"
    for k in range(2):
        out = tmp_path / f"t{k}.json"
        r = run(["bench", "sharding", "--sections", "throughput", "--throughput-s", "1",
                 "--throughput-rdbs", "1", "--throughput-runs", "1", "--rows", "20000",
                 "--json", str(out), "--work-dir", str(work)], timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        t = json.loads(out.read_text())["throughput"]
        if t["skipped"] is not None:
            return
        (cell,) = t["cells"]
        # 16 clients keep the one single-threaded rdb busy.
        assert cell["queries"] > 0 and cell["server_cores"] is not None and cell["server_cores"] > 0.3, (k, cell)
