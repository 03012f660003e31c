"""What the Python benchmarks share: free loopback ports, and loading a
DataFrame into a server through the `questdb` ILP client."""

from __future__ import annotations

import socket
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
