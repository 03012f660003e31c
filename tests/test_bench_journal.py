"""`tickdb bench journal` runs its whole sequence (dd, appends under each
fsync policy, replay, group commit) several times and reports medians with
ranges; `tickdb bench report --only journal` regenerates that section alone in
a copy of docs/benchmarks.md. Speed is not asserted: a run is also an
end-to-end test of the journal under each fsync policy and of its replay."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness import run

ROOT = Path(__file__).resolve().parent.parent
SECTION = "\n## Journal\n"
NEXT = "\n## Hot Restart: key-value workload (Hot Restart Persistence)\n"


def test_bench_journal_reports_the_median_and_range_of_its_runs(tmp_path):
    r = run(["bench", "journal", "--megabytes", "16", "--seconds", "1", "--writers", "1,4",
             "--runs", "2", "--work-dir", str(tmp_path / "w")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "median (min–max) of 2 runs" in r.stdout, r.stdout
    rows = [line for line in r.stdout.splitlines()
            if line.startswith(("| never", "| interval", "| always", "| 1 ", "| 4 ",
                                "| raw sequential", "| journal replay"))]
    assert len(rows) == 7, r.stdout
    for line in rows:
        assert "–" in line, line
    bad = run(["bench", "journal", "--runs", "0"], timeout=60)
    assert bad.returncode != 0 and "--runs" in bad.stderr, bad.stderr


def test_bench_report_only_journal_replaces_its_section_and_nothing_else(tmp_path):
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    before = doc.read_text()
    r = run(["bench", "report", "--only", "journal", "--quick", "--out", str(doc),
             "--work-dir", str(tmp_path / "w")], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    after = doc.read_text()
    assert after.count(SECTION) == 1 and after.count(NEXT) == 1, after
    section = after.split(SECTION)[1].split("\n## ")[0]
    assert "from one run of the whole sequence" in section and "64 MB per policy" in section, section
    assert after.split(NEXT)[1] == before.split(NEXT)[1]
    assert '`tickdb bench report --only journal --quick` regenerated "Journal" alone' in after, after[:3000]
