"""`tickdb bench failover` in a short run (--quick: 3 rounds of each kind, a
10 s soak, Sentinel's best form only) against the binary under test, with
real etcd and Redis processes. The benchmark checks what it measures: after
every round the new primary's journal equals the rejoined standby's
(`tickdb journal compare`) and the primary, the standby and a remote rdb
following both hold the same rows; every row a writer saw acknowledged is
on the new primary; semi-sync loses nothing; a starved and paused primary
keeps its role; Redis's keys read back on its new master. Any miss fails
it. So a short run is a real end-to-end test of promotion by hand, etcd
failover, switchover, rejoining, fencing and the clients that follow the
primary. Speed is not asserted."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from harness import run

QUICK_ROUNDS = 3
QUICK_SOAK_S = 10
SECTIONS = (
    "### Recovery after kill -9 of the primary (RTO)",
    "### Planned switchover",
    "### Rows lost at a failover",
    "### False failovers",
    "### Restore from the standby's last checkpoint (the headline of Zero-Impact Crash Recovery for kdb+)",
    "### Peer: Redis Sentinel",
    "### Targets and anchors",
    "### Correctness",
)


def missing_peer() -> str | None:
    if shutil.which("etcd") is None and not os.access("/usr/bin/etcd", os.X_OK):
        return "etcd is not installed (Debian's etcd-server): the failover benchmark needs it"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian's redis-server): the Sentinel peer needs it"
    return None


def md_row(md: str, label: str) -> list[str]:
    rows = [[c.strip() for c in l.split("|")[1:-1]] for l in md.splitlines() if l.startswith(f"| {label}")]
    assert len(rows) == 1, (label, rows, md)
    return rows[0]


def test_bench_failover_quick_measures_every_section_and_loses_nothing_it_must_not(tmp_path):
    why = missing_peer()
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    out = tmp_path / "failover.json"
    t0 = time.monotonic()
    r = run(["bench", "failover", "--quick", "--json", str(out), "--work-dir", str(tmp_path / "work")],
            timeout=300)
    print(f"tickdb bench failover --quick: {time.monotonic() - t0:.1f} s")
    assert r.returncode == 0, r.stderr[-4000:] + r.stdout[-4000:]
    md = r.stdout
    rep = json.loads(out.read_text())

    for s in SECTIONS:
        assert s in md, (s, md)
    assert rep["correct"] is True and rep["skipped"] == []
    assert "checks: all passed" in md
    assert rep["checks"] and all(c["ok"] and c["journal_equal"] for c in rep["checks"]), rep["checks"]
    # The manual and etcd rounds, the switchover, the semi-sync loss rounds
    # and the soak each ended with the group's check (the restore adds its own).
    scenarios = [c["scenario"] for c in rep["checks"]]
    assert sum(s.startswith("manual promotion") for s in scenarios) == QUICK_ROUNDS
    assert sum(s.startswith("etcd automatic failover") for s in scenarios) == QUICK_ROUNDS
    assert sum(s.startswith("switchover") for s in scenarios) == QUICK_ROUNDS
    assert sum(s.startswith("loss (semi-sync)") for s in scenarios) == QUICK_ROUNDS
    assert scenarios.count("soak") == 1
    for c in rep["checks"]:
        if c["rdb_rows"] is not None:
            assert c["rdb_rows"] == c["primary_rows"] == c["standby_rows"] > 0, c

    # RTO: both kinds, every round timed until the first acknowledged write
    # and the rdb's resumption; epochs only grow.
    for kind, label in (("manual", "manual promotion"), ("etcd", "etcd automatic failover")):
        res = rep[kind]
        assert len(res["rounds"]) == QUICK_ROUNDS, res
        assert res["rdb_gaps"] == [], res["rdb_gaps"]
        epochs = [x["epoch"] for x in res["rounds"]]
        assert epochs == sorted(set(epochs)) and epochs[0] >= 1, epochs
        for x in res["rounds"]:
            assert x["killed"] != x["promoted"], x
            assert 0 < x["write_s"] < 60, x
            assert x["rdb_s"] is None or x["rdb_s"] >= x["write_s"], x
        assert res["feed"]["rows"] > 0, res["feed"]
        row = md_row(md, label)
        assert row[1] == str(QUICK_ROUNDS), row
    assert all(x["promote_took_ms"] is not None for x in rep["manual"]["rounds"])
    assert "zero detection time" in md

    # Switchover: every round timed from the client's side, nothing lost.
    sw = rep["switchover"]
    assert len(sw) == QUICK_ROUNDS
    for x in sw:
        assert x["rdb_diverged"] == [], x
        w = x["writer"]
        assert x["gap_ms"] > 0 and w["acked"] > 0 and w["lost"] == w["duplicated"] == w["stale"] == 0, x

    # Rows lost: async reported, semi-sync exactly zero.
    loss = {l["mode"]: l for l in rep["loss"]}
    assert set(loss) == {"async", "semi-sync"}, loss
    for l in loss.values():
        assert l["rounds"] == QUICK_ROUNDS and l["acked"] > 0 and l["duplicated"] == 0 and l["stale"] == 0, l
    assert loss["semi-sync"]["lost"] == 0, loss["semi-sync"]
    semi = md_row(md, "semi-sync")
    assert semi[1] == str(QUICK_ROUNDS) and semi[3] == "**0**", semi

    # False failovers: none in the soak, with both cores saturated and the
    # primary paused.
    soak = rep["soak"]
    assert soak["false_failovers"] == 0 and soak["promotions"] == 0 and soak["rdb_diverged"] == [], soak
    assert soak["epoch_after"] == soak["epoch_before"] and soak["pauses"] >= 1 and soak["busy_loops"] >= 2, soak
    assert soak["seconds"] == QUICK_SOAK_S
    soak_row = md_row(md, f"{QUICK_SOAK_S} s")
    assert soak_row[-1] == "**0**", soak_row

    # The brief's headline, measured in the same run.
    (pt,) = rep["restore"]["points"]
    assert pt["minutes"] == 5 and pt["tail_rows"] > 0
    (hot,) = pt["hot_restart"]  # --quick: one run
    assert 0 < hot["ready_s"] <= hot["caught_up_s"]

    # Redis Sentinel: the best form measured, the default form named and
    # skipped under --quick, and the ratio printed.
    (best,) = rep["sentinel"]
    assert best["form"]["label"] == "best" and best["form"]["down_after_ms"] == 1000
    assert len(best["rounds"]) == QUICK_ROUNDS
    assert all(0 < x["set_s"] < 60 and x["named_s"] > 0 for x in best["rounds"]), best
    assert "not run under `--quick`" in md
    assert re.search(r"tickdb's etcd failover p50 .* against Redis Sentinel's best form p50 .*×", md), md

    # Targets and anchors as text.
    for text in ("RTO p99 under 3 s", "Switchover downtime under 200 ms", "Manual promotion",
                 "Zero rows lost under semi-sync: 0 lost", "Zero false failovers: 0 in",
                 "Patroni", "15–30 s", "at least 30 s by default", "under 85 s",
                 "--lease-ttl-s 2", "--fence-margin-ms 500", "--failover-check-ms 100"):
        assert text in md, (text, md)
    # The report names its source by title, never by file or issue.
    assert not re.search(r"seed 0|issue #", md, re.IGNORECASE), md


def test_bench_failover_refuses_an_unknown_section(tmp_path):
    r = run(["bench", "failover", "--sections", "etcd,bogus", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "bogus" in r.stderr, r.stderr
