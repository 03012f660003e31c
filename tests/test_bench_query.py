"""`scripts/bench_query.py` at a small size against the binary under test,
without QuestDB. The benchmark checks what it measures: tickdb and DuckDB
must give the same answer (counts exactly, sums to a relative 1e-6) to the
ASOF JOIN, the one-symbol monitor query and the 1-second buckets, and every
result-streaming client (psql aside) must read the same rows and sum, or it
exits 1. So a short run is an end-to-end test of those queries against
DuckDB and of PostgreSQL-wire and Arrow streaming. Speed is not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import BIN

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_query.py"


def test_bench_query_agrees_with_duckdb_on_every_query_and_stream(tmp_path):
    out = tmp_path / "sql.md"
    # A previous run's section between two others: it is replaced in place.
    out.write_text("# Benchmarks\n\n## Before\n\nkept\n\n## SQL\n\nstale figures\n\n## After\n\nkept too\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--rows", "60000", "--syms", "50", "--repeats", "1",
                        "--no-questdb", "--bin", BIN, "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    md = out.read_text()
    assert md.count("## SQL") == 1 and "### Results out" in md, md
    assert "stale figures" not in md and md.index("## Before") < md.index("## SQL") < md.index("## After"), md
    assert "kept\n" in md and "kept too" in md and "regenerates \"SQL\" alone" in md, md
    assert "All systems returned the same answer" in md, md
    # One row per query, each with a tickdb time and a DuckDB time.
    for title in ("ASOF JOIN of all trades", "monitor query", "1-second buckets"):
        rows = [line for line in md.splitlines() if line.startswith("|") and title in line]
        assert len(rows) == 1 and (" ms |" in rows[0] or " s |" in rows[0]), (title, md)
    assert "Every client read exactly" in md, md


def test_same_answers_compares_every_column():
    sys.path.insert(0, str(ROOT / "scripts"))
    import benchutil
    same = benchutil.same_answers
    assert same({"a": (3, 1.0000000001, 7), "b": (3, 1.0, 7)})
    assert not same({"a": (3, 1.0, 7), "b": (3, 1.0, 8)}), "a different count in a later column"
    assert not same({"a": (3, 1.0), "b": (3, 1.01)}), "a different sum"
    assert not same({"a": (3, 1.0), "b": (4, 1.0)}), "a different count"
    assert not same({"a": (3, None), "b": (3, 0.0)}), "NULL is not zero"
    assert not same({"a": (3,), "b": (3, 1.0)}), "rows of different widths"
    assert not same({"a": None, "b": (3,)}), "a missing row"
    assert same({"a": (0, None), "b": (0, None)})
