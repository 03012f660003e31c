"""`tickdb bench replication` in a short run (--quick sizes) against the
binary under test. The benchmark checks what it measures: after every
scenario the standby's journal equals the primary's (`tickdb journal
compare`) and both hold the same rows, and every acknowledged write is on
the primary exactly once; a mismatch fails it. So a short run is a real
end-to-end test of replication under the bulk insert, a steady feed,
semi-sync acknowledgements, a catch-up and kill -9 restarts. Speed is not
asserted."""

from __future__ import annotations

import json
import re

from harness import run

QUICK_SCALE = 0.005  # --quick's --minutes-scale
RATE = 48_000


def md_rows(md: str, label: str) -> list[list[str]]:
    return [[c.strip() for c in l.split("|")[1:-1]] for l in md.splitlines() if l.startswith(f"| {label}")]


def test_bench_replication_measures_every_section_and_the_standby_equals_the_primary(tmp_path):
    out = tmp_path / "replication.json"
    r = run(["bench", "replication", "--quick", "--latency-runs", "2", "--catchup-runs", "2",
             "--restore-runs", "2", "--json", str(out),
             "--work-dir", str(tmp_path / "work")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    rep = json.loads(out.read_text())

    # Correctness held everywhere: every scenario with a standby was checked.
    assert rep["correct"] is True
    scenarios = [c["scenario"] for c in rep["checks"]]
    assert all(c["ok"] and c["journal_equal"] and c["primary_rows"] == c["standby_rows"] > 0
               for c in rep["checks"]), rep["checks"]
    assert all(c["journal_compare"].startswith("identical over seq 1..=") for c in rep["checks"]), rep["checks"]
    assert sum(s.startswith("insert") for s in scenarios) == 2  # async and semi-sync
    # Two rounds of the lag's four cells and of the ack's two standby setups.
    assert sum(s.startswith("lag") for s in scenarios) == 8
    assert sum(s.startswith("ack") for s in scenarios) == 4
    assert scenarios.count("catch-up") == 2  # a new standby each round
    assert sum(s.startswith("restore") for s in scenarios) == 5
    assert "checks: all passed" in md

    # Figures 2 and 3: the primary alone, with an async and a semi-sync standby.
    cells = rep["insert"]
    assert [(c["primary_fsync"], c["setup"]) for c in cells] == [
        ("never", "alone"), ("never", "async"), ("never", "semi-sync")]
    assert [c["standby_fsync"] for c in cells] == [None, "always", "always"]
    for c in cells:
        (run1,) = c["runs"]
        assert run1["rows"] == 50_000 and run1["rows_s"] > 0 and run1["mb_s"] > 0 and run1["samples"], c
    assert cells[0]["standby_cpu_avg"] == [] and all(len(c["standby_cpu_avg"]) == 1 for c in cells[1:])
    assert len(md_rows(md, "never |")) == 3, md

    # Lag: async and semi-sync at both rates, from the standby's histogram.
    lag = rep["lag"]
    assert [(c["run"], c["setup"], c["target_rows_s"]) for c in lag] == [
        (run_, setup, rate) for run_ in (0, 1) for setup in ("async", "semi-sync") for rate in (48_000, 480_000)]
    for c in lag:
        assert c["records"] > 0 and c["rows"] > 0 and c["achieved_rows_s"] > 0, c
        assert 0 < c["p50_us"] <= c["p99_us"] <= c["max_us"], c

    # Acknowledged writes: none lost or duplicated; semi-sync waited for the standby.
    ack = rep["ack"]
    assert [(a["run"], a["setup"]) for a in ack] == [
        (run_, setup) for run_ in (0, 1) for setup in ("alone", "async", "semi-sync")]
    for a in ack:
        p = a["phase"]
        assert a["lost_rows"] == 0 and a["duplicated_rows"] == 0 and p["write_errors"] == 0, a
        assert p["updates_acked"] > 0 and 0 < p["p50_us"] <= p["p99_us"] <= p["max_us"], a

    # Catch-up: the asked-for journal, read raw and shipped.
    cu = rep["catchup"]
    assert cu["journal_bytes"] >= 0.02e9 and cu["segments"] >= 1 and cu["records"] > 0
    assert len(cu["rounds"]) == 2, cu
    for x in cu["rounds"]:
        assert x["raw_read_mb_s"] > 0 and 0 < x["journal_secs"] <= x["applied_secs"] and x["ratio_to_raw"] > 0, x
    assert "2 round(s) of the raw read then a new standby" in md, md
    (journal_row,) = md_rows(md, "standby catch-up: journal")
    assert "–" in journal_row[2] and "–" in journal_row[4], journal_row

    # Figure 4: 0, 1, 2.5 and 5 minutes of log, scaled, each restart back
    # with the primary's rows.
    pts = rep["restore"]["points"]
    assert [p["minutes"] for p in pts] == [0, 1, 2.5, 5]
    for p in pts:
        assert p["tail_rows"] == round(p["minutes"] * 60 * QUICK_SCALE * RATE), p
        assert p["tail_records"] == -(-p["tail_rows"] // 48), p
        # Two runs of the pair of restarts, every one back with the same rows.
        assert len(p["hot_restart"]) == len(p["full_replay"]) == 2, p
        for h, f in zip(p["hot_restart"], p["full_replay"]):
            assert h["rows"] == f["rows"] == p["hot_restart"][0]["rows"] > 0 and p["journal_records"] > p["tail_records"]
            assert 0 < h["ready_s"] <= h["caught_up_s"] and 0 < f["ready_s"] <= f["caught_up_s"]
            assert h["reload_s"] is not None and f["reload_s"] is None
    assert pts[-1]["hot_restart"][0]["rows"] > pts[0]["hot_restart"][0]["rows"]
    assert "2 run(s) of the two restarts per point" in md, md

    # The report names its source by title and states its conditions.
    assert "Zero-Impact Crash Recovery for kdb+" in md
    assert "competes with them for CPU" in md
    assert "Figure 4" in md and "--minutes-scale 0.005" in md
    for target in ("at most 2% of its throughput", "at most 10% of its throughput",
                   "p99 under 1.00 ms at 48.0k rows/s", "80% or more of a raw cold read"):
        assert target in md, (target, md)
    assert not re.search(r"seed 0|issue #", md, re.IGNORECASE), md
    # Lag and ack rows: one per cell, each figure a median with the two
    # rounds' range.
    assert "2 round(s), every cell in turn" in md and "2 round(s), every setup in turn" in md, md
    for row in md_rows(md, "async | 48.0k") + md_rows(md, "semi-sync |"):
        assert "–" in row[4], row
    # The primary alone is each round's baseline: its ratio to itself is 1.
    (alone_row,) = md_rows(md, "none (alone)")
    assert alone_row[7] == "1.00×", alone_row


def test_bench_replication_refuses_an_unknown_section(tmp_path):
    r = run(["bench", "replication", "--sections", "lag,bogus", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "bogus" in r.stderr, r.stderr


def test_bench_replication_refuses_zero_runs(tmp_path):
    for flag in ("--catchup-runs", "--restore-runs"):
        r = run(["bench", "replication", flag, "0", "--work-dir", str(tmp_path / "w")])
        assert r.returncode != 0 and flag in r.stderr, r.stderr
