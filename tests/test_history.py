"""End of day and the historical database (HDB) through the real binary,
checked by readers nobody here wrote: DuckDB, Polars, PyArrow datasets and
Apache Spark read the Parquet tickdb writes; psycopg reads tickdb's SQL over
today's rows and history together.

What is proved: every reader sees the same days, and the same as tickdb's
SQL; the files are what the layout promises (ZSTD, sorted by (sym, time),
TIMESTAMP(NANOS), dictionary sym, page index, `tickdb.source`); a kill -9 at
each step of end of day leaves, after a restart, every row exactly once;
rows are never seen twice or lost while a day is moved under live ingest and
queries; queries spanning today and history equal DuckDB's over the same
rows; bad files are found by `tickdb hdb verify` and named by queries while
the rest keeps being served; import, reload and `tickdb hdb serve`; an rdb
following a tp writes the day at the tp's marker; the daily schedule closes
the local date of its time zone; restarts (journal replay or Hot Restart)
never write a day twice; large days are cut into row groups at symbol
boundaries; and every query answers the same before and after end of day.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import polars as pl
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import requests

from harness import PortRace, Proc, free_port, run

SYMS = ["AAPL", "MSFT", "IBM", "GOOG", "AMZN", "TSLA"]
# Past days (the machine's clock is later than these; `today` comes from
# the node's /status).
D1, D2, D3 = "2026-11-18", "2026-11-19", "2026-11-20"
CRASH_STEPS = ["before-write", "staged", "between-commits", "committed", "checkpointed"]


# --- helpers ---------------------------------------------------------------

def midnight_ns(date: str) -> int:
    d = dt.date.fromisoformat(date)
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc).timestamp()) * 10**9


class Feed:
    """ILP lines of trades and quotes with strictly increasing timestamps
    and a unique `size` per trade (its id), and the truth of what was sent:
    per row the date it is expected under."""

    def __init__(self, rng, first_id: int = 1):
        self.rng = rng
        self.next_id = first_id
        self.trades: list[tuple] = []  # (time, sym, price, size, date)
        self.quotes: list[tuple] = []  # (time, sym, bid, ask, bsize, asize, date)
        self.t = 0

    def trade(self, date: str, t: int, sym: str) -> str:
        price = round(self.rng.uniform(10, 500), 4)
        size = self.next_id
        self.next_id += 1
        self.trades.append((t, sym, price, size, date))
        return f"trade,sym={sym} price={price:.4f},size={size}i {t}"

    def quote(self, date: str, t: int, sym: str) -> str:
        bid = round(self.rng.uniform(10, 500), 4)
        ask = round(bid + self.rng.randint(1, 100) / 100, 4)
        bsize, asize = self.rng.randint(1, 9000), self.rng.randint(1, 9000)
        self.quotes.append((t, sym, bid, ask, bsize, asize, date))
        return f"quote,sym={sym} bid={bid:.4f},ask={ask:.4f},bsize={bsize}i,asize={asize}i {t}"

    def batch(self, date: str, n: int, start: int | None = None, syms=SYMS,
              quote_share: float = 0.5, quote_syms=None) -> list[str]:
        """n rows (trades and quotes mixed), times from `start` (default:
        09:30 of `date`, or on from the last row) in steps of 1 µs..20 ms."""
        if start is not None:
            self.t = start
        elif self.t < midnight_ns(date):
            self.t = midnight_ns(date) + 9 * 3600 * 10**9 + 30 * 60 * 10**9
        quote_syms = syms if quote_syms is None else quote_syms
        lines = []
        for _ in range(n):
            self.t += self.rng.randint(1_000, 20_000_000)
            if quote_syms and self.rng.random() < quote_share:
                lines.append(self.quote(date, self.t, self.rng.choice(quote_syms)))
            else:
                lines.append(self.trade(date, self.t, self.rng.choice(syms)))
        return lines

    def trade_aggs(self, dates=None) -> dict:
        """(date, sym) -> (count, sum(size), min(time), max(time))."""
        out: dict = {}
        for t, sym, _p, size, date in self.trades:
            if dates is not None and date not in dates:
                continue
            c, s, lo, hi = out.get((date, sym), (0, 0, t, t))
            out[(date, sym)] = (c + 1, s + size, min(lo, t), max(hi, t))
        return out

    def quote_aggs(self, dates=None) -> dict:
        """(date, sym) -> (count, sum(bsize), min(time), max(time))."""
        out: dict = {}
        for t, sym, _b, _a, bsize, _as, date in self.quotes:
            if dates is not None and date not in dates:
                continue
            c, s, lo, hi = out.get((date, sym), (0, 0, t, t))
            out[(date, sym)] = (c + 1, s + bsize, min(lo, t), max(hi, t))
        return out


def post(node, lines: list[str], chunk: int = 2000) -> None:
    for i in range(0, len(lines), chunk):
        r = requests.post(node.url + "/write", data="\n".join(lines[i:i + chunk]) + "\n", timeout=60)
        assert r.status_code == 204, f"/write: {r.status_code} {r.text}"


def wait_applied(node, tp=None, timeout: float = 60) -> None:
    """Until the node's rdb has applied everything its tp has journaled."""
    deadline = time.monotonic() + timeout
    while True:
        target = (tp.status() if tp is not None else node.status())["tp"]["seq"]
        st = node.status()
        if st["seq"] >= target:
            return
        assert time.monotonic() < deadline, f"rdb at seq {st['seq']}, tp at {target}\n{node.log_tail()}"
        time.sleep(0.05)


def eod_status(node) -> dict:
    st = node.status()
    assert "eod" in st, f"/status has no eod section: {sorted(st)}"
    return st["eod"]


def wait_eod(node, seq: int, timeout: float = 60) -> dict:
    """Until the end of day at `seq` is written: eod.last.seq >= seq and
    nothing is closing. Returns /status eod."""
    deadline = time.monotonic() + timeout
    while True:
        e = eod_status(node)
        if e["last"] is not None and e["last"]["seq"] >= seq and e["closing"] == []:
            return e
        assert time.monotonic() < deadline, f"end of day at seq {seq} not done: {e}\n{node.log_tail()}"
        time.sleep(0.05)


def post_eod(node, date: str) -> dict:
    r = requests.post(node.url + "/admin/eod", params={"date": date}, timeout=60)
    assert r.status_code == 200, f"/admin/eod: {r.status_code} {r.text}"
    ans = r.json()
    assert ans["date"] == date and ans["seq"] > 0, ans
    return ans


def end_of_day(node, date: str, rdb=None) -> dict:
    """POST /admin/eod on `node` (the tp) and wait for `rdb` (default: the
    node) to write it; returns /status eod."""
    ans = post_eod(node, date)
    return wait_eod(rdb or node, ans["seq"])


def sql(node, query: str) -> list[list]:
    return node.exec(query)


def sql_error(node, query: str) -> requests.Response:
    r = requests.get(node.url + "/exec", params={"query": query}, timeout=30)
    assert r.status_code != 200, f"{query!r} answered 200: {r.text[:500]}"
    return r


def arrow(node, query: str) -> pa.Table:
    r = requests.get(node.url + "/exec", params={"query": query, "format": "arrow"}, timeout=60)
    assert r.status_code == 200, f"/exec {query!r}: {r.status_code} {r.text}"
    return pa.ipc.open_stream(r.content).read_all()


def today_of(node) -> str:
    return eod_status(node)["today"]


def parts(hdb: Path, table: str, date: str) -> list[str]:
    d = hdb / table / f"date={date}"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def verify(hdb: Path, *extra: str) -> subprocess.CompletedProcess:
    return run(["hdb", "verify", str(hdb), *extra], timeout=120)


def problems(res: subprocess.CompletedProcess) -> list[str]:
    return [line for line in res.stdout.splitlines() if line.startswith("PROBLEM ")]


def pg(port: int):
    return psycopg.connect(host="127.0.0.1", port=port, user="tickdb", password="tickdb",
                           dbname="tickdb", autocommit=True, connect_timeout=10)


def duck_trade_aggs(hdb: Path) -> dict:
    rows = duckdb.sql(f"""
        SELECT CAST(date AS VARCHAR), CAST(sym AS VARCHAR), count(*), sum(size),
               min(epoch_ns(time)), max(epoch_ns(time))
        FROM read_parquet('{hdb}/trade/*/*.parquet', hive_partitioning=true)
        GROUP BY ALL""").fetchall()
    return {(d, s): (int(c), int(sz), int(lo), int(hi)) for d, s, c, sz, lo, hi in rows}


def duck_sizes(hdb: Path, date: str | None = None) -> list[int]:
    where = f"WHERE date = DATE '{date}'" if date else ""
    return [r[0] for r in duckdb.sql(
        f"SELECT size FROM read_parquet('{hdb}/trade/*/*.parquet', hive_partitioning=true) {where}"
    ).fetchall()]


def tickdb_trade_aggs(node, where: str = "") -> dict:
    rows = sql(node, f"""
        SELECT CAST(date AS VARCHAR) AS d, sym, count(*), sum(size),
               min(CAST(time AS BIGINT)), max(CAST(time AS BIGINT))
        FROM trade {where} GROUP BY 1, 2""")
    return {(d, s): (c, sz, lo, hi) for d, s, c, sz, lo, hi in rows}


def hdb_serve(cluster, hdb: Path, extra: list[str] = ()) -> Proc:
    for attempt in range(5):
        http, pgp = free_port(), free_port()
        p = Proc(["hdb", "serve", str(hdb), "--http-port", str(http), "--pg-port", str(pgp), *extra],
                 cluster._log("hdb"), http_port=http)
        p.pg_port = pgp
        cluster.procs.append(p)
        try:
            return p.start()
        except PortRace:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


# --- 1. readers agree ------------------------------------------------------

def spark_trade_aggs(hdb: Path) -> dict:
    """Per (date, sym) through Spark (one local session, no network): its
    hive partition discovery makes `date` a DateType, nanosAsLong reads the
    TIMESTAMP(NANOS) column as bigint nanoseconds."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[1]").appName("tickdb-hdb")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.legacy.parquet.nanosAsLong", "true")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.log.level", "ERROR")
             .getOrCreate())
    try:
        df = spark.read.parquet(str(hdb / "trade"))
        types = dict(df.dtypes)
        assert types["time"] == "bigint" and types["date"] == "date", types
        rows = (df.groupBy("date", "sym")
                .agg(F.count("*").alias("n"), F.sum("size").alias("s"),
                     F.min("time").alias("lo"), F.max("time").alias("hi"))
                .collect())
        return {(r["date"].isoformat(), r["sym"]): (r["n"], r["s"], r["lo"], r["hi"]) for r in rows}
    finally:
        spark.stop()
        gw = SparkContext._gateway
        proc = getattr(gw, "proc", None)
        try:
            if gw is not None:
                gw.shutdown()
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
            SparkContext._gateway = None
            SparkContext._jvm = None


def polars_trade_aggs(hdb: Path) -> dict:
    df = (pl.scan_parquet(str(hdb / "trade" / "**" / "*.parquet"), hive_partitioning=True)
          .group_by(pl.col("date").cast(pl.String), pl.col("sym").cast(pl.String))
          .agg(pl.len().alias("n"), pl.col("size").sum().alias("s"),
               pl.col("time").min().cast(pl.Int64).alias("lo"),
               pl.col("time").max().cast(pl.Int64).alias("hi"))
          .collect())
    return {(r["date"], r["sym"]): (r["n"], r["s"], r["lo"], r["hi"]) for r in df.iter_rows(named=True)}


def arrow_dataset_trade_aggs(hdb: Path) -> dict:
    t = ds.dataset(str(hdb / "trade"), format="parquet", partitioning="hive").to_table()
    t = pa.table({
        "date": pc.cast(t["date"], pa.string()),
        "sym": pc.cast(t["sym"], pa.string()),
        "size": t["size"],
        "t": pc.cast(t["time"], pa.int64()),
    })
    g = t.group_by(["date", "sym"]).aggregate([("size", "count"), ("size", "sum"), ("t", "min"), ("t", "max")])
    return {(r["date"], r["sym"]): (r["size_count"], r["size_sum"], r["t_min"], r["t_max"]) for r in g.to_pylist()}


def check_part_metadata(path: Path, columns: list[str], source: str, rows: int) -> None:
    pf = pq.ParquetFile(path)
    md = pf.metadata
    assert md.num_rows == rows, (path, md.num_rows, rows)
    assert [pf.schema.column(i).name for i in range(len(pf.schema))] == columns, (path, pf.schema)
    # time: INT64 TIMESTAMP(NANOS), not adjusted to UTC.
    tcol = pf.schema.column(0)
    assert tcol.physical_type == "INT64", tcol
    lt = json.loads(tcol.logical_type.to_json())
    assert lt["Type"] == "Timestamp" and lt["timeUnit"] == "nanoseconds" and lt["isAdjustedToUTC"] is False, lt
    assert pf.schema_arrow.field("time").type == pa.timestamp("ns"), pf.schema_arrow
    # sym: UTF8 string.
    scol = pf.schema.column(1)
    assert scol.physical_type == "BYTE_ARRAY" and json.loads(scol.logical_type.to_json())["Type"] == "String", scol
    kv = md.metadata or {}
    assert kv.get(b"tickdb.source") == source.encode(), (path, kv)
    sym_i, time_i = columns.index("sym"), columns.index("time")
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        sc = rg.sorting_columns
        assert sc is not None and [(c.column_index, c.descending) for c in sc][:2] == [(sym_i, False), (time_i, False)], (path, g, sc)
        for c in range(rg.num_columns):
            col = rg.column(c)
            assert col.compression == "ZSTD", (path, g, col.path_in_schema, col.compression)
            assert col.is_stats_set and col.statistics.has_min_max, (path, g, col.path_in_schema)
            assert col.has_column_index and col.has_offset_index, (path, g, col.path_in_schema)
        symcol = rg.column(sym_i)
        assert symcol.has_dictionary_page and any("DICTIONARY" in e for e in symcol.encodings), (path, symcol.encodings)
    # Rows sorted by (sym, time); a row group boundary only where the symbol changes.
    t = pf.read(columns=["sym", "time"])
    syms = pc.cast(t["sym"], pa.string()).to_pylist()
    times = pc.cast(t["time"], pa.int64()).to_pylist()
    keys = list(zip(syms, times))
    assert keys == sorted(keys), f"{path}: rows not sorted by (sym, time)"
    at = 0
    for g in range(md.num_row_groups - 1):
        at += md.row_group(g).num_rows
        assert syms[at - 1] != syms[at], f"{path}: row group {g} ends inside symbol {syms[at]}"


def test_duckdb_polars_arrow_spark_and_tickdb_sql_agree_on_every_day(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    feed = Feed(rng)
    seqs = {}
    for i, d in enumerate([D1, D2, D3]):
        post(node, feed.batch(d, 2500))
        ans = post_eod(node, d)
        e = wait_eod(node, ans["seq"])
        seqs[d] = ans["seq"]
        assert e["completed"] == i + 1, e
        last = e["last"]
        assert last["date"] == d and last["seq"] == ans["seq"], last
        by = {t["table"]: t for t in last["tables"]}
        assert by["trade"]["rows"] == sum(1 for r in feed.trades if r[4] == d), by
        assert by["quote"]["rows"] == sum(1 for r in feed.quotes if r[6] == d), by
        for t in ("trade", "quote"):
            assert by[t]["path"].endswith(f"{t}/date={d}/part-00000.parquet"), by[t]
            assert by[t]["already_committed"] is False and by[t]["row_groups"] >= 1, by[t]
            assert by[t]["file_bytes"] > 0 and by[t]["input_bytes"] > 0, by[t]
        assert last["rows"] == by["trade"]["rows"] + by["quote"]["rows"], last
        assert last["ingest_pause_us"] >= 0 and last["seconds"] >= 0, last
    e = eod_status(node)
    assert e["hdb"] == str(hdb) or Path(e["hdb"]).resolve() == hdb.resolve(), e
    assert e["time_zone"] == "UTC" and e["history_dates"] == {"trade": 3, "quote": 3}, e
    assert e["last_error"] is None, e
    today = e["today"]
    assert today > D3, e
    post(node, feed.batch(today, 1000))
    wait_applied(node)

    history = {D1, D2, D3}
    want = feed.trade_aggs(history)
    readers = {
        "duckdb": duck_trade_aggs(hdb),
        "polars": polars_trade_aggs(hdb),
        "pyarrow.dataset": arrow_dataset_trade_aggs(hdb),
        "tickdb SQL": tickdb_trade_aggs(node, f"WHERE date < '{today}'"),
    }
    try:
        readers["spark"] = spark_trade_aggs(hdb)
    except Exception as ex:  # pragma: no cover - only without a JVM
        if shutil.which("java") is None:
            print(f"spark not run: no java on PATH ({ex})")
        else:
            raise
    for name, got in readers.items():
        assert got == want, f"{name} differs from what was written: {sorted(set(got.items()) ^ set(want.items()))[:6]}"
    # The whole table spans history and today.
    assert tickdb_trade_aggs(node) == feed.trade_aggs(), "tickdb SQL over history and today"
    assert sql(node, f"SELECT count(*) FROM trade WHERE date = '{today}'") == [[sum(1 for r in feed.trades if r[4] == today)]]
    # Quotes too (DuckDB against the truth and tickdb).
    qrows = duckdb.sql(f"""
        SELECT CAST(date AS VARCHAR), CAST(sym AS VARCHAR), count(*), sum(bsize), min(epoch_ns(time)), max(epoch_ns(time))
        FROM read_parquet('{hdb}/quote/*/*.parquet', hive_partitioning=true) GROUP BY ALL""").fetchall()
    assert {(a, b): (c, int(s), lo, hi) for a, b, c, s, lo, hi in qrows} == feed.quote_aggs(history)
    trows = sql(node, f"""SELECT CAST(date AS VARCHAR), sym, count(*), sum(bsize), min(CAST(time AS BIGINT)),
                          max(CAST(time AS BIGINT)) FROM quote WHERE date < '{today}' GROUP BY 1, 2""")
    assert {(a, b): (c, s, lo, hi) for a, b, c, s, lo, hi in trows} == feed.quote_aggs(history)

    # The files themselves.
    cols = {"trade": ["time", "sym", "price", "size"], "quote": ["time", "sym", "bid", "ask", "bsize", "asize"]}
    for d in (D1, D2, D3):
        for table, c in cols.items():
            assert parts(hdb, table, d) == ["part-00000.parquet"], (table, d, parts(hdb, table, d))
            n = sum(1 for r in (feed.trades if table == "trade" else feed.quotes) if r[-1] == d)
            check_part_metadata(hdb / table / f"date={d}" / "part-00000.parquet", c, f"eod:{seqs[d]}", n)
    # Nothing else under the HDB but the tables' date directories (and the
    # writer's dot-files).
    for table in ("trade", "quote"):
        names = sorted(p.name for p in (hdb / table).iterdir() if not p.name.startswith("."))
        assert names == [f"date={d}" for d in (D1, D2, D3)], names
    res = verify(hdb)
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr


# --- 2. kill -9 at each step of end of day --------------------------------

@pytest.mark.parametrize("step", CRASH_STEPS)
def test_kill_9_at_each_end_of_day_step_leaves_every_row_exactly_once(cluster, rng, tmp_path, monkeypatch, step):
    hdb, hot = tmp_path / "hdb", tmp_path / "hot"
    extra = ["--hdb", str(hdb), "--hot-restart", str(hot)]
    monkeypatch.setenv("TICKDB_TEST_EOD_CRASH", step)
    db = cluster.up(extra=extra)
    monkeypatch.delenv("TICKDB_TEST_EOD_CRASH")
    feed = Feed(rng)
    post(db, feed.batch(D1, 3000))
    n_trades, n_quotes = len(feed.trades), len(feed.quotes)
    assert n_trades > 0 and n_quotes > 0
    try:
        r = requests.post(db.url + "/admin/eod", params={"date": D1}, timeout=30)
        print(f"{step}: POST /admin/eod answered {r.status_code} {r.text}")
    except requests.RequestException as ex:
        print(f"{step}: POST /admin/eod got no answer: {ex}")
    rc = db.wait_exit(timeout=60)
    assert rc == -9, f"tickdb exited with {rc}, not SIGKILL at {step}\n{db.log_tail()}"
    db.wait_log(f"TICKDB_TEST_EOD_CRASH={step}")

    # What the crash left on disk.
    committed = {t: bool(parts(hdb, t, D1)) for t in ("trade", "quote")}
    staging = [p for t in ("trade", "quote") if (hdb / t).is_dir() for p in (hdb / t).iterdir()
               if p.name.startswith(".tmp-")]
    if step == "before-write":
        assert committed == {"trade": False, "quote": False} and not staging, (committed, staging)
    elif step == "staged":
        assert committed == {"trade": False, "quote": False} and staging, (committed, staging)
    elif step == "between-commits":
        assert sorted(committed.values()) == [False, True], committed
    else:
        assert committed == {"trade": True, "quote": True}, committed

    db2 = cluster.up(data_dir=db.data_dir, extra=extra)
    wait_applied(db2)
    deadline = time.monotonic() + 60
    while True:
        e = eod_status(db2)
        if e["closing"] == [] and e["history_dates"].get("trade", 0) >= 1 and e["history_dates"].get("quote", 0) >= 1:
            break
        assert time.monotonic() < deadline, f"day not in the HDB after restart: {e}\n{db2.log_tail()}"
        time.sleep(0.05)
    assert e["last_error"] is None, e
    today = e["today"]

    # Exactly one copy of every row, all in the HDB under D1, none in memory.
    want_sizes = sorted(r[3] for r in feed.trades)
    assert sorted(duck_sizes(hdb, D1)) == want_sizes, f"{step}: the Parquet of {D1} is not exactly the day's trades"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{hdb}/quote/*/*.parquet')").fetchall()[0][0] == n_quotes
    assert parts(hdb, "trade", D1) == ["part-00000.parquet"] and parts(hdb, "quote", D1) == ["part-00000.parquet"]
    assert sql(db2, "SELECT count(*) FROM trade") == [[n_trades]]
    assert sql(db2, "SELECT count(*) FROM quote") == [[n_quotes]]
    assert sql(db2, f"SELECT count(*) FROM trade WHERE date = '{today}'") == [[0]]
    assert sql(db2, f"SELECT count(*) FROM trade WHERE date = '{D1}'") == [[n_trades]]
    assert sql(db2, "SELECT size FROM trade GROUP BY size HAVING count(*) > 1") == []
    st = db2.status()
    assert st["tables"]["trade"]["rows"] == 0 and st["tables"]["quote"]["rows"] == 0, st["tables"]
    assert not [p for t in ("trade", "quote") for p in (hdb / t).iterdir() if p.name.startswith(".tmp-")]
    res = verify(hdb, "--journal", str(db.data_dir / "journal"))
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr

    # A second end of day for the same date adds a part, never rewrites the first.
    first = hdb / "trade" / f"date={D1}" / "part-00000.parquet"
    before = (sha(first), first.stat().st_ino, first.stat().st_mtime_ns)
    post(db2, feed.batch(D1, 400))
    k = len(feed.trades) - n_trades
    cli = run(["eod", "--node", f"127.0.0.1:{db2.http_port}", "--date", D1], timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    report = json.loads(cli.stdout.strip().splitlines()[-1])
    assert report["date"] == D1, report
    by = {t["table"]: t for t in report["tables"]}
    assert by["trade"]["rows"] == k and by["trade"]["path"].endswith("part-00001.parquet"), report
    assert parts(hdb, "trade", D1) == ["part-00000.parquet", "part-00001.parquet"]
    assert (sha(first), first.stat().st_ino, first.stat().st_mtime_ns) == before, "part-00000 was rewritten"
    assert sorted(duck_sizes(hdb, D1)) == sorted(r[3] for r in feed.trades)
    assert sql(db2, "SELECT count(*), count(DISTINCT size) FROM trade") == [[len(feed.trades)] * 2]
    res = verify(hdb)
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr


# --- 3. end of day under live ingest and queries ---------------------------

def test_live_ingest_and_queries_through_three_ends_of_day_see_each_row_once(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    stop = threading.Event()
    acked: list[int] = []
    unsure: list[int] = []
    failures: list[str] = []
    seen: list[list[tuple[int, int]]] = [[], []]
    t_start = midnight_ns(D1) + 9 * 3600 * 10**9

    def writer():
        next_id, t = 1, t_start
        s = requests.Session()
        while not stop.is_set():
            ids = list(range(next_id, next_id + 50))
            next_id += 50
            lines = []
            for i in ids:
                t += 1000
                lines.append(f"trade,sym={SYMS[i % len(SYMS)]} price=1.5,size={i}i {t}")
            try:
                r = s.post(node.url + "/write", data="\n".join(lines) + "\n", timeout=30)
                if r.status_code == 204:
                    acked.extend(ids)
                else:
                    unsure.extend(ids)
                    failures.append(f"/write {r.status_code} {r.text[:200]}")
            except requests.RequestException as ex:
                unsure.extend(ids)
                failures.append(f"/write: {ex}")

    def reader(mine: list):
        s = requests.Session()
        while not stop.is_set():
            try:
                r = s.get(node.url + "/exec", params={"query": "SELECT count(*), count(DISTINCT size) FROM trade"}, timeout=30)
            except requests.RequestException as ex:
                failures.append(f"query: {ex}")
                continue
            if r.status_code != 200:
                failures.append(f"query {r.status_code} {r.text[:200]}")
                continue
            n, distinct = r.json()["dataset"][0]
            mine.append((n, distinct))

    threads = [threading.Thread(target=writer),
               threading.Thread(target=reader, args=(seen[0],)), threading.Thread(target=reader, args=(seen[1],))]
    for th in threads:
        th.start()
    reports = []
    try:
        for d in ("2026-11-10", "2026-11-11", "2026-11-12"):
            time.sleep(1.0)
            reports.append(end_of_day(node, d)["last"])
        time.sleep(0.5)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=60)
    wait_applied(node)
    assert not failures, failures[:5]
    print(f"{len(acked)} rows acknowledged, {len(seen[0]) + len(seen[1])} queries answered")
    assert min(map(len, seen)) > 10 and len(acked) > 1000, (list(map(len, seen)), len(acked))
    for mine in seen:
        twice = [(n, d) for n, d in mine if n != d]
        assert not twice, f"a query saw a row twice during end of day: (count, distinct) = {twice[:5]}"
        # Each reader's successive answers never go down.
        down = [(a, b) for a, b in zip(mine, mine[1:]) if b[0] < a[0]]
        assert not down, f"the row count went down during end of day: {down[:5]}"

    today = today_of(node)
    hist = duck_sizes(hdb)
    today_sizes = [r[0] for r in sql(node, f"SELECT size FROM trade WHERE date = '{today}'")]
    assert not set(hist) & set(today_sizes), "rows both in the HDB and in memory"
    all_sizes = Counter(r[0] for r in sql(node, "SELECT size FROM trade"))
    assert sorted(all_sizes) == sorted(Counter(hist + today_sizes)), "SQL and Parquet + today differ"
    assert max(all_sizes.values()) == 1
    assert sql(node, "SELECT size FROM trade GROUP BY size HAVING count(*) > 1") == []
    missing = set(acked) - set(all_sizes)
    assert not missing, f"{len(missing)} acknowledged rows lost, e.g. {sorted(missing)[:5]}"
    assert set(all_sizes) <= set(acked) | set(unsure)
    for r in reports:
        print(f"end of day {r['date']}: {r['rows']} rows, ingest paused {r['ingest_pause_us']} µs, {r['seconds']:.3f} s")
        assert 0 <= r["ingest_pause_us"] < 5_000_000, r
    # Each day's rows are in its own date's Parquet, all at once.
    for r, d in zip(reports, ("2026-11-10", "2026-11-11", "2026-11-12")):
        assert len(duck_sizes(hdb, d)) == r["rows"], (d, r)


# --- 4. queries spanning today and history ---------------------------------

def test_queries_spanning_today_and_history_equal_duckdb_over_the_same_rows(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    feed = Feed(rng)
    # H is quoted only on D1: its trades on D2 and today find their quote two
    # dates back. Z trades today only and is never quoted.
    post(node, feed.batch(D1, 1200, syms=["A", "B", "C", "H"]))
    end_of_day(node, D1)
    d2 = feed.batch(D2, 1200, syms=["A", "B", "C", "H"], quote_syms=["A", "B", "C"])
    # D2 closes with one trade per symbol early in a fresh second, and today's
    # first trades follow within that same second, so one-second buckets hold
    # rows of both whatever the random feed drew before; today's first trades
    # come before any quote of today, so their prevailing quotes are in the HDB.
    second = (feed.t // 10**9 + 1) * 10**9
    d2 += [feed.trade(D2, second + 100_000_000 + 1_000_000 * i, s) for i, s in enumerate(["A", "B", "C", "H"])]
    post(node, d2)
    end_of_day(node, D2)
    today = today_of(node)
    last_hist_t = second + 200_000_000
    first = [feed.trade(today, last_hist_t + 1_000_000 * (i + 1), s) for i, s in enumerate(["A", "B", "C", "H"])]
    rest = feed.batch(today, 800, start=last_hist_t + 10_000_000, syms=["A", "B", "C", "H", "Z"], quote_syms=["A", "B", "C"])
    post(node, first + rest)
    wait_applied(node)

    con = duckdb.connect()
    tt = arrow(node, f"SELECT time, sym, price, size FROM trade WHERE date = '{today}'")
    tq = arrow(node, f"SELECT time, sym, bid, ask, bsize, asize FROM quote WHERE date = '{today}'")
    assert tt.num_rows == sum(1 for r in feed.trades if r[4] == today)
    con.register("today_trade", pa.table({
        "tns": pc.cast(tt["time"], pa.int64()), "sym": pc.cast(tt["sym"], pa.string()),
        "price": tt["price"], "size": tt["size"]}))
    con.register("today_quote", pa.table({
        "tns": pc.cast(tq["time"], pa.int64()), "sym": pc.cast(tq["sym"], pa.string()),
        "bid": tq["bid"], "ask": tq["ask"], "bsize": tq["bsize"], "asize": tq["asize"]}))
    con.execute(f"""CREATE VIEW trade AS
        SELECT epoch_ns(time) AS tns, CAST(sym AS VARCHAR) AS sym, price, size, CAST(date AS VARCHAR) AS date
        FROM read_parquet('{hdb}/trade/*/*.parquet', hive_partitioning=true)
        UNION ALL SELECT tns, sym, price, size, '{today}' FROM today_trade""")
    con.execute(f"""CREATE VIEW quote AS
        SELECT epoch_ns(time) AS tns, CAST(sym AS VARCHAR) AS sym, bid, ask, bsize, asize, CAST(date AS VARCHAR) AS date
        FROM read_parquet('{hdb}/quote/*/*.parquet', hive_partitioning=true)
        UNION ALL SELECT tns, sym, bid, ask, bsize, asize, '{today}' FROM today_quote""")

    def same(tick_sql: str, duck_sql: str, approx_cols=()) -> list:
        got = [tuple(r) for r in sql(node, tick_sql)]
        want = [tuple(int(v) if isinstance(v, int) else v for v in r) for r in con.execute(duck_sql).fetchall()]
        assert len(got) == len(want), (tick_sql, len(got), len(want))
        for g, w in zip(got, want):
            for i, (a, b) in enumerate(zip(g, w)):
                if i in approx_cols and a is not None and b is not None:
                    assert a == pytest.approx(b, rel=1e-9), (tick_sql, g, w)
                else:
                    assert a == b, (tick_sql, g, w)
        return got

    # Per (date, sym) over history and today.
    rows = same(
        """SELECT CAST(date AS VARCHAR) AS d, sym, count(*), sum(size), min(CAST(time AS BIGINT)),
                  max(CAST(time AS BIGINT)), sum(price) FROM trade GROUP BY 1, 2 ORDER BY 1, 2""",
        """SELECT date, sym, count(*), sum(size), min(tns), max(tns), sum(price)
           FROM trade GROUP BY 1, 2 ORDER BY 1, 2""", approx_cols=(6,))
    assert {r[0] for r in rows} == {D1, D2, today}
    # A filter on the date column.
    same(f"SELECT count(*), sum(size) FROM trade WHERE date >= '{D2}'",
         f"SELECT count(*), sum(size) FROM trade WHERE date >= '{D2}'")
    same(f"SELECT sym, count(*) FROM trade WHERE date = '{D1}' AND sym IN ('A', 'H') GROUP BY sym ORDER BY sym",
         f"SELECT sym, count(*) FROM trade WHERE date = '{D1}' AND sym IN ('A', 'H') GROUP BY sym ORDER BY sym")

    # One-second OHLC bars over both; some bars hold rows of D2 and of today.
    both = con.execute("""SELECT count(*) FROM (SELECT tns // 1000000000 AS b, sym FROM trade
                          GROUP BY 1, 2 HAVING count(DISTINCT date) > 1)""").fetchone()[0]
    assert both >= 1, "no bar spans the boundary: the test's data is wrong"
    same("""SELECT CAST(time_bucket(INTERVAL '1 second', time) AS BIGINT) AS b, sym,
                   first(price ORDER BY time), max(price), min(price), last(price ORDER BY time),
                   sum(size), count(*)
            FROM trade GROUP BY b, sym ORDER BY b, sym""",
         """SELECT tns // 1000000000 * 1000000000 AS b, sym, arg_min(price, tns), max(price), min(price),
                   arg_max(price, tns), sum(size), count(*)
            FROM trade GROUP BY b, sym ORDER BY b, sym""")

    # ASOF JOIN of trades with the prevailing quote, across the boundary.
    aj = same("""SELECT t.size, t.sym, CAST(t.time AS BIGINT), q.bid, q.ask, CAST(q.time AS BIGINT)
                 FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym
                 ORDER BY t.size""",
              """SELECT t.size, t.sym, t.tns, q.bid, q.ask, q.tns
                 FROM trade t ASOF LEFT JOIN quote q ON t.sym = q.sym AND t.tns >= q.tns
                 ORDER BY t.size""")
    by_size = {r[0]: r for r in aj}
    last_q = {s: max(t for t, qs, *_ in feed.quotes if qs == s and t <= last_hist_t) for s in "ABCH"}
    for line in first:
        size = int(line.split("size=")[1].split("i")[0])
        _, sym, _, bid, _, qt = by_size[size]
        assert qt == last_q[sym] and bid is not None, (line, by_size[size], last_q[sym])
    h_quote_dates = {q[6] for q in feed.quotes if q[1] == "H"}
    assert h_quote_dates == {D1}
    assert all(r[3] is None for r in aj if r[1] == "Z")

    # latest('quote'): the last quote of every symbol, H's from D1.
    lat = same("""SELECT sym, bid, ask, bsize, asize, CAST(time AS BIGINT) FROM latest('quote') ORDER BY sym""",
               """SELECT sym, arg_max(bid, tns), arg_max(ask, tns), arg_max(bsize, tns), arg_max(asize, tns), max(tns)
                  FROM quote GROUP BY sym ORDER BY sym""")
    assert [r[0] for r in lat] == ["A", "B", "C", "H"], lat

    # The date column over PostgreSQL wire is a DATE, last of the columns.
    with pg(node.pg_port) as c:
        cur = c.execute("SELECT * FROM trade WHERE date = %s LIMIT 1", (dt.date.fromisoformat(D1),))
        assert [d.name for d in cur.description] == ["time", "sym", "price", "size", "date"], cur.description
        assert cur.fetchone()[4] == dt.date.fromisoformat(D1)
        got = c.execute("SELECT date, count(*) FROM trade GROUP BY date ORDER BY date").fetchall()
    assert got == [(dt.date.fromisoformat(d), sum(1 for r in feed.trades if r[4] == d)) for d in (D1, D2, today)]


# --- 5. bad input ----------------------------------------------------------

def test_bad_files_are_named_by_verify_and_queries_while_the_rest_is_served(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    feed = Feed(rng)
    post(node, feed.batch(D1, 1500))
    end_of_day(node, D1)
    post(node, feed.batch(D2, 1500))
    end_of_day(node, D2)
    today = today_of(node)
    post(node, feed.batch(today, 300))
    wait_applied(node)
    n = {d: sum(1 for r in feed.trades if r[4] == d) for d in (D1, D2, today)}
    part = hdb / "trade" / f"date={D1}" / "part-00000.parquet"
    good = part.read_bytes()
    assert verify(hdb).returncode == 0

    def others_still_served():
        assert sql(node, f"SELECT count(*), sum(size) FROM trade WHERE date = '{D2}'") == \
            [[n[D2], sum(r[3] for r in feed.trades if r[4] == D2)]]
        assert sql(node, f"SELECT count(*) FROM trade WHERE date = '{today}'") == [[n[today]]]
        assert sql(node, "SELECT count(*) FROM quote") == [[len(feed.quotes)]]
        assert node.proc.poll() is None

    d1_answer = [[n[D1], sum(r[3] for r in feed.trades if r[4] == D1)]]
    query_errors: list[str] = []

    def bad_part_named(what: str, must_fail: bool):
        res = verify(hdb)
        assert res.returncode == 1, f"{what}: verify exit {res.returncode}\n{res.stdout}{res.stderr}"
        probs = problems(res)
        assert probs and all(str(part) in p for p in probs), f"{what}: {probs}"
        q = f"SELECT count(*), sum(size) FROM trade WHERE date = '{D1}'"
        r = requests.get(node.url + "/exec", params={"query": q}, timeout=30)
        if r.status_code == 200 and not must_fail:
            # A reader that kept the footer it read before may still answer,
            # but only right.
            assert r.json()["dataset"] == d1_answer, f"{what}: {r.text}"
        else:
            assert r.status_code != 200, f"{what}: {q!r} answered {r.text}"
            assert "part-00000.parquet" in r.text and f"date={D1}" in r.text, f"{what}: {r.status_code} {r.text}"
            query_errors.append(r.json()["message"])
            # Over the whole table too (it touches the day).
            r = sql_error(node, "SELECT sum(size) FROM trade")
            assert "part-00000.parquet" in r.text, f"{what}: {r.status_code} {r.text}"
        others_still_served()

    # (a) a part cut short.
    part.write_bytes(good[: len(good) // 2])
    bad_part_named("truncated", must_fail=True)
    # (b) a corrupt footer: its length and magic intact, its Thrift bytes not.
    footer_len = int.from_bytes(good[-8:-4], "little")
    assert 0 < footer_len < len(good) - 12
    start = len(good) - 8 - footer_len
    part.write_bytes(good[:start] + b"\xff" * footer_len + good[-8:])
    bad_part_named("corrupt footer", must_fail=False)
    part.write_bytes(good)
    assert verify(hdb).returncode == 0
    assert sql(node, f"SELECT count(*) FROM trade WHERE date = '{D1}'") == [[n[D1]]]

    # (c) a foreign file in a partition.
    notes = hdb / "trade" / f"date={D2}" / "notes.txt"
    notes.write_text("not a part\n")
    res = verify(hdb)
    assert res.returncode == 1 and any(str(notes) in p for p in problems(res)), res.stdout + res.stderr
    others_still_served()
    notes.unlink()

    # (d) directories that are not dates.
    for name in ("date=2026-13-45", "dt=2026-11-01"):
        bad = hdb / "trade" / name
        bad.mkdir()
        shutil.copy(hdb / "trade" / f"date={D2}" / "part-00000.parquet", bad / "part-00000.parquet")
        res = verify(hdb)
        assert res.returncode == 1 and any(str(bad) in p for p in problems(res)), res.stdout + res.stderr
        others_still_served()
        shutil.rmtree(bad)

    # (e) staging left by a crash, and a part with rows out of order.
    staging = hdb / "quote" / f".tmp-date={D2}-999999-0"
    staging.mkdir()
    (staging / "part-00000.parquet").write_bytes(b"PAR1")
    res = verify(hdb)
    assert res.returncode == 1 and any(str(staging) in p for p in problems(res)), res.stdout + res.stderr
    shutil.rmtree(staging)
    src = pq.ParquetFile(hdb / "trade" / f"date={D2}" / "part-00000.parquet")
    t = src.read()
    order = list(range(t.num_rows))[::-1]
    unsorted = pa.table({
        "time": t["time"].take(order), "sym": pc.cast(t["sym"], pa.string()).take(order),
        "price": t["price"].take(order), "size": t["size"].take(order),
    })
    kv = dict(src.metadata.metadata)
    kv[b"tickdb.source"] = b"test:unsorted"
    unsorted = unsorted.replace_schema_metadata(kv)
    bad_part = hdb / "trade" / f"date={D2}" / "part-00001.parquet"
    pq.write_table(unsorted, bad_part, compression="zstd", store_schema=False)
    res = verify(hdb)
    probs = problems(res)
    assert res.returncode == 1 and any(str(bad_part) in p and "sort" in p for p in probs), res.stdout + res.stderr
    bad_part.unlink()
    res = verify(hdb)
    assert res.returncode == 0, res.stdout + res.stderr

    # (f) an import of a CSV with the wrong columns writes nothing.
    fresh = tmp_path / "fresh-hdb"
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("time,symbol,price,qty\n1795000000000000000,A,1.5,10\n")
    res = run(["hdb", "import", str(fresh), "--table", "trade", str(wrong)])
    assert res.returncode != 0, res.stdout + res.stderr
    msg = res.stdout + res.stderr
    assert str(wrong) in msg or wrong.name in msg, msg
    assert "symbol" in msg and "sym" in msg and "qty" in msg, msg
    written = [p for p in fresh.rglob("*") if p.is_file() and p.name != ".commit.lock"] if fresh.exists() else []
    assert not written, written
    assert not [p for p in fresh.rglob("*") if p.name.startswith(("date=", ".tmp-"))] if fresh.exists() else True
    # ... and the same into the live HDB leaves it as it was.
    before = sorted(str(p) for p in hdb.rglob("*"))
    res = run(["hdb", "import", str(hdb), "--table", "trade", str(wrong)])
    assert res.returncode != 0
    assert sorted(str(p) for p in hdb.rglob("*")) == before
    others_still_served()
    # The query's error names the file by the path it has (as verify does),
    # one an operator can open.
    assert query_errors and all(str(part) in m for m in query_errors), \
        f"query errors do not name {part}: {query_errors}"


# --- 6. import, reload, serve ----------------------------------------------

def test_import_csv_and_parquet_by_date_then_reload_and_serve(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    hdb.mkdir()
    node = cluster.up(extra=["--hdb", str(hdb)])
    da, db_ = "2026-11-02", "2026-11-03"
    rows: list[tuple] = []  # (time, sym, price, size, date, file)
    next_id = 1
    for fname in ("iso.csv", "ns.csv", "trades.parquet"):
        for d in (da, db_):
            t = midnight_ns(d) + 8 * 3600 * 10**9
            for _ in range(700):
                t += rng.randint(1, 50_000_000)
                rows.append((t, rng.choice(SYMS), round(rng.uniform(1, 99), 4), next_id, d, fname))
                next_id += 1
    rng.shuffle(rows)  # import sorts

    def iso(t: int) -> str:
        s, ns = divmod(t, 10**9)
        return dt.datetime.fromtimestamp(s, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"

    files = []
    for fname in ("iso.csv", "ns.csv"):
        p = tmp_path / fname
        with open(p, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["time", "sym", "price", "size"])
            for t, s, price, size, _d, fn in rows:
                if fn == fname:
                    w.writerow([iso(t) if fname == "iso.csv" else t, s, f"{price:.4f}", size])
        files.append(p)
    pr = [r for r in rows if r[5] == "trades.parquet"]
    p = tmp_path / "trades.parquet"
    pq.write_table(pa.table({
        "time": pa.array([r[0] for r in pr], pa.timestamp("ns")),
        "sym": pa.array([r[1] for r in pr], pa.string()),
        "price": pa.array([r[2] for r in pr], pa.float64()),
        "size": pa.array([r[3] for r in pr], pa.int64()),
    }), p)
    files.append(p)

    res = run(["hdb", "import", str(hdb), "--table", "trade", *map(str, files)], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    print(res.stdout)
    assert "imported 4200 rows in 6 parts; 0 parts skipped" in res.stdout, res.stdout
    for d in (da, db_):
        assert parts(hdb, "trade", d) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"], parts(hdb, "trade", d)
    want = Counter()
    for t, s, price, size, d, _f in rows:
        want[(d, s)] += 1
    got = {(d, s): c for (d, s), (c, *_r) in duck_trade_aggs(hdb).items()}
    assert got == dict(want)
    exact = duckdb.sql(f"""SELECT epoch_ns(time), CAST(sym AS VARCHAR), price, size, CAST(date AS VARCHAR)
                          FROM read_parquet('{hdb}/trade/*/*.parquet', hive_partitioning=true) ORDER BY size""").fetchall()
    assert exact == sorted([(t, s, price, size, d) for t, s, price, size, d, _f in rows], key=lambda r: r[3])
    res = verify(hdb)
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr

    # The same files again: skipped, nothing written.
    listing = sorted((str(p), p.stat().st_mtime_ns) for p in hdb.rglob("*") if p.is_file())
    res = run(["hdb", "import", str(hdb), "--table", "trade", *map(str, files)], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted((str(p), p.stat().st_mtime_ns) for p in hdb.rglob("*") if p.is_file()) == listing
    assert "imported 0 rows in 0 parts; 6 parts skipped" in res.stdout, res.stdout + res.stderr

    # The running node sees them after a reload.
    assert sql(node, "SELECT count(*) FROM trade") == [[0]]
    r = requests.post(node.url + "/admin/hdb/reload", timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["history_dates"]["trade"] == 2, r.text
    per_date = [[d, sum(1 for x in rows if x[4] == d)] for d in (da, db_)]
    assert sql(node, "SELECT CAST(date AS VARCHAR) AS d, count(*) FROM trade GROUP BY 1 ORDER BY 1") == per_date
    assert sql(node, "SELECT sum(size) FROM trade") == [[sum(x[3] for x in rows)]]

    # tickdb hdb serve on the same directory answers the same over PostgreSQL wire.
    srv = hdb_serve(cluster, hdb)
    with pg(srv.pg_port) as c:
        got = c.execute("SELECT date, count(*), sum(size) FROM trade GROUP BY date ORDER BY date").fetchall()
        assert c.execute("SELECT count(*) FROM quote").fetchone() == (0,)
    assert got == [(dt.date.fromisoformat(d), n, sum(x[3] for x in rows if x[4] == d)) for d, n in per_date]
    assert sql(srv, "SELECT count(*) FROM trade WHERE date = CURRENT_DATE") == [[0]]

    # --tz: a row at 02:00 UTC on the 3rd is the 2nd in New York.
    ny = tmp_path / "ny-hdb"
    f = tmp_path / "late.csv"
    f.write_text(f"time,sym,price,size\n{db_}T02:00:00Z,A,1.0,1\n{db_}T12:00:00Z,A,1.0,2\n")
    res = run(["hdb", "import", str(ny), "--table", "trade", "--tz", "America/New_York", str(f)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in (ny / "trade").iterdir() if not p.name.startswith(".")) == [f"date={da}", f"date={db_}"]


# --- 7. an rdb following a tp ------------------------------------------------

def test_rdb_following_a_tp_writes_the_day_at_the_tps_marker(cluster, rng, tmp_path):
    hdb2 = tmp_path / "hdb2"
    tp = cluster.tp()
    rdb = cluster.rdb(tp.tp_port, extra=["--hdb", str(hdb2)])
    feed = Feed(rng)
    post(tp, feed.batch(D1, 2000))
    wait_applied(rdb, tp)
    n1 = len(feed.trades)
    ans = post_eod(tp, D1)
    e = wait_eod(rdb, ans["seq"])
    assert e["last"]["date"] == D1 and e["last"]["checkpoint_seq"] is None, e
    assert sorted(duck_sizes(hdb2, D1)) == sorted(r[3] for r in feed.trades)
    today = e["today"]
    assert sql(rdb, f"SELECT count(*) FROM trade WHERE date = '{today}'") == [[0]]
    assert sql(rdb, f"SELECT count(*) FROM trade WHERE date = '{D1}'") == [[n1]]
    assert rdb.status()["tables"]["trade"]["rows"] == 0
    # The tp has no HDB of its own: its /status has no eod.
    assert "eod" not in tp.status()

    # `tickdb eod` against the tp: the marker, then the rdb writes the day.
    post(tp, feed.batch(D2, 500))
    cli = run(["eod", "--node", f"127.0.0.1:{tp.http_port}", "--date", D2], timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    # Nothing was written after the marker: the tp's last sequence is it.
    e = wait_eod(rdb, tp.status()["tp"]["seq"])
    assert e["last"]["date"] == D2, e
    assert e["history_dates"] == {"trade": 2, "quote": 2}, e
    assert sorted(duck_sizes(hdb2, D2)) == sorted(r[3] for r in feed.trades if r[4] == D2)
    assert sql(rdb, "SELECT count(*), count(DISTINCT size) FROM trade") == [[len(feed.trades)] * 2]
    assert verify(hdb2).returncode == 0

    # An rdb does not schedule end of day: that is the tp's.
    res = run(["rdb", "--tp", f"127.0.0.1:{tp.tp_port}", "--http-port", str(free_port()),
               "--pg-port", str(free_port()), "--eod-time", "00:00"], timeout=30)
    assert res.returncode != 0 and "--eod-time" in res.stderr, res.stderr


# --- 8. the daily schedule ---------------------------------------------------

def test_scheduled_end_of_day_closes_the_local_date_of_its_time_zone(cluster, rng, tmp_path):
    """--eod-time at the next minute in Tokyo: the day is ended without a
    command, as the Tokyo date just before that time."""
    zone = "Asia/Tokyo"
    tz = ZoneInfo(zone)
    now = dt.datetime.now(tz)
    fire = (now + dt.timedelta(minutes=2 if now.second >= 50 else 1)).replace(second=0, microsecond=0)
    closed = (fire - dt.timedelta(minutes=1)).date().isoformat()
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb), "--eod-time", fire.strftime("%H:%M"), "--eod-tz", zone])
    e = eod_status(node)
    assert e["time_zone"] == zone, e
    assert e["today"] in {now.date().isoformat(), dt.datetime.now(tz).date().isoformat()}, e
    feed = Feed(rng)
    post(node, feed.batch(closed, 1000))
    wait_applied(node)
    assert e["completed"] == 0 and not parts(hdb, "trade", closed)
    deadline = time.monotonic() + (fire - dt.datetime.now(tz)).total_seconds() + 30
    while True:
        e = eod_status(node)
        if e["completed"] >= 1 and e["closing"] == []:
            break
        assert time.monotonic() < deadline, f"no end of day at {fire}: {e}\n{node.log_tail()}"
        time.sleep(0.2)
    assert time.time() >= fire.timestamp() - 1, "ended before its time"
    assert e["last"]["date"] == closed, e
    assert sorted(duck_sizes(hdb, closed)) == sorted(r[3] for r in feed.trades)
    assert sql(node, f"SELECT count(*) FROM trade WHERE date = '{closed}'") == [[len(feed.trades)]]
    assert node.status()["tables"]["trade"]["rows"] == 0


# --- 9. restarts after completed ends of day --------------------------------

@pytest.mark.parametrize("hot", [False, True], ids=["journal-replay", "hot-restart"])
def test_a_restart_after_ends_of_day_neither_loses_nor_rewrites_a_day(cluster, rng, tmp_path, hot):
    """Without Hot Restart the whole journal, end-of-day markers included,
    is replayed at start: the days already in the HDB are not written again
    nor kept in memory. With it, the store and the trimmed journal give the
    same."""
    hdb = tmp_path / "hdb"
    extra = ["--hdb", str(hdb)] + (["--hot-restart", str(tmp_path / "hot")] if hot else [])
    db = cluster.up(extra=extra)
    feed = Feed(rng)
    post(db, feed.batch(D1, 1500))
    end_of_day(db, D1)
    post(db, feed.batch(D2, 1500))
    e = end_of_day(db, D2)
    if hot:
        assert e["last"]["checkpoint_seq"] is not None and e["last"]["journal_trimmed_upto"] == e["last"]["seq"], e
    today = e["today"]
    post(db, feed.batch(today, 700))
    wait_applied(db)
    files = {p: sha(p) for p in hdb.rglob("*.parquet")}
    assert len(files) == 4
    db.kill9()

    db2 = cluster.up(data_dir=db.data_dir, extra=extra)
    wait_applied(db2)
    time.sleep(0.5)  # a wrongly replayed end of day would be written by now
    e2 = eod_status(db2)
    assert e2["closing"] == [] and e2["last_error"] is None, e2
    assert {p: sha(p) for p in hdb.rglob("*.parquet")} == files, "the HDB changed on restart"
    n_today = sum(1 for r in feed.trades if r[4] == today)
    assert db2.status()["tables"]["trade"]["rows"] == n_today
    assert tickdb_trade_aggs(db2) == feed.trade_aggs()
    assert sql(db2, "SELECT count(*), count(DISTINCT size) FROM trade") == [[len(feed.trades)] * 2]
    assert sql(db2, "SELECT count(*) FROM quote") == [[len(feed.quotes)]]
    # And the next end of day after the restart writes only today's rows.
    e3 = end_of_day(db2, "2026-11-21")
    assert {t["table"]: t["rows"] for t in e3["last"]["tables"]}["trade"] == n_today, e3
    assert sorted(duck_sizes(hdb)) == sorted(r[3] for r in feed.trades)


# --- 10. a day big enough for several row groups -----------------------------

def test_a_large_day_is_cut_into_row_groups_at_symbol_boundaries(cluster, rng, tmp_path):
    """Row groups close at the first symbol boundary past 128Ki rows; every
    reader reads the several groups back whole."""
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    counts = {"AAA": 90_000, "BBB": 70_000, "CCC": 40_000, "DDD": 5_000}
    t0 = midnight_ns(D1) + 10**12
    lines = []
    i = 0
    pending = [s for s, c in counts.items() for _ in range(c)]
    rng.shuffle(pending)
    for sym in pending:
        i += 1
        lines.append(f"trade,sym={sym} price={1 + i % 997 / 100:.2f},size={i}i {t0 + i * 1000}")
    post(node, lines, chunk=5000)
    ans = post_eod(node, D1)
    e = wait_eod(node, ans["seq"], timeout=120)
    rep = {t["table"]: t for t in e["last"]["tables"]}["trade"]
    path = hdb / "trade" / f"date={D1}" / "part-00000.parquet"
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == rep["row_groups"] >= 2, (md.num_row_groups, rep)
    check_part_metadata(path, ["time", "sym", "price", "size"], f"eod:{ans['seq']}", len(lines))
    # AAA+BBB reach the floor at BBB's end: the first group is exactly them.
    assert md.row_group(0).num_rows == counts["AAA"] + counts["BBB"], [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    got = duckdb.sql(f"""SELECT CAST(sym AS VARCHAR), count(*), sum(size) FROM read_parquet('{path}')
                         GROUP BY 1 ORDER BY 1""").fetchall()
    assert [(s, c) for s, c, _ in got] == sorted(counts.items())
    assert sum(int(x) for _, _, x in got) == len(lines) * (len(lines) + 1) // 2
    assert polars_trade_aggs(hdb) == tickdb_trade_aggs(node)


# --- 11. edges: two crashes in a row, an empty day, keyed tables, bad dates ---

def test_two_crashes_in_a_row_during_one_end_of_day_still_write_it_once(cluster, rng, tmp_path, monkeypatch):
    hdb, hot = tmp_path / "hdb", tmp_path / "hot"
    extra = ["--hdb", str(hdb), "--hot-restart", str(hot)]
    feed = Feed(rng)
    monkeypatch.setenv("TICKDB_TEST_EOD_CRASH", "staged")
    db = cluster.up(extra=extra)
    post(db, feed.batch(D1, 2000))
    try:
        requests.post(db.url + "/admin/eod", params={"date": D1}, timeout=30)
    except requests.RequestException:
        pass
    assert db.wait_exit(timeout=60) == -9
    # The restart replays the marker and dies again, after the first commit.
    monkeypatch.setenv("TICKDB_TEST_EOD_CRASH", "between-commits")
    db2 = cluster.up(data_dir=db.data_dir, extra=extra, start=False)
    db2.start(wait_ready=False)
    assert db2.wait_exit(timeout=60) == -9, db2.log_tail()
    monkeypatch.delenv("TICKDB_TEST_EOD_CRASH")
    db3 = cluster.up(data_dir=db.data_dir, extra=extra)
    wait_applied(db3)
    deadline = time.monotonic() + 60
    while not (eod_status(db3)["closing"] == [] and eod_status(db3)["history_dates"] == {"trade": 1, "quote": 1}):
        assert time.monotonic() < deadline, eod_status(db3)
        time.sleep(0.05)
    assert sorted(duck_sizes(hdb, D1)) == sorted(r[3] for r in feed.trades)
    assert parts(hdb, "trade", D1) == ["part-00000.parquet"] and parts(hdb, "quote", D1) == ["part-00000.parquet"]
    assert sql(db3, "SELECT count(*), count(DISTINCT size) FROM trade") == [[len(feed.trades)] * 2]
    assert sql(db3, "SELECT count(*) FROM quote") == [[len(feed.quotes)]]
    res = verify(hdb)
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr


def test_an_empty_day_keyed_tables_and_bad_dates(cluster, rng, tmp_path):
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    # An end of day with nothing to write completes and writes nothing.
    e = end_of_day(node, D1)
    assert e["last"]["rows"] == 0 and e["completed"] == 1 and e["last_error"] is None, e
    assert not parts(hdb, "trade", D1) and not parts(hdb, "quote", D1)
    assert verify(hdb).returncode == 0
    # Keyed tables stay in memory through end of day; only append tables move.
    t = midnight_ns(D2)
    post(node, [f"daily,sym=A open=1.0,close=2.0,volume=5i {t}", f"daily,sym=B open=1.0,close=3.0,volume=7i {t}",
                f"trade,sym=A price=1.0,size=1i {t}"])
    wait_applied(node)
    end_of_day(node, D2)
    assert sql(node, "SELECT sym, close FROM daily ORDER BY sym") == [["A", 2.0], ["B", 3.0]]
    assert not (hdb / "daily").exists()
    assert sql(node, "SELECT count(*) FROM trade") == [[1]]
    # Dates that are not dates are refused, naming the date.
    for bad in ("2026-13-45", "20261118", "yesterday"):
        r = requests.post(node.url + "/admin/eod", params={"date": bad}, timeout=10)
        assert r.status_code == 400 and bad in r.text, (bad, r.status_code, r.text)
    cli = run(["eod", "--node", f"127.0.0.1:{node.http_port}", "--date", "2026-02-30"])
    assert cli.returncode != 0 and "2026-02-30" in cli.stderr, cli.stderr
    assert eod_status(node)["completed"] == 2


# --- 12. the same answers before and after end of day ------------------------

def _norm(v):
    if v is None:
        return (0, "")
    if isinstance(v, float) and v != v:
        return (1, "")
    return (2, v)


def _rows(t: pa.Table) -> list[tuple]:
    cols = [c.to_pylist() for c in t.columns]
    return [tuple(_norm(c[i]) for c in cols) for i in range(t.num_rows)]


def _ilp_sym(s: str) -> str:
    return s.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ").replace("=", "\\=")


def test_every_answer_is_the_same_before_and_after_end_of_day(cluster, rng, tmp_path):
    """Ties in time, null and NaN values, rows without a symbol, symbols
    with spaces, commas and non-ASCII letters: what tickdb answers from
    memory it answers the same from its Parquet after end of day (sorting
    keeps the arrival order of equal (sym, time), which ASOF JOIN and
    latest() depend on), and pyarrow reads the same rows back."""
    hdb = tmp_path / "hdb"
    node = cluster.up(extra=["--hdb", str(hdb)])
    syms = ["A", "Ünï€", "a b,c", "Z", None]
    t = midnight_ns(D1) + 10 * 3600 * 10**9
    lines = []
    for i in range(1, 4001):
        t += rng.choice([0, 0, 0, 1000, 250_000])
        sym = rng.choice(syms)
        tag = f",sym={_ilp_sym(sym)}" if sym is not None else ""
        if rng.random() < 0.5:
            r = rng.random()
            price = "NaN" if r < 0.05 else ("" if r < 0.1 else f"{rng.uniform(1, 9):.3f}")
            fields = ",".join(x for x in (f"price={price}" if price else "", f"size={i}i") if x)
            lines.append(f"trade{tag} {fields} {t}")
        else:
            bid = f"{rng.uniform(1, 9):.3f}"
            fields = [f"bid={bid}", f"ask={float(bid) + 0.01:.3f}"]
            if rng.random() < 0.9:
                fields.append(f"bsize={rng.randint(1, 99)}i")
            if rng.random() < 0.9:
                fields.append(f"asize={rng.randint(1, 99)}i")
            lines.append(f"quote{tag} {','.join(fields)} {t}")
    post(node, lines)
    wait_applied(node)
    queries = {
        "trade": "SELECT time, sym, price, size FROM trade",
        "quote": "SELECT time, sym, bid, ask, bsize, asize FROM quote",
        "asof": """SELECT t.size, t.sym, q.bid, q.ask, q.bsize, q.asize, q.time FROM trade t
                   ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym ORDER BY t.size""",
        "asof strict": """SELECT t.size, q.bid, q.time FROM trade t
                   ASOF JOIN quote q MATCH_CONDITION (t.time > q.time) ON t.sym = q.sym ORDER BY t.size""",
        "latest quote": "SELECT sym, bid, ask, bsize, asize, time FROM latest('quote')",
        "latest trade": "SELECT sym, price, size, time FROM latest('trade')",
        "per sym": """SELECT sym, count(*), count(price), sum(size), min(time), max(time)
                      FROM trade GROUP BY sym""",
        # Prices hold NaN: a grouped max/min must not depend on the order
        # rows are read in, which end of day changes (DataFusion's grouped
        # float accumulators compare with partial_cmp: apache/datafusion#24432).
        "per sym max/min price": "SELECT sym, max(price), min(price) FROM trade GROUP BY sym",
        "filters": f"""SELECT count(*), sum(size) FROM trade WHERE sym IN ('A', 'a b,c')
                       AND time >= '{D1}T10:00:01Z'""",
    }
    before = {k: sorted(_rows(arrow(node, q))) for k, q in queries.items()}
    assert len(before["trade"]) + len(before["quote"]) == len(lines)
    e = end_of_day(node, D1)
    assert e["last"]["rows"] == len(lines), e
    assert node.status()["tables"]["trade"]["rows"] == 0
    differ = []
    for k, q in queries.items():
        after = sorted(_rows(arrow(node, q)))
        if after != before[k]:
            differ.append(f"{k}: {len(after)} rows after end of day, {len(before[k])} before; first difference "
                          f"{next(((a, b) for a, b in zip(after, before[k]) if a != b), None)}")
    # The files: the same rows, and equal (sym, time) in arrival order (size).
    for table in ("trade", "quote"):
        f = pq.read_table(hdb / table / f"date={D1}" / "part-00000.parquet")
        f = f.select([c for c in f.column_names if c != "date"])
        f = f.set_column(1, "sym", pc.cast(f["sym"], pa.string()))
        assert sorted(_rows(f)) == [tuple(r) for r in before[table]], table
    f = pq.read_table(hdb / "trade" / f"date={D1}" / "part-00000.parquet")
    keys = list(zip(pc.cast(f["sym"], pa.string()).to_pylist(), pc.cast(f["time"], pa.int64()).to_pylist(),
                    f["size"].to_pylist()))
    assert keys == sorted(keys, key=lambda k: (k[0] is not None, k[0] or "", k[1], k[2])), \
        "rows not sorted by (sym, time) with null symbols first and ties in arrival order"
    res = verify(hdb)
    assert res.returncode == 0 and not problems(res), res.stdout + res.stderr
    assert not differ, "answers changed at end of day:\n" + "\n".join(differ)


# --- 13. a full disk: the day stays in memory until it can be written --------

def test_a_full_disk_keeps_the_day_in_memory_and_retries_until_it_is_written(cluster, rng, tmp_path):
    """The HDB on a small tmpfs, filled up: end of day fails with the disk's
    error in /status, the day stays in memory and answers queries, nothing
    half-written is visible; once space is freed the retry writes it, once."""
    import os
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs as the full disk")
    hdb = tmp_path / "hdb"
    hdb.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(hdb)], check=True)
    try:
        node = cluster.up(extra=["--hdb", str(hdb)])
        feed = Feed(rng)
        post(node, feed.batch(D1, 20_000, quote_share=0.0))
        wait_applied(node)
        # Fill the disk, leaving too little for the day's Parquet.
        filler = hdb / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        ans = post_eod(node, D1)
        deadline = time.monotonic() + 30
        while True:
            e = eod_status(node)
            if e["last_error"]:
                break
            assert time.monotonic() < deadline, f"no error reported: {e}\n{node.log_tail()}"
            time.sleep(0.05)
        assert "No space left" in e["last_error"] or "ENOSPC" in e["last_error"] or "space" in e["last_error"], e
        assert [c["seq"] for c in e["closing"]] == [ans["seq"]], e
        # Nothing half-written is visible, and every row still answers.
        assert not parts(hdb, "trade", D1)
        n = len(feed.trades)
        assert sql(node, "SELECT count(*), count(DISTINCT size) FROM trade") == [[n, n]]
        # Space again: the retry (every 5 s) writes the day, once.
        filler.unlink()
        e = wait_eod(node, ans["seq"], timeout=30)
        assert e["last_error"] is None and e["last"]["rows"] == n, e
        assert parts(hdb, "trade", D1) == ["part-00000.parquet"]
        assert sql(node, f"SELECT count(*), count(DISTINCT size) FROM trade WHERE date = '{D1}'") == [[n, n]]
        assert sql(node, "SELECT count(*) FROM trade") == [[n]]
        res = verify(hdb)
        assert res.returncode == 0, res.stdout + res.stderr
        node.terminate()
    finally:
        subprocess.run(["umount", "-l", str(hdb)], check=False)
