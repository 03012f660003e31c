"""The least memory the monitor query must read, and its answer, from the
rows a benchmark loaded (numpy, no database).

The monitor query of the Intel Optane kdb+ market-data study is the as-of
join of all of one symbol's trades with the prevailing quote
(`count(*), sum(q.bid)`). Whatever a system does, it must read, for every
trade, the trade's time; the time of the quote that answers it and of the
symbol's next quote (which shows that the answer is the last at or before
the trade); and the answer's bid. Counted in 64-byte cache lines over a
layout, those reads are a floor under the query's time: no implementation
over that layout that reads them from memory on each run (keeping no
per-query results) can take less than the floor's bytes over the machine's
streaming rate.

Two layouts are counted:
- tickdb's: each column in arrival order, in chunks whose rows are a
  multiple of 8 and whose buffers are 64-byte aligned (a value of row p is
  in line p // 8), and a symbol's rows found through the chunks' symbol
  index (4-byte row numbers, one symbol's consecutive);
- a per-symbol one: each symbol's rows contiguous in time order (as
  kdb+'s `p#` on disk), so its times and bids are dense arrays and no index
  is read.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

LINE_BYTES = 64
# Values of 8 bytes (times, bids) and index entries of 4 per cache line.
VALUES_PER_LINE = LINE_BYTES // 8
INDEX_ENTRIES_PER_LINE = LINE_BYTES // 4
# Repeats of the streaming-rate probe; the fastest is kept (a floor).
STREAM_REPEATS = 7
# The probe reads at least this much: below it, handing the reads to the
# threads costs more than the reads, and the rate it found would be low
# (a floor too high).
STREAM_BYTES_MIN = 64 << 20


@dataclass
class Floor:
    """One symbol's answer and the bytes its as-of join must read."""
    trades: int
    quotes: int
    # (count(*), sum(q.bid)): every trade counts; bids of matched trades
    # only, None when none matched (SQL's sum of no rows).
    answer: tuple[int, float | None]
    # Bytes read at least, by what is read: tickdb's layout, per-symbol.
    layout: dict[str, int]
    per_symbol: dict[str, int]


def lines(positions: np.ndarray, per_line: int) -> int:
    """Bytes of the distinct cache lines holding these positions of a
    dense array with `per_line` values per line."""
    return int(np.unique(positions // per_line).size) * LINE_BYTES


def one_symbol(trades: pd.DataFrame, quotes: pd.DataFrame, sym: str) -> Floor:
    """The answer and floors for `sym`, over frames in arrival order (the
    order they were loaded in), times sorted within each symbol."""
    tp = np.flatnonzero((trades["sym"] == sym).to_numpy())
    qp = np.flatnonzero((quotes["sym"] == sym).to_numpy())
    tt = trades["time"].to_numpy().view("i8")[tp]
    qt = quotes["time"].to_numpy().view("i8")[qp]
    qb = quotes["bid"].to_numpy()[qp]
    # The latest quote at or before each trade (ties: the last to arrive).
    match = np.searchsorted(qt, tt, side="right") - 1
    hit = match >= 0
    total = float(qb[match[hit]].sum()) if hit.any() else None
    nxt = match + 1
    # Ranks (within the symbol's quotes) whose time must be read.
    seen = np.unique(np.concatenate([match[hit], nxt[nxt < qt.size]]))
    trade_ranks = np.arange(tp.size)
    layout = {
        "trade times": lines(tp, VALUES_PER_LINE),
        "quote times": lines(qp[seen], VALUES_PER_LINE),
        "bids": lines(qp[match[hit]], VALUES_PER_LINE),
        "symbol index": lines(seen, INDEX_ENTRIES_PER_LINE) + lines(trade_ranks, INDEX_ENTRIES_PER_LINE),
    }
    per_symbol = {
        "trade times": lines(trade_ranks, VALUES_PER_LINE),
        "quote times": lines(seen, VALUES_PER_LINE),
        "bids": lines(match[hit], VALUES_PER_LINE),
    }
    return Floor(int(tp.size), int(qp.size), (int(tp.size), total), layout, per_symbol)


def stream_bytes_per_s(nbytes: int, threads: int) -> float:
    """The machine's rate of reading an array of `nbytes` (at least
    STREAM_BYTES_MIN; warm, as a query run again reads its data), on
    `threads` threads started beforehand;
    the fastest of STREAM_REPEATS reads. numpy's reductions release the GIL,
    so the threads read at once."""
    a = np.ones(max(nbytes, STREAM_BYTES_MIN) // 8, dtype=np.int64)
    parts = np.array_split(a, threads)
    best = float("inf")
    with ThreadPoolExecutor(max_workers=threads) as pool:
        # Untimed: pages touched, threads running.
        list(pool.map(np.add.reduce, parts))
        for _ in range(STREAM_REPEATS):
            t = time.perf_counter()
            list(pool.map(np.add.reduce, parts))
            best = min(best, time.perf_counter() - t)
    return a.nbytes / best
