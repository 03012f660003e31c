"""What the Python benchmarks share: free loopback ports, loading a
DataFrame into a server through the `questdb` ILP client, and replacing one
section of docs/benchmarks.md in place."""

from __future__ import annotations

import socket
from pathlib import Path
import time
from typing import Callable

import pandas as pd
from questdb.ingress import Sender

# Rows per ILP HTTP request.
LOAD_STEP_ROWS = 100_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_ilp(http_port: int, df: pd.DataFrame, table: str,
             progress: Callable[[int, int, float], None] | None = None) -> float:
    """Sends df (with `sym` and `time` columns) through the questdb client
    in LOAD_STEP_ROWS-row HTTP requests, each flushed (acknowledged) before
    the next; calls progress(done, total, seconds) after each. Seconds."""
    t = time.monotonic()
    with Sender.from_conf(f"http::addr=127.0.0.1:{http_port};auto_flush=off;request_timeout=120000;") as s:
        for i in range(0, len(df), LOAD_STEP_ROWS):
            s.dataframe(df.iloc[i:i + LOAD_STEP_ROWS], table_name=table, symbols=["sym"], at="time")
            s.flush()
            if progress is not None:
                progress(min(i + LOAD_STEP_ROWS, len(df)), len(df), time.monotonic() - t)
    return time.monotonic() - t


def write_section(path: Path, section: str, text: str, regen_line: str) -> None:
    """Replaces the section `section` (its `## ` heading line, to the next
    `## ` heading) in place with `text`, or appends it; makes sure the
    header (before the first section) has `regen_line`, which names the
    command that regenerates the section alone."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = doc.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if l.rstrip("\n") == section), None)
    if start is None:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        doc = "".join(lines[:start]) + text + ("\n" + tail if tail else "")
    if regen_line not in doc:
        i = doc.find("\n## ")
        if i < 0:
            doc = doc.rstrip("\n") + "\n\n" + regen_line + "\n"
        else:
            doc = doc[:i].rstrip("\n") + "\n\n" + regen_line + "\n" + doc[i:]
    path.write_text(doc)
