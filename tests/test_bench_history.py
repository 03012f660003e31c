"""`scripts/bench_history.py --quick` against the binary under test, into a
temporary copy of docs/benchmarks.md. The benchmark checks what it
measures: DuckDB reads back every end-of-day file and must find exactly the
rows sent; every history query must give the same answer through tickdb
and through DuckDB over the same Parquet files, and the counts and sums that
were sent; `EXPLAIN ANALYZE` must show tickdb reading only the date
directories (and today's memory) the query's filter names. A miss fails it.
So a short run is an end-to-end test of end of day under a concurrent
writer, SQL over today and history, and date pruning. Speed is not
asserted. The section must replace itself in place: a second run into the
same file leaves one section, the sections around it untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness import BIN

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_history.py"
SECTION = "## End of day and history"


def bench(out: Path, rep: Path, work: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--quick", "--bin", BIN, "--out", str(out),
                           "--json", str(rep), "--work-dir", str(work)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TICKDB_BIN": BIN})


def test_bench_history_quick_writes_its_section_and_every_cross_check_passes(tmp_path):
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    rep = tmp_path / "history.json"

    r = bench(doc, rep, tmp_path / "work")
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(rep.read_text())
    assert report["failures"] == [], report["failures"]
    assert report["quick"] and len(report["checks"]) >= 20, report["checks"]
    assert all(c["ok"] for c in report["checks"])

    md = doc.read_text()
    assert md.count(SECTION) == 1, md
    section = md[md.index(SECTION):]
    if "\n## " in section:
        section = section[: section.index("\n## ")]
    assert "Cross-checks: all" in section and "passed" in section, section
    assert "### End-of-day write" in section and "### Queries over 30 days of history" in section, section
    # The end of day: one run, its figures in the table.
    (run,) = report["eod"]
    assert run["rows"] >= 1_000_000 and run["seconds"] > 0 and run["file_bytes"] > 0, run
    assert 0 < run["size_ratio"] < 1 and run["writer_acks"] > 0, run
    assert f"| 1 | {run['rows']:,} |" in section, section
    # The queries: four, each with its pruning figures.
    q = report["history"]["queries"]
    assert set(q) == {"a", "b", "c_hist", "c_span"}
    assert len(q["a"]["explain"]["partitions"]) == 1 and q["a"]["explain"]["row_groups_read"] >= 1, q["a"]
    assert len(q["b"]["explain"]["partitions"]) >= 25, q["b"]["explain"]
    assert q["c_span"]["explain"]["memory_scan"] and not q["c_hist"]["explain"]["memory_scan"]
    for key in q:
        assert len(q[key]["tickdb_runs"]) == 5, q[key]
        forms = q[key]["duckdb_forms"]
        assert set(forms) == {"default", "best"} and all(len(f["runs"]) == 5 for f in forms.values()), forms
        assert q[key]["duckdb_s"] == min(f["s"] for f in forms.values()), q[key]
    assert section.count("| yes |") == 4, section
    # Both DuckDB forms are in the table and each answered like tickdb.
    assert "| DuckDB as it ships | DuckDB best settings | tickdb / the faster DuckDB |" in section, section
    names = {c["name"] for c in report["checks"]}
    for key in q:
        for form in ("default", "best"):
            assert f"query {key}: tickdb and DuckDB ({form}) return the same answer" in names, names
    # The header names the command.
    assert "scripts/bench_history.py [--quick]" in md[: md.index("\n## ")], md[:2000]

    # A second run replaces the section in place: still one, what comes
    # before and after it kept.
    after = "\n## Zzz after\n\nkept as it is\n"
    doc.write_text(md + after)
    r = bench(doc, rep, tmp_path / "work2")
    assert r.returncode == 0, r.stderr[-4000:]
    md2 = doc.read_text()
    assert md2.count(SECTION) == 1 and md2.endswith(after), md2[-3000:]
    assert md2[: md2.index(SECTION)] == md[: md.index(SECTION)]
    assert md2.count("scripts/bench_history.py [--quick]") == 1
