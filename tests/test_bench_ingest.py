"""`tickdb bench report --only ingest` at the quick size against the binary
under test, without QuestDB, into a copy of docs/benchmarks.md: the "ILP
ingest" section is measured again and replaces itself in place, and nothing
after it changes. `tickdb bench ingest` checks that every row it sent is
queryable before it stops a clock, so a run is also an end-to-end test of
ILP over TCP and HTTP under both fsync modes. Speed is not asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import run

ROOT = Path(__file__).resolve().parent.parent
SECTION = "\n## ILP ingest\n"
NEXT = "\n## Tick-to-subscriber latency\n"


def test_bench_report_only_ingest_replaces_its_section_and_nothing_else(tmp_path):
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    before = doc.read_text()
    r = run(["bench", "report", "--only", "ingest", "--quick", "--no-questdb", "--out", str(doc),
             "--work-dir", str(tmp_path / "w")], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    after = doc.read_text()
    assert after.count(SECTION) == 1 and after.count(NEXT) == 1, after
    section = after.split(SECTION)[1].split("\n## ")[0]
    assert "200000 trade rows per run" in section, section
    cells = [line for line in section.splitlines() if line.startswith(("| TCP", "| HTTP"))]
    assert len(cells) == 4, section
    assert "| QuestDB default | QuestDB tuned |" in section, section
    for line in cells:
        never, always = line.split("|")[3:5]
        assert never.strip()[0].isdigit() and always.strip()[0].isdigit(), line
    assert after.split(NEXT)[1] == before.split(NEXT)[1]
    assert '`tickdb bench report --only ingest --quick` regenerated "ILP ingest" alone' in after, after[:3000]


def _java_or_skip():
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: QuestDB (a Maven Central jar) cannot run here")


def test_bench_ingest_runs_questdb_in_its_default_and_tuned_forms(tmp_path):
    """Both QuestDB forms ingest the same rows, pass the count and sum(size)
    check, and the ratio names the better one."""
    _java_or_skip()
    r = run(["bench", "ingest", "--rows", "50000", "--repeats", "1", "--conns", "1",
             "--work-dir", str(tmp_path / "w")], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| QuestDB default | QuestDB tuned |" in r.stdout, r.stdout
    cells = [line for line in r.stdout.splitlines() if line.startswith(("| TCP", "| HTTP"))]
    assert len(cells) == 2, r.stdout
    for line in cells:
        cols = [c.strip() for c in line.strip("|").split("|")]
        default, tuned, ratio_never, ratio_always = cols[4:8]
        assert default[0].isdigit() and tuned[0].isdigit(), line
        for ratio in (ratio_never, ratio_always):
            assert ratio.endswith(("(default)", "(tuned)")) and ratio[0].isdigit(), line


def test_bench_insert_runs_questdb_in_its_default_and_tuned_forms(tmp_path):
    _java_or_skip()
    r = run(["bench", "insert", "--rows", "50000", "--fsync", "never",
             "--work-dir", str(tmp_path / "w")], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in r.stdout.splitlines()
            if line.startswith("| ")}
    names = [n for n in rows if n.startswith("QuestDB")]
    assert len(names) == 2 and any("(default" in n for n in names) \
        and any("(tuned" in n for n in names), r.stdout
    tickdb = rows["tickdb up --fsync never"]
    assert tickdb.rstrip().rstrip("|").split("|")[-1].strip().endswith("×"), tickdb
    # Three runs per server by default: rows/s is the median and the range.
    for line in rows.values():
        if line.startswith(("| tickdb", "| QuestDB")):
            assert "–" in line.split("|")[3], line
    bad = run(["bench", "insert", "--runs", "0", "--no-questdb"], timeout=60)
    assert bad.returncode != 0 and "--runs" in bad.stderr, bad.stderr
