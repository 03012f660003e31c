#!/usr/bin/env python3
"""End of day and history benchmark: tickdb writing a trading day to its
historical database (HDB) and querying 30 days of it, with DuckDB reading
the same Parquet files in the same run, on the same machine.

    .venv/bin/python scripts/bench_history.py [--quick] [--out docs/benchmarks.md]

What it measures:

1. End-of-day write. A day of trades and quotes (default 10M + 40M) over
   1000 symbols with Zipf-skewed activity in a 6.5-hour session is loaded
   into a fresh `tickdb up --hdb` through the `questdb` ILP client; then
   `POST /admin/eod?date=` ends the day and `/status` `eod.last` is polled
   until the day is committed. Reported: the rdb's own seconds (marker to
   commit), MB/s of Arrow input, Parquet bytes over Arrow bytes and over
   `/status` `memory.dram` before the end of day, the rdb's ingest pause,
   and the largest gap between acknowledgements seen by a writer sending
   small ILP batches while the end of day runs (against the same writer's
   largest gap before it). Repeated --eod-runs times, each on a fresh load.
   DuckDB reads the written files back: row counts and sums must equal what
   was sent.
2. Queries over history. --days days of trades (default 30 x 1M) are each
   loaded and ended (`POST /admin/eod?date=` for consecutive dates up to
   yesterday), then a day's worth of trades is loaded for today. Each query
   runs through tickdb's HTTP `/exec` and through DuckDB over the same
   Parquet files (`read_parquet('HDB/trade/date=*/*.parquet',
   hive_partitioning = true)`; today's rows exported from tickdb into a
   DuckDB table for the query that spans today). DuckDB runs as it ships
   and with its documented best settings for this (`parquet_metadata_cache`
   on); tickdb's ratio is against the faster of the two. Medians of
   --repeats runs after a warm-up; every answer is compared (integers
   exactly, floats to a relative 1e-9). `EXPLAIN ANALYZE` through `/exec`
   gives the partitions (date directories) and row groups tickdb read.

The section "## End of day and history" of --out is replaced in place (or
appended when absent). The release binary is used (--bin, or TICKDB_BIN);
scripts/bench.sh builds it and runs this script after bench_query.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import requests
from questdb.ingress import Sender, TimestampNanos

import benchutil
from benchutil import free_port

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## End of day and history"
REGEN_LINE = ("`.venv/bin/python scripts/bench_history.py [--quick]` regenerates \"End of day and history\" "
              "alone, in place (`scripts/bench.sh` runs it after `scripts/bench_query.py`).")
SESSION_START_NS = (9 * 3600 + 30 * 60) * 10**9  # 09:30 UTC
SESSION_NS = int(6.5 * 3600 * 10**9)  # to 16:00
READY_S = 120
REL_TOL = 1e-9
WRITER_SYM = "ZWRITER"  # the concurrent writer's symbol, not one of the generated ones
WRITER_ROWS = 10  # rows per acknowledged ILP request of the concurrent writer

EOD_TARGET_S = 60.0
SIZE_TARGET = 0.30
ONE_DAY_TARGET_S = 0.050
SPAN_TARGET = 2.0


def log(msg: str) -> None:
    print(f"[bench history] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return os.getloadavg()[0]


# --- machine ----------------------------------------------------------------

def noisy(load: float, cores: int) -> bool:
    """The bench report's criterion: a load average over half the cores."""
    return load > cores * 0.5


# --- servers ----------------------------------------------------------------

class Tickdb:
    """`tickdb up --hdb` in its own process group, killed by pid at the end."""

    def __init__(self, binary: str, work: Path, name: str):
        self.hdb = work / f"{name}-hdb"
        self.data = work / f"{name}-data"
        self.log = open(work / f"{name}.log", "ab")
        benchutil.start_retrying(lambda: self._start_once(binary), "tickdb")

    def _start_once(self, binary: str) -> None:
        """One start on fresh free ports, until ready."""
        self.http = free_port()
        # Where this start's lines begin in the log (the child appends).
        log_start = os.path.getsize(self.log.name)
        args = [binary, "up", "--http-port", str(self.http), "--ilp-port", str(free_port()),
                "--tp-port", str(free_port()), "--repl-port", str(free_port()), "--pg-port", str(free_port()),
                "--data-dir", str(self.data), "--hdb", str(self.hdb),
                "--fsync", "never", "--query-timeout-ms", "600000", "--query-memory-bytes", str(8 << 30)]
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env={**os.environ, "TICKDB_LOG": "warn"})
        self.url = f"http://127.0.0.1:{self.http}"
        try:
            benchutil.wait_ready(self.p, self.url + "/health", Path(self.log.name), log_start, "tickdb", READY_S)
        except SystemExit:
            self.stop()
            raise

    def status(self) -> dict:
        r = requests.get(self.url + "/status", timeout=30)
        r.raise_for_status()
        return r.json()

    def exec(self, sql: str) -> list:
        r = requests.get(self.url + "/exec", params={"query": sql}, timeout=600)
        if r.status_code != 200:
            raise RuntimeError(f"{sql}: {r.status_code} {r.text[:500]}")
        return r.json()["dataset"]

    def arrow(self, sql: str) -> pa.Table:
        r = requests.get(self.url + "/exec", params={"query": sql, "format": "arrow"}, timeout=600)
        if r.status_code != 200:
            raise RuntimeError(f"{sql}: {r.status_code} {r.text[:500]}")
        return pa.ipc.open_stream(r.content).read_all()

    def stop(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        self.log.close()


# --- data -------------------------------------------------------------------

def midnight_ns(date: dt.date) -> int:
    return int(dt.datetime(date.year, date.month, date.day, tzinfo=dt.timezone.utc).timestamp()) * 10**9


def sym_names(syms: int) -> np.ndarray:
    return np.array([f"S{i:04d}" for i in range(syms)])


def zipf_weights(syms: int) -> np.ndarray:
    w = 1.0 / np.arange(1, syms + 1)
    return w / w.sum()


def walk(rng, codes: np.ndarray, syms: int, base: np.ndarray) -> np.ndarray:
    """Per-symbol random walks in cents (one tick down, none, one up), in time
    order within each symbol; never below one cent."""
    steps = rng.choice(np.array([-1, 0, 1], dtype=np.int64), size=len(codes), p=[0.25, 0.5, 0.25])
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    cs = np.cumsum(steps[order])
    starts = np.searchsorted(sorted_codes, np.arange(syms))  # each symbol's first position
    before = np.concatenate([[0], cs])[starts[sorted_codes]]  # the sum before the symbol's first step
    out = np.empty(len(codes), dtype=np.int64)
    out[order] = base[sorted_codes] + cs - before
    return np.maximum(out, 1)


def gen_day(date: dt.date, trades: int, quotes: int, syms: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """A session of trades (and quotes) on `date`, 09:30-16:00 UTC, times
    sorted, symbols Zipf-skewed (the k-th most active symbol trades 1/k as
    often as the first); prices are per-symbol random walks in cents, sizes
    mostly round lots: market-like data rather than uniform noise."""
    rng = np.random.default_rng(seed)
    names = sym_names(syms)
    w = zipf_weights(syms)
    base_rng = np.random.default_rng(seed ^ 0x5EED)  # the same base prices for every day of a seed family
    base = base_rng.integers(1_000, 50_000, syms)  # $10.00 .. $500.00
    t0 = midnight_ns(date) + SESSION_START_NS

    def times_syms(n: int) -> tuple[pd.DatetimeIndex, np.ndarray]:
        t = np.sort(rng.integers(0, SESSION_NS, n)) + t0
        return pd.to_datetime(t, unit="ns"), rng.choice(syms, n, p=w).astype(np.int32)

    tt, tc = times_syms(trades)
    size = np.where(rng.random(trades) < 0.8, 100 * rng.integers(1, 20, trades), rng.integers(1, 100, trades))
    trade = pd.DataFrame({"time": tt, "sym": pd.Categorical.from_codes(tc, categories=names),
                          "price": walk(rng, tc, syms, base) / 100.0, "size": size.astype(np.int64)})
    quote = None
    if quotes:
        qt, qc = times_syms(quotes)
        bid = walk(rng, qc, syms, base)
        quote = pd.DataFrame({"time": qt, "sym": pd.Categorical.from_codes(qc, categories=names),
                              "bid": bid / 100.0, "ask": (bid + rng.integers(1, 4, quotes)) / 100.0,
                              "bsize": 100 * rng.integers(1, 50, quotes), "asize": 100 * rng.integers(1, 50, quotes)})
    return trade, quote


def load_ilp(node: Tickdb, df: pd.DataFrame, table: str, quiet: bool = False) -> float:
    """Sends df through the questdb client; seconds."""
    def progress(done: int, total: int, el: float) -> None:
        if not quiet and (done == total or (done // benchutil.LOAD_STEP_ROWS) % 50 == 0):
            log(f"  {table}: {done:,}/{total:,} rows, {el:.1f} s, {done / max(el, 1e-9) / 1e6:.2f} M rows/s")
    return benchutil.load_ilp(node.http, df, table, progress)


def wait_rows(node: Tickdb, want: dict[str, int], timeout: float = 600) -> None:
    """Until /status tables.<t>.rows reaches each count (the rdb applied them)."""
    deadline = time.monotonic() + timeout
    while True:
        tables = node.status()["tables"]
        if all(tables[t]["rows"] >= n for t, n in want.items()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"rows not visible: want {want}, have { {t: tables[t]['rows'] for t in want} }")
        time.sleep(0.05)


def post_eod(node: Tickdb, date: dt.date) -> dict:
    r = requests.post(node.url + "/admin/eod", params={"date": date.isoformat()}, timeout=120)
    if r.status_code != 200:
        raise SystemExit(f"/admin/eod: {r.status_code} {r.text}")
    ans = r.json()
    if ans.get("date") != date.isoformat() or not ans.get("seq"):
        raise SystemExit(f"/admin/eod answered {ans}")
    return ans


def wait_eod(node: Tickdb, seq: int, timeout: float = 900, progress: bool = True) -> tuple[dict, float]:
    """Polls /status until eod.last.seq >= seq and nothing is closing;
    returns (eod.last, seconds waited)."""
    t = time.monotonic()
    next_log = t + 2
    while True:
        e = node.status()["eod"]
        last = e.get("last")
        if last is not None and last["seq"] >= seq and e["closing"] == []:
            return last, time.monotonic() - t
        now = time.monotonic()
        if e.get("last_error"):
            log(f"  end of day error (retried by the rdb): {e['last_error']}")
        if progress and now >= next_log:
            closing = ", ".join(f"{c['date']} ({c['rows']:,} rows)" for c in e["closing"]) or "none"
            log(f"  waiting for the end of day: {now - t:.1f} s, closing: {closing}")
            next_log = now + 2
        if now - t > timeout:
            raise SystemExit(f"end of day at seq {seq} not done after {timeout}s: {e}")
        time.sleep(0.05)


def end_of_day(node: Tickdb, date: dt.date, progress: bool = True) -> tuple[dict, float]:
    ans = post_eod(node, date)
    return wait_eod(node, ans["seq"], progress=progress)


# --- checks -----------------------------------------------------------------

def same(a, b) -> bool:
    """Equal answers: integers exactly, floats to a relative 1e-9, dates and
    strings by their text."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b:
            return True
        return abs(a - b) <= REL_TOL * max(abs(a), abs(b))
    return str(a) == str(b)


class Checks:
    def __init__(self):
        self.items: list[tuple[str, bool, str]] = []

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.items.append((name, ok, detail))
        log(f"  check {'ok' if ok else 'FAILED'}: {name}{'' if ok else ': ' + detail}")
        return ok

    @property
    def failures(self) -> list[str]:
        return [f"{n}: {d}" for n, ok, d in self.items if not ok]


# --- part 1: the end-of-day write -------------------------------------------

class AckWriter(threading.Thread):
    """Sends WRITER_ROWS-row trade batches through the questdb client over
    HTTP (each flush is one request, answered once the tp has taken it),
    back to back, recording when each acknowledgement arrived."""

    def __init__(self, node: Tickdb):
        super().__init__(daemon=True)
        self.node = node
        self.acks: list[float] = []
        self.stop = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with Sender.from_conf(f"http::addr=127.0.0.1:{self.node.http};auto_flush=off;request_timeout=120000;") as s:
                n = 0
                while not self.stop.is_set():
                    for _ in range(WRITER_ROWS):
                        n += 1
                        s.row("trade", symbols={"sym": WRITER_SYM}, columns={"price": 1.0, "size": n},
                              at=TimestampNanos.now())
                    s.flush()
                    self.acks.append(time.perf_counter())
        except Exception as e:  # reported by the caller
            self.error = e

    def max_gap(self, start: float, end: float) -> tuple[float, int]:
        """The largest gap between consecutive acknowledgements in [start, end]
        (the first gap counted is the one that ends after start), and the
        number of acknowledgements in it."""
        inside = [t for t in self.acks if start <= t <= end]
        before = [t for t in self.acks if t < start]
        pts = ([before[-1]] if before else []) + inside
        gaps = [b - a for a, b in zip(pts, pts[1:])]
        return (max(gaps) if gaps else float("nan")), len(inside)


def eod_run(a, binary: str, work: Path, k: int, trade: pd.DataFrame, quote: pd.DataFrame,
            date: dt.date, checks: Checks) -> dict:
    name = f"eod{k}"
    log(f"end-of-day run {k + 1}/{a.eod_runs}: fresh tickdb, loading {len(trade):,} trades and {len(quote):,} quotes")
    node = Tickdb(binary, work, name)
    try:
        load_t = time.monotonic()
        load_ilp(node, quote, "quote")
        load_ilp(node, trade, "trade")
        wait_rows(node, {"trade": len(trade), "quote": len(quote)})
        load_s = time.monotonic() - load_t
        log(f"  loaded in {load_s:.1f} s ({(len(trade) + len(quote)) / load_s / 1e6:.2f} M rows/s)")
        st = node.status()
        dram = st["memory"]["dram"]
        rows_before = {t: st["tables"][t]["rows"] for t in ("trade", "quote")}

        writer = AckWriter(node)
        writer.start()
        time.sleep(a.writer_baseline_s)
        load_before = loadavg()
        t_post = time.perf_counter()
        log(f"  POST /admin/eod?date={date} ({dram / 2**20:,.0f} MiB in memory); a writer sends {WRITER_ROWS}-row batches throughout")
        last, waited = end_of_day(node, date)
        t_done = time.perf_counter()
        time.sleep(0.5)
        writer.stop.set()
        writer.join(timeout=60)
        load_after = loadavg()
        if writer.error:
            checks.add(f"run {k + 1}: the concurrent writer's requests were all acknowledged", False, repr(writer.error))
        base_gap, base_n = writer.max_gap(t_post - a.writer_baseline_s + 0.2, t_post)
        eod_gap, eod_n = writer.max_gap(t_post, t_done)

        tables = {t["table"]: t for t in last["tables"]}
        input_bytes = sum(t["input_bytes"] for t in last["tables"])
        file_bytes = sum(t["file_bytes"] for t in last["tables"])
        disk_bytes = sum(Path(t["path"]).stat().st_size for t in last["tables"])
        log(f"  committed: {last['rows']:,} rows in {last['seconds']:.2f} s (rdb), {waited:.2f} s seen by the client; "
            f"{last['input_mb_per_s']:.0f} MB/s; Parquet/Arrow {last['size_ratio']:.3f}; "
            f"ingest pause {last['ingest_pause_us']} µs; writer's largest gap {eod_gap * 1e3:.1f} ms "
            f"(before: {base_gap * 1e3:.1f} ms)")

        # What was written is what was sent: DuckDB reads the files back.
        con = duckdb.connect()
        qpath, tpath = tables["quote"]["path"], tables["trade"]["path"]
        got_q = con.execute(f"SELECT count(*), sum(bsize), sum(asize), sum(bid) FROM read_parquet('{qpath}')").fetchone()
        want_q = (len(quote), int(quote["bsize"].sum()), int(quote["asize"].sum()), float(quote["bid"].sum()))
        checks.add(f"run {k + 1}: the quote file holds the quotes sent (count, sums)", same(list(got_q), list(want_q)),
                   f"DuckDB {got_q}, sent {want_q}")
        got_t = con.execute(f"SELECT count(*), sum(size), sum(price) FROM read_parquet('{tpath}') "
                            f"WHERE sym <> '{WRITER_SYM}'").fetchone()
        want_t = (len(trade), int(trade["size"].sum()), float(trade["price"].sum()))
        checks.add(f"run {k + 1}: the trade file holds the trades sent (count, sums)", same(list(got_t), list(want_t)),
                   f"DuckDB {got_t}, sent {want_t}")
        n_rows = con.execute(f"SELECT count(*) FROM read_parquet(['{qpath}', '{tpath}'])").fetchone()[0]
        checks.add(f"run {k + 1}: eod.last.rows equals the rows in the files", n_rows == last["rows"],
                   f"{last['rows']} vs {n_rows}")
        checks.add(f"run {k + 1}: eod.last file_bytes equal the files' sizes", disk_bytes == file_bytes,
                   f"{file_bytes} vs {disk_bytes}")
        after = node.status()["tables"]
        checks.add(f"run {k + 1}: the day left memory (quote holds 0 rows after the end of day)",
                   after["quote"]["rows"] == 0, f"{after['quote']['rows']}")
        con.close()
        return {"run": k + 1, "rows": last["rows"], "rows_before": rows_before, "load_s": load_s,
                "seconds": last["seconds"], "client_seconds": waited, "input_mb_per_s": last["input_mb_per_s"],
                "input_bytes": input_bytes, "file_bytes": file_bytes, "size_ratio": last["size_ratio"],
                "dram_before": dram, "file_over_dram": file_bytes / dram if dram else float("nan"),
                "ingest_pause_us": last["ingest_pause_us"],
                "writer_max_gap_s": eod_gap, "writer_acks": eod_n,
                "writer_baseline_max_gap_s": base_gap, "writer_baseline_acks": base_n,
                "tables": last["tables"], "load_before": load_before, "load_after": load_after}
    finally:
        node.stop()
        shutil.rmtree(node.hdb, ignore_errors=True)
        shutil.rmtree(node.data, ignore_errors=True)


# --- part 2: queries over history -------------------------------------------

PARQUET_PATH = re.compile(r"([^\s\[\],{}]+\.parquet)(?::\d+\.\.\d+)?")
DATE_DIR = re.compile(r"date=(\d{4}-\d{2}-\d{2})/")
RG_STATS = re.compile(r"row_groups_pruned_statistics=(\d+) total → (\d+) matched")
RG_BLOOM = re.compile(r"row_groups_pruned_bloom_filter=(\d+) total → (\d+) matched")
FILE_RANGES = re.compile(r"files_ranges_pruned_statistics=(\d+) total → (\d+) matched")
PAGE_ROWS = re.compile(r"page_index_rows_pruned=([\d.]+ ?[KMB]?) total → ([\d.]+ ?[KMB]?) matched")
FILES_OPENED = re.compile(r"files_opened=(\d+)")


def explain(node: Tickdb, sql: str) -> dict:
    """Partitions and row groups read, from tickdb's EXPLAIN ANALYZE VERBOSE.
    Every Parquet scan (DataSourceExec with file_groups) lists the files it
    read, and counts row groups before and after pruning by statistics and
    bloom filters; today's rows in memory are a DataSourceExec with
    `partitions=` instead. The plain "Plan with Metrics" gives the counts;
    the file list is taken from whichever plan shows it unabbreviated
    (DataFusion shortens long lists with "...")."""
    rows = node.exec("EXPLAIN ANALYZE VERBOSE " + sql)
    plans = {str(r[0]): str(r[-1]) for r in rows}
    plan = plans.get("Plan with Metrics") or "\n".join(plans.values())
    listings = []
    for text in plans.values():
        files: set[str] = set()
        abbreviated = False
        for line in text.splitlines():
            if "DataSourceExec" in line and "file_groups=" in line:
                fg = line.split("file_groups=", 1)[1]
                fg = fg[: fg.find("]]}") + 3] if "]]}" in fg else fg
                abbreviated |= "..." in fg
                files.update(PARQUET_PATH.findall(fg))
        if files:
            listings.append((abbreviated, files))
    listings.sort(key=lambda x: (x[0], -len(x[1])))
    abbreviated, files = listings[0] if listings else (False, set())
    dates = {m.group(1) for f in files for m in [DATE_DIR.search(f)] if m}
    rg_total = rg_read = 0
    ranges_total = ranges_read = 0
    pages: list[str] = []
    for line in plan.splitlines():
        if "DataSourceExec" not in line or "file_groups=" not in line:
            continue
        s = RG_STATS.search(line)
        b = RG_BLOOM.search(line)
        if s:
            rg_total += int(s.group(1))
            rg_read += int(b.group(2)) if b else int(s.group(2))
        f = FILE_RANGES.search(line)
        if f:
            ranges_total += int(f.group(1))
            ranges_read += int(f.group(2))
        pr = PAGE_ROWS.search(line)
        if pr:
            pages.append(f"{pr.group(2)} of {pr.group(1)} rows")
    memory = "DataSourceExec: partitions=" in plan
    return {"partitions": sorted(dates), "files": len(files), "row_groups_read": rg_read,
            "row_groups_total": rg_total, "file_ranges": [ranges_read, ranges_total], "page_index": pages,
            "abbreviated": abbreviated, "memory_scan": memory, "plan": "\n\n".join(f"== {k}\n{v}" for k, v in plans.items())}


def duckdb_forms(cores: int) -> dict[str, dict[str, object]]:
    """DuckDB's two forms: as it ships (nothing set), and its documented best
    settings for reading the same Parquet files again and again:
    `threads` = the cores (also its default) and `parquet_metadata_cache`
    ("useful when reading the same files multiple times", DuckDB's
    documentation, "Configuration"; off by default)."""
    return {"default": {}, "best": {"threads": cores, "parquet_metadata_cache": True}}


def duckdb_over(glob: str, today_rows: pa.Table, today: dt.date, settings: dict) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with `settings`, over the history's Parquet files
    (`hist`) and today's rows exported from tickdb (`spanning` unions both)."""
    con = duckdb.connect()
    for name, value in settings.items():
        con.execute(f"SET {name} = {str(value).lower() if isinstance(value, bool) else value}")
    con.execute(f"CREATE VIEW hist AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
    con.register("tt", today_rows)
    con.execute(f"CREATE TABLE today_trade AS SELECT time, sym, price, size, DATE '{today}' AS date FROM tt")
    con.unregister("tt")
    con.execute("CREATE VIEW spanning AS SELECT time, sym, price, size, date FROM hist "
                "UNION ALL SELECT time, sym, price, size, date FROM today_trade")
    return con


def history_part(a, binary: str, work: Path, cores: int, checks: Checks) -> dict:
    node = Tickdb(binary, work, "history")
    try:
        today = dt.date.fromisoformat(node.status()["eod"]["today"])
        dates = [today - dt.timedelta(days=a.days - i) for i in range(a.days)]
        yesterday, mid = dates[-1], dates[len(dates) // 2]
        log(f"history: {a.days} days of {a.day_trades:,} trades ({dates[0]} .. {yesterday}), "
            f"then {a.today_trades:,} trades today ({today})")
        build_t = time.monotonic()
        eod_secs = []
        short: list[str] = []
        sent: dict[str, tuple[int, int]] = {}  # date -> (count, sum(size)) of the query symbol
        sym = f"S{a.sym_rank - 1:04d}"
        for i, d in enumerate(dates):
            trade, _ = gen_day(d, a.day_trades, 0, a.syms, a.seed + 1000 + i)
            mine = trade[trade["sym"] == sym]
            sent[d.isoformat()] = (len(mine), int(mine["size"].sum()))
            load_s = load_ilp(node, trade, "trade", quiet=True)
            wait_rows(node, {"trade": len(trade)})
            last, _ = end_of_day(node, d, progress=False)
            eod_secs.append(last["seconds"])
            if last["rows"] != len(trade):
                short.append(f"{d}: {last['rows']} of {len(trade)}")
            log(f"  day {i + 1}/{a.days} {d}: loaded in {load_s:.1f} s, ended in {last['seconds']:.2f} s, "
                f"{last['tables'][0]['row_groups']} row groups, {sum(t['file_bytes'] for t in last['tables']) / 2**20:.1f} MiB "
                f"({time.monotonic() - build_t:.0f} s so far)")
        checks.add(f"history: each of the {a.days} ends of day wrote every row of its day", not short, "; ".join(short))
        trade_today, _ = gen_day(today, a.today_trades, 0, a.syms, a.seed + 999)
        load_ilp(node, trade_today, "trade", quiet=True)
        wait_rows(node, {"trade": len(trade_today)})
        mine = trade_today[trade_today["sym"] == sym]
        sent[today.isoformat()] = (len(mine), int(mine["size"].sum()))
        build_s = time.monotonic() - build_t
        hdb_bytes = sum(p.stat().st_size for p in (node.hdb / "trade").glob("date=*/*.parquet"))
        log(f"history built in {build_s:.0f} s: {hdb_bytes / 2**20:.0f} MiB of Parquet; query symbol {sym} "
            f"({sent[mid.isoformat()][0]:,} trades on {mid})")

        # DuckDB twice over the same files: as it ships, and with its
        # documented best settings for this (the ratio is against the
        # faster of the two).
        tt = node.arrow(f"SELECT time, sym, price, size FROM trade WHERE date = '{today}'")
        checks.add("today's rows exported from tickdb into DuckDB", tt.num_rows == len(trade_today),
                   f"{tt.num_rows} vs {len(trade_today)}")
        today_rows = pa.table({"time": tt["time"], "sym": pc.cast(tt["sym"], pa.string()),
                               "price": tt["price"], "size": tt["size"]})
        glob = f"{node.hdb}/trade/date=*/*.parquet"
        cons = {form: duckdb_over(glob, today_rows, today, settings)
                for form, settings in duckdb_forms(cores).items()}
        for form, con in cons.items():
            dtype = con.execute("SELECT typeof(date) FROM hist LIMIT 1").fetchone()[0]
            checks.add(f"DuckDB ({form}) reads the hive partition `date` as a DATE", dtype == "DATE", dtype)

        agg = "count(*), sum(size), min(price), max(price)"
        queries = {
            "a": {"title": f"one symbol, one day: `{sym}` on {mid} (count, sum, min, max)",
                  "tickdb": f"SELECT {agg} FROM trade WHERE sym = '{sym}' AND date = '{mid}'",
                  "duckdb": f"SELECT {agg} FROM hist WHERE sym = '{sym}' AND date = DATE '{mid}'",
                  "truth": [list(sent[mid.isoformat()])]},
            "b": {"title": f"the symbol over all {a.days} days, per-date count and sum",
                  "tickdb": f"SELECT CAST(date AS VARCHAR), count(*), sum(size) FROM trade WHERE sym = '{sym}' "
                            f"AND date <= '{yesterday}' GROUP BY 1 ORDER BY 1",
                  "duckdb": f"SELECT CAST(date AS VARCHAR), count(*), sum(size) FROM hist WHERE sym = '{sym}' "
                            f"AND date <= DATE '{yesterday}' GROUP BY 1 ORDER BY 1",
                  "truth": [[d.isoformat(), *sent[d.isoformat()]] for d in dates if sent[d.isoformat()][0]]},
            "c_hist": {"title": f"the symbol yesterday ({yesterday}), history only",
                       "tickdb": f"SELECT {agg} FROM trade WHERE sym = '{sym}' AND date = '{yesterday}'",
                       "duckdb": f"SELECT {agg} FROM hist WHERE sym = '{sym}' AND date = DATE '{yesterday}'",
                       "truth": [list(sent[yesterday.isoformat()])]},
            "c_span": {"title": f"the symbol yesterday and today (`date >= '{yesterday}'`), spanning memory and Parquet",
                       "tickdb": f"SELECT {agg} FROM trade WHERE sym = '{sym}' AND date >= '{yesterday}'",
                       "duckdb": f"SELECT {agg} FROM spanning WHERE sym = '{sym}' AND date >= DATE '{yesterday}'",
                       "truth": [[sent[yesterday.isoformat()][0] + sent[today.isoformat()][0],
                                  sent[yesterday.isoformat()][1] + sent[today.isoformat()][1]]]},
        }
        # Round robin: a warm-up of every query, then each round runs every
        # query once on each system, so that a slow spell of the shared
        # machine falls on all of them rather than on one.
        log(f"queries: a warm-up, then {a.repeats} rounds of every query on tickdb and on DuckDB "
            f"({' and '.join(cons)})")
        runs = {k: {"tickdb": (lambda q=q: node.exec(q["tickdb"])),
                    **{f"duckdb_{form}": (lambda q=q, con=con: [list(r) for r in con.execute(q["duckdb"]).fetchall()])
                       for form, con in cons.items()}}
                for k, q in queries.items()}
        answers = {k: {system: fn() for system, fn in fns.items()} for k, fns in runs.items()}
        times: dict[str, dict[str, list[float]]] = {k: {system: [] for system in fns} for k, fns in runs.items()}
        load_before = loadavg()
        for _ in range(a.repeats):
            for k, fns in runs.items():
                for system, fn in fns.items():
                    t = time.perf_counter()
                    fn()
                    times[k][system].append(time.perf_counter() - t)
        load_after = loadavg()
        results = {}
        for key, q in queries.items():
            log(f"query {key}: {q['title']}")
            med = {system: statistics.median(ts) for system, ts in times[key].items()}
            tk_s = med["tickdb"]
            # The faster DuckDB form is the one tickdb is compared with.
            best_form = min(cons, key=lambda form: med[f"duckdb_{form}"])
            dd_s = med[f"duckdb_{best_form}"]
            ex = explain(node, q["tickdb"])
            tk_ans = answers[key]["tickdb"]
            for form in cons:
                dd_ans = answers[key][f"duckdb_{form}"]
                checks.add(f"query {key}: tickdb and DuckDB ({form}) return the same answer", same(tk_ans, dd_ans),
                           f"tickdb {tk_ans}, DuckDB ({form}) {dd_ans}")
            # What was sent: counts and sums of sizes of the symbol (the columns that are integers).
            width = len(q["truth"][0])
            checks.add(f"query {key}: the counts and sums equal what was sent",
                       same([r[:width] for r in tk_ans], q["truth"]), f"tickdb {tk_ans}, sent {q['truth']}")
            log(f"  tickdb {fmt_s(tk_s)}, DuckDB "
                + ", ".join(f"{form} {fmt_s(med[f'duckdb_{form}'])}" for form in cons)
                + f", tickdb/DuckDB ({best_form}) {tk_s / dd_s:.2f}; "
                f"partitions read {len(ex['partitions'])}, files {ex['files']}, row groups read "
                f"{ex['row_groups_read']} of {ex['row_groups_total']}, page index {ex['page_index']}")
            results[key] = {"title": q["title"], "tickdb_sql": q["tickdb"], "duckdb_sql": q["duckdb"],
                            "tickdb_s": tk_s, "tickdb_runs": times[key]["tickdb"], "duckdb_s": dd_s,
                            "duckdb_best_form": best_form,
                            "duckdb_forms": {form: {"s": med[f"duckdb_{form}"], "runs": times[key][f"duckdb_{form}"]}
                                             for form in cons},
                            "answer": tk_ans,
                            "explain": {k: v for k, v in ex.items() if k != "plan"}}
            (work / f"explain-{key}.txt").write_text(ex["plan"])
        # Date pruning, from the plans: each query reads the date directories
        # its filter names, and today's memory only when today is in range.
        want_parts = {"a": ([mid], False), "b": (dates, False), "c_hist": ([yesterday], False),
                      "c_span": ([yesterday], True)}
        for key, (want, mem) in want_parts.items():
            ex = results[key]["explain"]
            want = [d.isoformat() for d in want if sent[d.isoformat()][0] or key != "b"]
            ok = (set(ex["partitions"]) <= set(want)) if ex["abbreviated"] else ex["partitions"] == want
            checks.add(f"query {key}: EXPLAIN ANALYZE shows the date directories {'and memory ' if mem else ''}it should read",
                       ok and ex["memory_scan"] == mem,
                       f"read {ex['partitions']}{' (list abbreviated)' if ex['abbreviated'] else ''}, memory "
                       f"{ex['memory_scan']}; want {want if len(want) < 4 else f'{len(want)} dates'}, memory {mem}")
        for con in cons.values():
            con.close()
        return {"sym": sym, "sym_rank": a.sym_rank, "dates": [dates[0].isoformat(), yesterday.isoformat()],
                "mid": mid.isoformat(), "today": today.isoformat(), "build_s": build_s,
                "eod_seconds_median": statistics.median(eod_secs), "hdb_bytes": hdb_bytes,
                "sym_rows_mid": sent[mid.isoformat()][0], "sym_rows_today": sent[today.isoformat()][0],
                "queries": results, "query_load": [load_before, load_after], "duckdb_forms": duckdb_forms(cores)}
    finally:
        node.stop()
        shutil.rmtree(node.hdb, ignore_errors=True)
        shutil.rmtree(node.data, ignore_errors=True)


# --- the section --------------------------------------------------------------

def fmt_s(x: float | None) -> str:
    if x is None or x != x:
        return "n/a"
    if x < 0.001:
        return f"{x * 1e6:.0f} µs"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def markdown(a, mach: dict, eod: list[dict], hist: dict, checks: Checks, took: float, binary: str) -> str:
    cores = mach["cores"]
    release = "release" if "/release/" in binary else ("debug (figures NOT representative)" if "/debug/" in binary else f"`{binary}`")
    loads = [mach["loadavg_start"]] + [x for r in eod for x in (r["load_before"], r["load_after"])] + \
            hist["query_load"] + [mach["loadavg_end"]]
    # Every load after the start includes this benchmark's own processes
    # (the loader and tickdb run back to back): only the load before it
    # started says whether other work shared the machine.
    busy = noisy(mach["loadavg_start"], cores)
    med = lambda key: statistics.median(r[key] for r in eod)  # noqa: E731
    md = [SECTION, ""]
    md.append(f"Generated by `.venv/bin/python scripts/bench_history.py{' --quick' if a.quick else ''}` "
              f"(run by `scripts/bench.sh`) on {dt.datetime.now(dt.timezone.utc).date()}, in {took:.0f} s, with a {release} build, on "
              f"{benchutil.machine_text(mach)}, "
              f"HDB on {mach['fs']}. "
              f"tickdb runs as `tickdb up --hdb DIR --fsync never` (the journal is not fsynced, as in the SQL "
              f"section; the end of day still fsyncs its Parquet files and directories before the commit). "
              f"Data is loaded through the `questdb` ILP client (HTTP).")
    md.append("")
    md.append(f"Load average (1 min) at the start, then before/after each measurement: "
              f"{', '.join(f'{x:.2f}' for x in loads)}. The figures after the first include this benchmark's own "
              f"processes (the loader and tickdb run back to back, so a load near the core count is its own). "
              + (f"**The load was {mach['loadavg_start']:.2f} before the benchmark started: other work shared the "
                 f"machine; treat the figures as noisy.**" if busy else
                 f"Before it started the load was {mach['loadavg_start']:.2f}: no other work was running (quiet)."))
    md.append("")

    # 1. end-of-day write
    r0 = eod[0]
    md.append("### End-of-day write")
    md.append("")
    small = " (the `--quick` size, not the default 10M + 40M)" if a.quick else ""
    md.append(f"One trading day of {a.trades:,} trades and {a.quotes:,} quotes{small} over {a.syms} symbols "
              f"(Zipf-skewed: the k-th most active symbol has 1/k of the first's activity), times sorted over a "
              f"6.5-hour session (09:30–16:00), prices per-symbol random walks in cents, sizes mostly round lots; "
              f"loaded into a fresh `tickdb up --hdb` (median load {statistics.median(r['load_s'] for r in eod):.1f} s), "
              f"then `POST /admin/eod?date=` and `/status` `eod.last` polled until the day is committed. "
              + (f"{len(eod)} runs, each on a fresh load; the median is reported, each run below. " if len(eod) > 1
                 else "A single run. ")
              + f"While the end of day runs, "
              f"a writer sends {WRITER_ROWS}-row ILP batches over HTTP back to back (questdb client, one request "
              f"per batch, each acknowledged) and records the largest gap between acknowledgements; its largest "
              f"gap in the {a.writer_baseline_s:.0f} s before the end of day is the baseline.")
    md.append("")
    md.append("| run | rows | seconds (marker to commit) | Arrow input MB/s | Parquet / Arrow bytes | Parquet / `/status` dram | rdb ingest pause | writer's largest ack gap during / before | load avg before/after |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for r in eod:
        md.append(f"| {r['run']} | {r['rows']:,} | {r['seconds']:.2f} s | {r['input_mb_per_s']:.0f} | "
                  f"{r['size_ratio']:.3f} ({r['file_bytes'] / 2**20:,.0f} MiB / {r['input_bytes'] / 2**20:,.0f} MiB) | "
                  f"{r['file_over_dram']:.3f} ({r['dram_before'] / 2**20:,.0f} MiB) | {r['ingest_pause_us']} µs | "
                  f"{fmt_s(r['writer_max_gap_s'])} / {fmt_s(r['writer_baseline_max_gap_s'])} | "
                  f"{r['load_before']:.2f} / {r['load_after']:.2f} |")
    if len(eod) > 1:
        md.append(f"| median | | {med('seconds'):.2f} s | {med('input_mb_per_s'):.0f} | {med('size_ratio'):.3f} | "
                  f"{med('file_over_dram'):.3f} | {med('ingest_pause_us'):.0f} µs | "
                  f"{fmt_s(med('writer_max_gap_s'))} / {fmt_s(med('writer_baseline_max_gap_s'))} | |")
    md.append("")
    per_table = "; ".join(f"{t['table']}: {t['rows']:,} rows, {t['row_groups']} row groups, "
                          f"{t['file_bytes'] / 2**20:,.0f} MiB ({t['file_bytes'] / t['input_bytes']:.3f} of "
                          f"{t['input_bytes'] / 2**20:,.0f} MiB Arrow)" for t in r0["tables"])
    md.append(f"Run 1's files: {per_table}. Rows include the concurrent writer's rows acknowledged before the "
              f"marker (symbol `{WRITER_SYM}`). The seconds are the rdb's (`eod.last.seconds`, marker to commit); "
              f"the client saw the commit {statistics.median(r['client_seconds'] for r in eod):.2f} s (median) "
              f"after its POST. Parquet / `/status` dram compares the files with everything the rdb held in DRAM "
              f"before the end of day (columns, indexes, symbols).")
    md.append("")
    md.append(f"Targets: end of day under {EOD_TARGET_S:.0f} s ({med('seconds'):.2f} s: {met(med('seconds') < EOD_TARGET_S)}); "
              f"history at most {SIZE_TARGET:.0%} of the in-memory size (Parquet / Arrow {med('size_ratio'):.1%}: "
              f"{met(med('size_ratio') <= SIZE_TARGET)}; Parquet / dram {med('file_over_dram'):.1%}: "
              f"{met(med('file_over_dram') <= SIZE_TARGET)}).")
    md.append("")

    # 2. queries
    q = hist["queries"]
    md.append(f"### Queries over {a.days} days of history")
    md.append("")
    md.append(f"{a.days} days of {a.day_trades:,} trades each ({hist['dates'][0]} .. {hist['dates'][1]}, same "
              f"symbols and skew as above), each loaded and ended with `POST /admin/eod?date=` (median "
              f"{hist['eod_seconds_median']:.2f} s per day; {hist['hdb_bytes'] / 2**20:,.0f} MiB of Parquet), then "
              f"{a.today_trades:,} trades loaded for today ({hist['today']}, in memory); {hist['build_s']:.0f} s in all. "
              f"The query symbol is `{hist['sym']}`, the {hist['sym_rank']}th most active of {a.syms} "
              f"({hist['sym_rows_mid']:,} trades on {hist['mid']}, {hist['sym_rows_today']:,} today). "
              f"tickdb answers over HTTP `/exec` (JSON, parsing included); DuckDB {duckdb.__version__} runs in "
              f"this process (no transfer) over the same files, "
              f"`read_parquet('HDB/trade/date=*/*.parquet', hive_partitioning = true)` (docs/history.md names "
              f"`date=*` so that a leftover staging directory cannot match; none existed here). DuckDB runs in two "
              f"forms, each on a connection of its own, and tickdb is compared with the faster: as it ships (nothing "
              f"set), and with its documented best settings for this, `SET threads = {hist['duckdb_forms']['best']['threads']}` "
              f"(the cores; also its default) and `SET parquet_metadata_cache = true` (off by default; \"useful when "
              f"reading the same files multiple times\", DuckDB's documentation, \"Configuration\"). In both, Hive "
              f"partition filters are pushed down and "
              f"`date` is read as a DATE (DuckDB's documentation, \"Hive Partitioning\"), and row groups are "
              f"skipped by their min/max statistics (\"Parquet\", \"Parquet Tips\"). For the query spanning today, "
              f"today's rows were exported from tickdb (`/exec` in Arrow) into a DuckDB table and unioned with the "
              f"Parquet (`UNION ALL`). Medians of {a.repeats} runs after a warm-up, run round robin (each round runs every query once on tickdb and on each DuckDB form). Partitions and row groups "
              f"are tickdb's, from `EXPLAIN ANALYZE` (the Parquet scan's `file_groups` and "
              f"`row_groups_pruned_statistics` / `row_groups_pruned_bloom_filter`).")
    md.append("")
    md.append("| query | tickdb | DuckDB as it ships | DuckDB best settings | tickdb / the faster DuckDB | partitions read | row groups read (of those in the partitions read) | same answer |")
    md.append("|---|---|---|---|---|---|---|---|")
    for key in ("a", "b", "c_hist", "c_span"):
        r = q[key]
        ex = r["explain"]
        parts = ("≥" if ex["abbreviated"] else "") + f"{len(ex['partitions'])}" + (" + today (memory)" if ex["memory_scan"] else "")
        ok = not any(f.startswith(f"query {key}:") for f in checks.failures)
        forms = r["duckdb_forms"]
        md.append(f"| ({key.replace('_', ' ')}) {r['title']} | {fmt_s(r['tickdb_s'])} | "
                  f"{fmt_s(forms['default']['s'])} | {fmt_s(forms['best']['s'])} | "
                  f"{r['tickdb_s'] / r['duckdb_s']:.2f} ({'as it ships' if r['duckdb_best_form'] == 'default' else 'best settings'}) | "
                  f"{parts} | {ex['row_groups_read']} of {ex['row_groups_total']} | "
                  f"{'yes' if ok else '**no**'} |")
    md.append("")
    a_ex = q["a"]["explain"]
    span = q["c_span"]["tickdb_s"] / q["c_hist"]["tickdb_s"]
    md.append(f"Targets: (a) reads one partition and at most two row groups ({len(a_ex['partitions'])} partition, "
              f"{a_ex['row_groups_read']} row group(s): {met(len(a_ex['partitions']) == 1 and a_ex['row_groups_read'] <= 2)}) "
              f"in under {ONE_DAY_TARGET_S * 1000:.0f} ms ({fmt_s(q['a']['tickdb_s'])}: {met(q['a']['tickdb_s'] < ONE_DAY_TARGET_S)}); "
              f"(c) spanning today and history at most {SPAN_TARGET:.0f}x the history-only query for yesterday "
              f"({span:.2f}x: {met(span <= SPAN_TARGET)}). Ratios tickdb / DuckDB above 1 mean DuckDB is faster; each is "
              f"against the faster DuckDB form for that query, named in brackets.")
    md.append("")
    n = len(checks.items)
    md.append(f"Cross-checks: all {n} passed (tickdb and both DuckDB forms returned the same answer to every query, counts and "
              f"integer sums exactly, floats to a relative 1e-9; every count and sum equals what was sent; every "
              f"end-of-day file holds exactly the rows sent)." if not checks.failures else
              f"**Cross-checks failed ({len(checks.failures)} of {n}):** " + "; ".join(checks.failures))
    return "\n".join(md) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trades", type=int, default=10_000_000, help="trades in the end-of-day day (default 10M)")
    ap.add_argument("--quotes", type=int, default=40_000_000, help="quotes in the end-of-day day (default 40M)")
    ap.add_argument("--syms", type=int, default=1000, help="symbols, Zipf-skewed (default 1000)")
    ap.add_argument("--eod-runs", type=int, default=3, help="end-of-day writes, each on a fresh load (default 3)")
    ap.add_argument("--writer-baseline-s", type=float, default=3.0,
                    help="seconds the concurrent writer runs before the end of day (its baseline)")
    ap.add_argument("--days", type=int, default=30, help="days of history (default 30)")
    ap.add_argument("--day-trades", type=int, default=1_000_000, help="trades per day of history (default 1M)")
    ap.add_argument("--today-trades", type=int, default=None, help="trades today (default: --day-trades)")
    ap.add_argument("--sym-rank", type=int, default=100, help="activity rank of the query symbol (default 100)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per query after a warm-up (default 5)")
    ap.add_argument("--quick", action="store_true",
                    help="200k trades + 800k quotes, 1 end-of-day run, 30 days of 20k trades, 5 repeats (under 2 minutes)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--bin", default=os.environ.get("TICKDB_BIN", str(ROOT / "target" / "release" / "tickdb")))
    ap.add_argument("--work-dir", help="where the servers' data and HDBs go (default: a new temporary directory)")
    ap.add_argument("--out", "--append", dest="out",
                    help="replace (or append) the section in this markdown file (else print it)")
    ap.add_argument("--json", help="also write the figures and checks here")
    ap.add_argument("--no-questdb", action="store_true", help="accepted for scripts/bench.sh; no QuestDB here")
    ap.add_argument("--no-redis", action="store_true", help="accepted for scripts/bench.sh; no Redis here")
    a = ap.parse_args()
    if a.quick:
        a.trades, a.quotes, a.eod_runs, a.writer_baseline_s = 200_000, 800_000, 1, 1.0
        a.day_trades = 20_000
        a.sym_rank = min(a.sym_rank, 20)
    if a.today_trades is None:
        a.today_trades = a.day_trades
    binary = str(Path(a.bin).resolve())
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"no tickdb binary at {binary}: cargo build --release -p tickdb (or --bin / TICKDB_BIN)")
    if a.work_dir:
        work = Path(a.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        own_work = False
    else:
        work = Path(tempfile.mkdtemp(prefix="tickdb-bench-history-"))
        own_work = True
    started = time.monotonic()
    mach = benchutil.machine(work)
    log(f"{mach['cpu']} ({mach['cores']} cores), load average {mach['loadavg_start']:.2f}; binary {binary}")
    checks = Checks()
    try:
        day = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
        log(f"generating {a.trades:,} trades and {a.quotes:,} quotes over {a.syms} symbols (seed {a.seed})")
        g = time.monotonic()
        trade, quote = gen_day(day, a.trades, a.quotes, a.syms, a.seed)
        log(f"  generated in {time.monotonic() - g:.1f} s")
        eod = [eod_run(a, binary, work, k, trade, quote, day, checks) for k in range(a.eod_runs)]
        del trade, quote
        hist = history_part(a, binary, work, mach["cores"], checks)
        mach["loadavg_end"] = loadavg()
        took = time.monotonic() - started
        text = markdown(a, mach, eod, hist, checks, took, binary)
        if a.json:
            Path(a.json).write_text(json.dumps({"machine": mach, "eod": eod, "history": hist,
                                                "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks.items],
                                                "failures": checks.failures, "seconds": took, "quick": a.quick},
                                               indent=1, default=str))
        if a.out:
            benchutil.write_section(Path(a.out), SECTION, text, REGEN_LINE)
            log(f"wrote the section to {a.out}")
        else:
            print(text)
        log(f"done in {took:.0f} s; {len(checks.items) - len(checks.failures)}/{len(checks.items)} checks passed")
        return 1 if checks.failures else 0
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
