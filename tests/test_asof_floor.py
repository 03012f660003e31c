"""scripts/asof_floor.py: the one-symbol as-of join's answer (numpy, the
benchmark's oracle beside DuckDB) and the cache lines it must read, on rows
small enough to count by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import asof_floor  # noqa: E402


def frame(rows: list[tuple[int, str, float]], value: str) -> pd.DataFrame:
    return pd.DataFrame({"time": pd.to_datetime([r[0] for r in rows], unit="ns"),
                         "sym": pd.Categorical([r[1] for r in rows]),
                         value: [r[2] for r in rows]})


def test_answer_is_the_latest_quote_at_or_before_each_trade():
    quotes = frame([(0, "A", 1.0), (1, "B", 50.0), (10, "A", 2.0), (10, "A", 3.0), (20, "A", 4.0),
                    (30, "B", 60.0)], "bid")
    # 5 -> the quote at 0; 10 -> the last of the two at 10 (ties: the last
    # to arrive); 25 -> 20; B's trade at 0 is before its first quote: it
    # counts, and adds nothing to the sum.
    trades = frame([(0, "B", 9.0), (5, "A", 9.0), (10, "A", 9.0), (25, "A", 9.0)], "price")
    a = asof_floor.one_symbol(trades, quotes, "A")
    assert (a.trades, a.quotes, a.answer) == (3, 4, (3, 1.0 + 3.0 + 4.0))
    b = asof_floor.one_symbol(trades, quotes, "B")
    assert b.answer == (1, None)
    assert asof_floor.one_symbol(trades, quotes, "C").answer == (0, None)


def test_lines_are_counted_once_per_64_bytes():
    # Eight 8-byte values share a line, sixteen 4-byte index entries.
    assert asof_floor.lines(np.array([0, 7, 8, 15, 16]), 8) == 3 * 64
    assert asof_floor.lines(np.array([0, 15, 16]), 16) == 2 * 64
    assert asof_floor.lines(np.array([], dtype=np.int64), 8) == 0


def test_floors_count_what_the_join_must_read_in_each_layout():
    # Symbol A's quotes are every 8th quote row (one line each in the
    # arrival-order columns), its 2 trades every 8th trade row.
    n = 64
    quotes = frame([(i, "A" if i % 8 == 0 else "B", float(i)) for i in range(n)], "bid")
    trades = frame([(i * 8 + 1, "A" if i % 8 == 0 else "B", 0.0) for i in range(16)], "price")
    f = asof_floor.one_symbol(trades, quotes, "A")
    # Trades at 1 and 65: the first matches A's quote at 0 (rank 0), whose
    # next is rank 1; the second matches the last, rank 7, with none after.
    assert f.answer == (2, 0.0 + 56.0)
    assert f.layout == {"trade times": 2 * 64,         # trade rows 0 and 8: two lines
                        "quote times": 3 * 64,         # ranks 0, 1, 7: rows 0, 8, 56
                        "bids": 2 * 64,                # rows 0 and 56
                        "symbol index": 64 + 64}       # ranks 0, 1, 7 and trade ranks 0, 1
    assert f.per_symbol == {"trade times": 64, "quote times": 64, "bids": 64}


def test_streaming_rate_is_positive_and_reads_at_least_the_minimum():
    rate = asof_floor.stream_bytes_per_s(1 << 20, 2)
    # At least 64 MiB read in the time measured: a plausible rate, not a
    # check of this machine's speed.
    assert 1e8 < rate < 1e13, rate
