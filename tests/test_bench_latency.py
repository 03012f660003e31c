"""`tickdb bench latency` runs each publish mode several times, each on a fresh
tp, and reports medians with ranges; `tickdb bench report --only latency`
regenerates "Tick-to-subscriber latency" alone in a copy of
docs/benchmarks.md. The benchmark fails unless the subscriber receives every
row the feed sent, so a run is also an end-to-end test of the subscription
protocol in both modes. Speed is not asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness import run

ROOT = Path(__file__).resolve().parent.parent
SECTION = "\n## Tick-to-subscriber latency\n"
NEXT = "\n## Journal\n"


def test_bench_latency_reports_the_median_and_range_of_its_runs(tmp_path):
    r = run(["bench", "latency", "--rate", "5000", "--seconds", "2", "--modes", "0,50", "--runs", "2",
             "--work-dir", str(tmp_path / "w")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 run(s) per mode" in r.stdout, r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith(("| zero-latency", "| timer 50 ms"))]
    assert len(rows) == 2, r.stdout
    for line in rows:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        # p50, p99 and max: each a median with the two runs' range.
        for c in cells[3:6]:
            assert "(" in c and "–" in c, line
    bad = run(["bench", "latency", "--runs", "0"], timeout=60)
    assert bad.returncode != 0 and "--runs" in bad.stderr, bad.stderr


def test_bench_report_only_latency_replaces_its_section_and_nothing_else(tmp_path):
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    before = doc.read_text()
    r = run(["bench", "report", "--only", "latency", "--quick", "--out", str(doc),
             "--work-dir", str(tmp_path / "w")], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    after = doc.read_text()
    assert after.count(SECTION) == 1 and after.count(NEXT) == 1, after
    section = after.split(SECTION)[1].split("\n## ")[0]
    assert "target of 20.0k rows/s for 3 s" in section and "1 run(s) per mode" in section, section
    assert after.split(NEXT)[1] == before.split(NEXT)[1]
    assert after.split(SECTION)[0].split("## Machine")[1] == before.split(SECTION)[0].split("## Machine")[1]
    assert ('`tickdb bench report --only latency --quick` regenerated "Tick-to-subscriber latency" alone'
            in after), after[:3000]
