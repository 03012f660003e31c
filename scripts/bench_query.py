#!/usr/bin/env python3
"""SQL benchmark: tickdb against QuestDB and DuckDB on the same
generated ticks, in the same run, on the same machine.

    .venv/bin/python scripts/bench_query.py [--rows N] [--quick] [--out docs/benchmarks.md]

What it measures (median of --repeats runs after one warm-up, per system):
- the 5M x 5M ASOF JOIN of trades with the prevailing quote, with an
  aggregate over it (tickdb ASOF JOIN, QuestDB ASOF JOIN, DuckDB ASOF LEFT JOIN);
  QuestDB's ASOF queries run in its default form and with each of its
  temporal-join hints, and the ratio is against the faster;
- the Optane kdb+ study's monitor query: the as-of join of all trades of one symbol with
  their prevailing quotes, on the same loaded tables;
- 1-second buckets over the trades (tickdb time_bucket, QuestDB SAMPLE BY,
  DuckDB date_trunc), counted so that result transfer does not dominate;
- result streaming ("results out fast"): psql reading a million-row
  result over the PostgreSQL wire; psycopg 3 reading min(rows, 5M) quote
  rows with binary and with text results; pyarrow reading the same rows
  from HTTP `/exec?format=arrow` (an Arrow IPC stream); and the server's
  resident memory sampled while a client reads a fifth of them and all of
  them over each of PG binary and HTTP Arrow (its growth must not scale
  with the result).

tickdb and QuestDB are loaded through the same client (the `questdb` ILP
package, HTTP transport) and queried over HTTP `/exec`; DuckDB runs in this
process. The release binary (target/release/tickdb) and the QuestDB jar
cached by `tickdb bench` (~/.cache/tickdb-bench) are used; scripts/bench.sh
prepares both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import threading

import duckdb
import numpy as np
import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import requests

import benchutil
from benchutil import free_port

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## SQL"
REGEN_LINE = ("`.venv/bin/python scripts/bench_query.py [--quick]` regenerates \"SQL\" alone, in place "
              "(`scripts/bench.sh` runs it after `tickdb bench report`).")
QUESTDB_VERSION = "9.3.4"
T0 = 1_700_000_000_000_000_000
SPAN_NS = 6 * 3600 * 1_000_000_000  # a 6-hour session
READY_S = 120


def log(msg: str) -> None:
    print(f"[bench query] {msg}", file=sys.stderr, flush=True)


class Server:
    """A child process in its own group, killed with the group at the end."""

    def __init__(self, name: str, args: list[str], logfile: Path, env=None):
        self.name = name
        # Where this start's lines begin in the log (a retry appends).
        self.log_start = logfile.stat().st_size if logfile.exists() else 0
        self.log = open(logfile, "ab")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env=env)

    def wait_http(self, url: str) -> None:
        benchutil.wait_ready(self.p, url, Path(self.log.name), self.log_start, self.name, READY_S)

    def stop(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        self.log.close()


def gen(rows: int, syms: int, seed: int, quote_rows: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`rows` trades and `quote_rows` (default `rows`) quotes over one
    session, times sorted, activity skewed (a few symbols trade far more
    than the rest)."""
    rng = np.random.default_rng(seed)
    names = np.array([f"S{i:04d}" for i in range(syms)])
    w = 1.0 / np.arange(1, syms + 1)
    w /= w.sum()

    def frame(n: int) -> tuple[np.ndarray, np.ndarray]:
        t = np.sort(rng.integers(0, SPAN_NS, n)) + T0
        return pd.to_datetime(t, unit="ns"), names[rng.choice(syms, n, p=w)]

    nq = rows if quote_rows is None else quote_rows
    qt, qs = frame(nq)
    bid = np.round(50 + rng.random(nq) * 50, 2)
    quotes = pd.DataFrame({"time": qt, "sym": pd.Categorical(qs), "bid": bid, "ask": bid + 0.01,
                           "bsize": rng.integers(1, 1000, nq), "asize": rng.integers(1, 1000, nq)})
    tt, ts = frame(rows)
    trades = pd.DataFrame({"time": tt, "sym": pd.Categorical(ts), "price": np.round(50 + rng.random(rows) * 50, 2),
                           "size": rng.integers(1, 1000, rows)})
    return trades, quotes


def load_ilp(http_port: int, name: str, df: pd.DataFrame, table: str) -> float:
    """Sends df through the questdb client; seconds."""
    def progress(done: int, total: int, _el: float) -> None:
        if done == total or (done // benchutil.LOAD_STEP_ROWS) % 10 == 0:
            log(f"  {name}: {table} {done:,}/{total:,} rows")
    return benchutil.load_ilp(http_port, df, table, progress)


def http_exec(port: int, sql: str, session: requests.Session | None = None) -> list:
    """The dataset of `sql` from a server's `/exec`: over `session`'s kept-alive
    connection when given, else over a new connection."""
    r = (session or requests).get(f"http://127.0.0.1:{port}/exec", params={"query": sql}, timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"{sql}: {r.status_code} {r.text[:500]}")
    return r.json()["dataset"]


def wait_rows(port: int, table: str, n: int, count_sql: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            got = http_exec(port, count_sql.format(table=table))[0][0]
            if got >= n:
                return
        except (RuntimeError, requests.RequestException, IndexError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"{table}: rows not visible on port {port}")


def questdb_jar() -> Path:
    """Where `tickdb bench report` keeps the QuestDB jar."""
    cache = Path(os.environ.get("TICKDB_BENCH_CACHE", Path.home() / ".cache/tickdb-bench"))
    return cache / f"questdb-{QUESTDB_VERSION}.jar"


def start_tickdb(binary: str, work: Path) -> tuple[Server, int, int]:
    """`tickdb up` on free loopback ports, data in work/tickdb, no fsync,
    queries allowed 10 minutes and 8 GiB; ready. (server, HTTP port, PG port)."""
    return benchutil.start_retrying(lambda: _start_tickdb(binary, work), "tickdb")


def _start_tickdb(binary: str, work: Path) -> tuple[Server, int, int]:
    http, pg = free_port(), free_port()
    tick = Server("tickdb", [binary, "up", "--http-port", str(http), "--ilp-port", str(free_port()),
                             "--tp-port", str(free_port()), "--repl-port", str(free_port()), "--pg-port", str(pg),
                             "--data-dir", str(work / "tickdb"), "--fsync", "never",
                             "--query-timeout-ms", "600000", "--query-memory-bytes", str(8 << 30)],
                  work / "tickdb.log", env={**os.environ, "TICKDB_LOG": "warn"})
    try:
        tick.wait_http(f"http://127.0.0.1:{http}/health")
    except BaseException:
        tick.stop()
        raise
    return tick, http, pg


def start_questdb(jar: Path, work: Path) -> tuple[Server, int]:
    """QuestDB with its defaults on free loopback ports (PG and UDP off),
    data in work/questdb; ready. (server, HTTP port)."""
    return benchutil.start_retrying(lambda: _start_questdb(jar, work), "QuestDB")


def _start_questdb(jar: Path, work: Path) -> tuple[Server, int]:
    qhttp = free_port()
    root = work / "questdb"
    (root / "conf").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "server.conf").write_text(
        f"http.bind.to=127.0.0.1:{qhttp}\nline.tcp.net.bind.to=127.0.0.1:{free_port()}\n"
        "pg.enabled=false\nhttp.min.enabled=false\nline.udp.enabled=false\ntelemetry.enabled=false\n")
    qdb = Server("QuestDB", ["java", "-p", str(jar), "-m", "io.questdb/io.questdb.ServerMain", "-d", str(root)],
                 work / "questdb.log")
    try:
        qdb.wait_http(f"http://127.0.0.1:{qhttp}/exec?query=select%201")
    except BaseException:
        qdb.stop()
        raise
    return qdb, qhttp


def load_all(port: int, name: str, trades: pd.DataFrame, quotes: pd.DataFrame, count_sql: str) -> float:
    """Quotes then trades through the ILP client, until every row is
    queryable; seconds of loading."""
    took = load_ilp(port, name, quotes, "quote") + load_ilp(port, name, trades, "trade")
    wait_rows(port, "trade", len(trades), count_sql)
    wait_rows(port, "quote", len(quotes), count_sql)
    return took


def duckdb_with(trades: pd.DataFrame, quotes: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    """DuckDB in process, holding the same rows as tables trade and quote."""
    log("loading DuckDB (in process)")
    con = duckdb.connect()
    con.register("tdf", trades)
    con.register("qdf", quotes)
    con.execute("create table trade as select time, cast(sym as varchar) sym, price, size from tdf")
    con.execute("create table quote as select time, cast(sym as varchar) sym, bid, ask, bsize, asize from qdf")
    return con


def timed(fn, repeats: int) -> tuple[float, object, list[float]]:
    out = fn()  # warm-up, and the answer to compare
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out, times


QUERIES = {
    "asof": {
        "title": "ASOF JOIN of all trades with the prevailing quote, aggregated",
        "tickdb": "select count(*), count(q.bid), sum(q.bid) from trade t asof join quote q "
                  "match_condition (t.time >= q.time) on t.sym = q.sym",
        "questdb": "select count(*), count(q.bid), sum(q.bid) from trade t asof join quote q on (sym)",
        "duckdb": "select count(*), count(q.bid), sum(q.bid) from trade t asof left join quote q "
                  "on t.sym = q.sym and t.time >= q.time",
        "questdb_hints": "t q",
    },
    "monitor": {
        "title": "The Optane kdb+ study's monitor query: as-of join of one symbol's trades with their quotes",
        "tickdb": "select count(*), sum(q.bid) from trade t asof join quote q "
                  "match_condition (t.time >= q.time) on t.sym = q.sym where t.sym = 'S0000'",
        "questdb": "select count(*), sum(q.bid) from (trade where sym = 'S0000') t asof join quote q on (sym)",
        "duckdb": "select count(*), sum(q.bid) from (select * from trade where sym = 'S0000') t "
                  "asof left join quote q on t.sym = q.sym and t.time >= q.time",
        "questdb_hints": "t q",
    },
    "buckets": {
        "title": "1-second buckets per symbol over the trades (open/high/low/close/volume), counted",
        "tickdb": "select count(*), sum(v) from (select time_bucket(interval '1 second', time) b, sym, "
                  "first(price order by time) o, max(price) h, min(price) l, last(price order by time) c, "
                  "sum(size) v from trade group by b, sym)",
        "questdb": "select count(), sum(v) from (select timestamp, sym, first(price) o, max(price) h, "
                   "min(price) l, last(price) c, sum(size) v from trade sample by 1s)",
        # Whole seconds of the nanosecond times: DuckDB's date_trunc goes
        # through microseconds and rounds x.999999978 s up to the next second.
        "duckdb": "select count(*), sum(v) from (select epoch_ns(time) // 1000000000 b, sym, "
                  "first(price order by time) o, max(price) h, min(price) l, last(price order by time) c, "
                  "sum(size) v from trade group by b, sym)",
    },
}


# QuestDB's temporal-join hints ("SQL optimizer hints" in QuestDB's
# documentation): each names an ASOF algorithm suited to a data shape. The
# benchmark tries every one on each ASOF query and reports the fastest as
# QuestDB's best form, beside its default.
QUESTDB_ASOF_HINTS = ["asof_linear", "asof_index", "asof_memoized", "asof_dense"]
# A hint whose warm-up run is this many times slower than the best form so
# far is not timed further (it cannot be the best; its runs would take minutes).
HINT_GIVE_UP_FACTOR = 3.0


def with_hint(sql: str, hint: str, tables: str) -> str:
    assert sql.lower().startswith("select ")
    return f"select /*+ {hint}({tables}) */ " + sql[len("select "):]


def questdb_best(port: int, q: dict, default: tuple, repeats: int,
                 session: requests.Session | None = None) -> tuple[str, tuple] | None:
    """The fastest hinted form of an ASOF query on QuestDB: (hint, timed
    result), each request over `session` when given (see `http_exec`)."""
    best: tuple[str, tuple] | None = None
    for hint in QUESTDB_ASOF_HINTS:
        sql = with_hint(q["questdb"], hint, q["questdb_hints"])
        log(f"  QuestDB with /*+ {hint} */")
        t = time.perf_counter()
        http_exec(port, sql, session)
        warm = time.perf_counter() - t
        bar = min(default[0], best[1][0] if best else float("inf"))
        if warm > HINT_GIVE_UP_FACTOR * bar:
            log(f"    warm-up {fmt_s(warm)}: not timed further")
            continue
        r = timed(lambda: http_exec(port, sql, session), repeats)
        if best is None or r[0] < best[1][0]:
            best = (hint, r)
    return best


# Results out fast: rows streamed to clients.
STREAM_ROWS_MAX = 5_000_000
STREAM_SQL = "select time, sym, bid, ask, bsize, asize from quote limit {n}"
RSS_CONTROL_SQL = "select * from (" + STREAM_SQL + ") order by bid"
PG_BINARY_ROWS_PER_S_TARGET = 2e6
ARROW_ROWS_PER_S_TARGET = 10e6
# Rows per chunk for psycopg's cursor.stream (libpq 17+ chunked rows mode).
PG_STREAM_CHUNK_ROWS = 10_000
RSS_SAMPLE_S = 0.02
# The peak growth of the server's RSS while a client reads all the rows may
# be at most this many times its growth while a client reads a fifth of
# them (plus RSS_SLACK_BYTES of noise) for memory to count as bounded: a
# server holding the result would grow 5x.
RSS_GROWTH_RATIO_MAX = 2.0
RSS_SLACK_BYTES = 32 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class RssPeak:
    """The peak resident memory of a process while the block runs, sampled
    every RSS_SAMPLE_S in a thread; `idle` is the RSS just before."""

    def __init__(self, pid: int):
        self.pid = pid
        self.idle = self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_S):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> "RssPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))

    @property
    def growth(self) -> int:
        return self.peak - self.idle


def pg_read(port: int, sql: str, binary: bool, mode: str, check: bool = False) -> tuple[int, int | None, float]:
    """Reads every row of sql through psycopg 3 (Python tuples, decoded by
    its C loaders): `fetchall` on a client-side cursor, or `stream`
    (chunked rows). (rows, sum of column 4 when check, seconds of the
    read; the sum is taken outside the timed part for fetchall)."""
    with psycopg.connect(host="127.0.0.1", port=port, user="tickdb", password="tickdb", dbname="tickdb",
                         autocommit=True) as conn:
        cur = conn.cursor(binary=binary)
        total = None
        t = time.perf_counter()
        if mode == "fetchall":
            cur.execute(sql)
            rows = cur.fetchall()
            secs = time.perf_counter() - t
            n = len(rows)
            if check:
                total = sum(r[4] for r in rows)
            del rows
        else:
            n = 0
            if check:
                total = 0
                for r in cur.stream(sql, size=PG_STREAM_CHUNK_ROWS):
                    n += 1
                    total += r[4]
            else:
                for _ in cur.stream(sql, size=PG_STREAM_CHUNK_ROWS):
                    n += 1
            secs = time.perf_counter() - t
    return n, total, secs


def arrow_read(port: int, sql: str, mode: str) -> tuple[int, int, float]:
    """Reads sql from HTTP /exec?format=arrow into pyarrow record batches:
    `stream` decodes the response body as it arrives
    (pyarrow.ipc.open_stream over requests' raw stream), `body` reads the
    whole body first. (rows, sum of bsize, seconds)."""
    t = time.perf_counter()
    r = requests.get(f"http://127.0.0.1:{port}/exec", params={"query": sql, "format": "arrow"},
                     stream=True, timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"{sql}: {r.status_code} {r.text[:500]}")
    src = r.raw if mode == "stream" else r.content
    n = total = 0
    with pa.ipc.open_stream(src) as reader:
        for b in reader:
            n += b.num_rows
            total += pc.sum(b.column("bsize")).as_py() or 0
    r.close()
    return n, total, time.perf_counter() - t


def rows_per_s(fn, repeats: int = 3) -> tuple[float, tuple]:
    """Median rows/s of `repeats` reads after a checked warm-up; fn(check)
    returns (rows, sum, seconds). (rows/s, the warm-up's (rows, sum))."""
    n, total, _ = fn(True)
    rates = []
    for _ in range(repeats):
        m, _, secs = fn(False)
        if m != n:
            raise SystemExit(f"read {m} rows, then {n}")
        rates.append(m / secs)
    return statistics.median(rates), (n, total)


def rss_check(pid: int, pg: int, http: int, sizes: tuple[int, ...]) -> dict[str, list[tuple[int, RssPeak]]]:
    """The server's RSS while one client reads each number of rows, over
    PG binary (psycopg `stream`) and over HTTP Arrow (pyarrow reading the
    body as it arrives)."""
    readers = {"PG binary": lambda sql: pg_read(pg, sql, True, "stream")[0],
               "HTTP Arrow": lambda sql: arrow_read(http, sql, "stream")[0]}
    rss: dict[str, list[tuple[int, RssPeak]]] = {}
    for name, read in readers.items():
        rss[name] = []
        for n in sizes:
            log(f"results out: server RSS while {name} reads {n:,} rows")
            time.sleep(0.5)
            with RssPeak(pid) as peak:
                got = read(STREAM_SQL.format(n=n))
            if got != n:
                raise SystemExit(f"{name} read {got:,} rows of {n:,}")
            rss[name].append((n, peak))
            log(f"  idle {fmt_mib(peak.idle)}, peak {fmt_mib(peak.peak)}, growth {fmt_mib(peak.growth)}")
    return rss


def rss_control(pid: int, pg: int, n: int) -> RssPeak:
    """The server's RSS while psycopg reads the same rows sorted, which the
    server must hold all at once: shows that the sampling sees a result
    held in memory. Run after rss_check (the memory it frees stays in the
    allocator, and would hide what later reads hold)."""
    log(f"results out: server RSS while PG binary reads {n:,} rows sorted (control)")
    time.sleep(0.5)
    with RssPeak(pid) as peak:
        got = pg_read(pg, RSS_CONTROL_SQL.format(n=n), True, "stream")[0]
    if got != n:
        raise SystemExit(f"the control read {got:,} rows of {n:,}")
    log(f"  idle {fmt_mib(peak.idle)}, peak {fmt_mib(peak.peak)}, growth {fmt_mib(peak.growth)}")
    return peak


def fmt_mib(b: int) -> str:
    return f"{b / (1 << 20):.0f} MiB"


def fmt_rate(r: float) -> str:
    return f"{r / 1e6:.2f} M rows/s"


def fmt_s(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000, help="trades and quotes each (default 5M)")
    ap.add_argument("--syms", type=int, default=1000, help="symbols (default 1000, skewed activity)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per query after one warm-up (default 5)")
    ap.add_argument("--quick", action="store_true", help="500k rows, 3 repeats")
    ap.add_argument("--no-questdb", action="store_true")
    ap.add_argument("--only-results-out", action="store_true",
                    help="only the result-streaming part, for iterating on it (no QuestDB, no comparison queries: "
                         "their table comes out empty)")
    ap.add_argument("--no-redis", action="store_true", help="accepted for scripts/bench.sh; this part runs no Redis")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "tickdb"))
    ap.add_argument("--out", "--append", dest="out",
                    help="replace (or append) the section \"## SQL\" in this markdown file (else print it)")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.repeats = 500_000, 3
    jar = questdb_jar()
    use_questdb = not a.no_questdb and not a.only_results_out and jar.exists() and shutil.which("java") is not None
    if not a.no_questdb and not use_questdb:
        log(f"QuestDB skipped: need java and {jar} (tickdb bench report downloads it)")
    work = Path(tempfile.mkdtemp(prefix="tickdb-bench-query-"))
    servers: list[Server] = []
    started = time.monotonic()
    # Before the benchmark loads the machine itself: was anything else running?
    start_load = os.getloadavg()[0]
    try:
        log(f"generating {a.rows:,} trades and {a.rows:,} quotes over {a.syms} symbols (seed {a.seed})")
        trades, quotes = gen(a.rows, a.syms, a.seed)

        tick, http, pg = start_tickdb(a.bin, work)
        servers.append(tick)
        load = {"tickdb": load_all(http, "tickdb", trades, quotes, "select count(*) from {table}")}

        # Results out: the server's memory first, before any query leaves
        # freed memory in its allocator that a buffered result could hide
        # in; a fifth of the rows, then all of them.
        n_out = min(len(quotes), STREAM_ROWS_MAX)
        sql_out = STREAM_SQL.format(n=n_out)
        n_small = max(1, n_out // 5)
        rss = rss_check(tick.p.pid, pg, http, (n_small, n_out))
        rss_sorted = rss_control(tick.p.pid, pg, n_out)
        bounded = {name: runs[1][1].growth <= RSS_GROWTH_RATIO_MAX * max(runs[0][1].growth, 0) + RSS_SLACK_BYTES
                   for name, runs in rss.items()}

        qhttp = None
        if use_questdb:
            qdb, qhttp = start_questdb(jar, work)
            servers.append(qdb)
            load["questdb"] = load_all(qhttp, "QuestDB", trades, quotes, "select count() from {table}")

        con = duckdb_with(trades, quotes)

        results = {}
        hints: dict[str, str] = {}
        disagree: list[str] = []
        # Systems timed on a machine that was not quiet (settle gave up).
        busy: list[str] = []
        for key, q in ({} if a.only_results_out else QUERIES).items():
            row = {}
            log(f"{key}: tickdb")
            benchutil.quiet("tickdb", key, busy, log)
            row["tickdb"] = timed(lambda: http_exec(http, q["tickdb"]), a.repeats)
            if qhttp:
                log(f"{key}: QuestDB")
                benchutil.quiet("QuestDB", key, busy, log)
                try:
                    row["questdb"] = timed(lambda: http_exec(qhttp, q["questdb"]), a.repeats)
                    if "questdb_hints" in q:
                        found = questdb_best(qhttp, q, row["questdb"], a.repeats)
                        if found:
                            hints[key] = found[0]
                            row["questdb_best"] = found[1]
                except RuntimeError as e:
                    log(f"QuestDB failed: {e}")
            log(f"{key}: DuckDB")
            benchutil.quiet("DuckDB", key, busy, log)
            row["duckdb"] = timed(lambda: con.execute(q["duckdb"]).fetchall(), a.repeats)
            results[key] = row
            # Every system's whole answer (QuestDB's best hinted form too).
            answers = {k: (v[1][0] if v[1] else None) for k, v in row.items()}
            if not benchutil.same_answers(answers):
                log(f"  WARNING: the systems disagree: {answers}")
                disagree.append(f"{key}: {answers}")
            log("  medians: " + ", ".join(f"{k} {fmt_s(v[0])}" for k, v in row.items()))
            log("  answers: " + "; ".join(f"{k} {list(v[1][0])[:2]}" for k, v in row.items()))
        query_load_after = os.getloadavg()[0]

        log("PostgreSQL wire: psql reads 1M rows")
        n_stream = min(1_000_000, a.rows)
        env = {**os.environ, "PGPASSWORD": "tickdb"}
        psql = ["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", str(pg), "-U", "tickdb", "-d", "tickdb",
                "-c", f"select time, sym, bid, ask, bsize, asize from quote limit {n_stream}"]
        stream_times = []
        for _ in range(3):
            t = time.perf_counter()
            r = subprocess.run(psql, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"psql failed: {r.stderr.decode()}")
            stream_times.append(time.perf_counter() - t)
        stream_s = statistics.median(stream_times)

        load_before = os.getloadavg()[0]
        rates: dict[tuple[str, str, str], tuple[float, tuple]] = {}
        for client, fmt, how in [("psycopg", "binary", "fetchall"), ("psycopg", "binary", "stream"),
                                 ("psycopg", "text", "fetchall"), ("psycopg", "text", "stream"),
                                 ("pyarrow", "Arrow IPC over HTTP", "stream"), ("pyarrow", "Arrow IPC over HTTP", "body")]:
            if client == "psycopg":
                fn = (lambda b, h: lambda c: pg_read(pg, sql_out, b, h, c))(fmt == "binary", how)
            else:
                fn = (lambda h: lambda c: arrow_read(http, sql_out, h))(how)
            log(f"results out: {client} {fmt} ({how}) reads {n_out:,} rows")
            rates[(client, fmt, how)] = rows_per_s(fn)
            log(f"  {fmt_rate(rates[(client, fmt, how)][0])}, (rows, sum(bsize)) {rates[(client, fmt, how)][1]}")
        load_after = os.getloadavg()[0]
        want = con.execute(f"select count(*), sum(bsize) from (select bsize from quote limit {n_out})").fetchone()
        answers = {" ".join(k): r[1] for k, r in rates.items()}
        answers["DuckDB"] = (int(want[0]), int(want[1]))
        out_agree = len(set(answers.values())) == 1
        if not out_agree:
            log(f"  WARNING: the clients disagree on rows or sum(bsize): {answers}")
        best_pg_binary = max((k for k in rates if k[1] == "binary"), key=lambda k: rates[k][0])
        best_arrow = max((k for k in rates if k[0] == "pyarrow"), key=lambda k: rates[k][0])

        md = [SECTION + "\n",
              f"Generated by `.venv/bin/python scripts/bench_query.py{' --quick' if a.quick else ''}` "
              f"(run by `scripts/bench.sh`) in {time.monotonic() - started:.0f} s: {a.rows:,} trades and {a.rows:,} quotes "
              f"over {a.syms} symbols with skewed activity, times sorted over a 6-hour session, loaded into each system "
              f"through the `questdb` ILP client. Medians of {a.repeats} runs after a warm-up; tickdb and QuestDB answer "
              f"over HTTP `/exec`, DuckDB in process (no transfer). Queries aggregate so that result transfer does not "
              f"dominate. " + benchutil.settle_text()
              + (f"**The machine did not get quiet** before timing {', '.join(busy)}. " if busy else "")
              + f"Same machine as above, all sharing its cores; load average {start_load:.2f} when the benchmark "
              f"started{' (noisy: over half the cores were busy with other work)' if start_load > len(os.sched_getaffinity(0)) * 0.5 else ''}, "
              f"{query_load_after:.2f} after the queries (their own load included).\n",
              "Each peer runs in its default form and in its documented best form for the query, and the ratio is "
              "against the better of the two. QuestDB: its default ASOF algorithm, then each temporal-join hint "
              f"({', '.join('`' + h + '`' for h in QUESTDB_ASOF_HINTS)}; QuestDB's documentation, \"SQL optimizer "
              "hints\"), the fastest reported (a hint whose warm-up ran more than "
              f"{HINT_GIVE_UP_FACTOR:.0f}x slower than the best so far is not timed); `SAMPLE BY` has no hint. "
              "DuckDB: its defaults are its documented best here (as many threads as cores, the whole table in "
              "memory, in process with no result transfer), so default and best are the same run.\n",
              "| query | tickdb | QuestDB default | QuestDB best | DuckDB | best QuestDB / tickdb | DuckDB / tickdb |",
              "|---|---|---|---|---|---|---|"]
        for key, row in results.items():
            tk = row["tickdb"][0]
            qd = row.get("questdb", (None,))[0]
            qb = row.get("questdb_best", (None,))[0]
            better = min(x for x in (qd, qb) if x is not None) if qd is not None else None
            best_cell = f"{fmt_s(qb)} (`{hints[key]}`)" if qb is not None else (
                "no hint applies" if qd is not None and "questdb_hints" not in QUERIES[key] else "n/a")
            dd = row["duckdb"][0]
            md.append(f"| {QUERIES[key]['title']} | {fmt_s(tk)} | {fmt_s(qd)} | {best_cell} | {fmt_s(dd)} | "
                      f"{'n/a' if better is None else f'{better / tk:.2f}x'} | {dd / tk:.2f}x |")
        md.append("")
        md.append("All systems returned the same answer (counts exactly, sums to "
                  f"{benchutil.SUM_REL_TOLERANCE:g} of their size) for every query, "
                  "QuestDB's best hinted form included." if not disagree else
                  "**The systems disagreed:** " + "; ".join(disagree))
        md.append("")
        md.append("Load time through the same ILP client: " + ", ".join(f"{k} {v:.1f} s" for k, v in load.items())
                  + (" (tickdb with `--fsync never`, QuestDB with its default, no fsync on commit)." ))
        md.append("")
        md.append(f"PostgreSQL wire: psql read {n_stream:,} quote rows (6 columns) in {fmt_s(stream_s)} "
                  f"(median of 3), {n_stream / stream_s / 1e6:.2f} M rows/s including psql's own formatting.\n")
        def best_peer(key: str) -> float | None:
            """The fastest peer's median for a query (QuestDB default or best, DuckDB)."""
            row = results.get(key, {})
            peers = [row[k][0] for k in ("questdb", "questdb_best", "duckdb") if k in row]
            return min(peers) if peers else None

        def target(key: str, peer: float | None, factor: float) -> str:
            if peer is None or key not in results:
                return "not measured"
            r = peer / results[key]["tickdb"][0]
            return f"{r:.2f}x ({'met' if r >= factor else 'missed'})"

        md.append("Targets: the 5M x 5M ASOF JOIN at least 2x faster than the best peer's best form: "
                  f"{target('asof', best_peer('asof'), 2.0)}; the 1-second buckets at least 2x faster than DuckDB: "
                  f"{target('buckets', results.get('buckets', {}).get('duckdb', (None,))[0], 2.0)}. The monitor query "
                  "on a 50M-row rdb is in \"One symbol on a 50M-row rdb\" below (here it runs on the loaded "
                  f"{2 * a.rows:,}-row rdb). Ratios above 1 mean tickdb is faster.\n")
        md.append("### Results out\n")
        md.append(f"`{sql_out}` read in full by each client in this process (medians of 3 reads after a checked "
                  f"warm-up), wall time from sending the query to the last row in the client's hands. psycopg 3.3 "
                  f"(C implementation, libpq {psycopg.pq.version()}) builds a Python tuple per row with its C loaders: "
                  f"`fetchall` on a client-side cursor, or `cursor.stream` in chunked-rows mode "
                  f"({PG_STREAM_CHUNK_ROWS:,} rows a chunk); binary results are `cursor(binary=True)`, text results "
                  f"the default cursor (psycopg sends `stream` and binary queries through the extended protocol, a "
                  f"text `execute` through the simple one). pyarrow reads "
                  f"`GET /exec?format=arrow` with `pyarrow.ipc.open_stream`, over the response body as it arrives "
                  f"(`requests` with `stream=True`, `.raw`) or over the whole body read first, into record batches "
                  f"(columns, not Python objects), summing `bsize` per batch. `fetchall` keeps every row, and "
                  f"Python's cyclic garbage collector walks the growing list as it fills: that, not the server, "
                  f"is why it is slower than `stream`, which keeps none.\n")
        how_read = {"fetchall": "`execute` + `fetchall`", "stream": "`cursor.stream`"}
        md.append("| client | results | read with | rows/s |")
        md.append("|---|---|---|---|")
        for (client, fmt, how), (rate, _) in rates.items():
            if client == "pyarrow":
                read_with = "`open_stream` over the body as it arrives" if how == "stream" else "whole body, then `open_stream`"
            else:
                read_with = how_read[how]
            md.append(f"| {client} | {fmt} | {read_with} | {fmt_rate(rate)} |")
        md.append("")
        md.append(f"The client and the server share the machine's {os.cpu_count()} cores with whatever else runs "
                  f"(load average {load_before:.1f} before these reads, {load_after:.1f} after): psycopg's decoding "
                  "takes one core and tickdb's encoding part of another, so the PG figures fall when other work "
                  "takes either.\n")
        md.append("Every client read " + (f"exactly {n_out:,} rows with sum(bsize) {answers['DuckDB'][1]:,}, as DuckDB "
                                         "has for the same rows." if out_agree else
                                         f"**not the same rows:** {answers}"))
        md.append("")
        md.append(f"Server memory: tickdb's VmRSS sampled every {RSS_SAMPLE_S * 1000:.0f} ms while one client reads "
                  f"the first {n_small:,} and then all {n_out:,} rows (PG binary through psycopg `cursor.stream`, "
                  f"Arrow with the body read as it arrives), right after loading and before any other query; "
                  f"growth is the peak over the RSS just before the read. A server that gathered the result "
                  f"before sending it would grow with the rows: about 44 bytes a row as Arrow, more as PG rows.\n")
        md.append("| client | rows | idle RSS | peak RSS | growth |")
        md.append("|---|---|---|---|---|")
        for name, runs in rss.items():
            for n, peak in runs:
                md.append(f"| {name} | {n:,} | {fmt_mib(peak.idle)} | {fmt_mib(peak.peak)} | {fmt_mib(peak.growth)} |")
        md.append(f"| control: PG binary, the same rows `order by bid` (the sort holds them all) | {n_out:,} | "
                  f"{fmt_mib(rss_sorted.idle)} | {fmt_mib(rss_sorted.peak)} | {fmt_mib(rss_sorted.growth)} |")
        md.append("")

        def verdict(ok: bool) -> str:
            return "met" if ok else "**missed**"

        md.append(f"Targets: PostgreSQL wire with binary results at least {PG_BINARY_ROWS_PER_S_TARGET / 1e6:.0f}M rows/s "
                  f"to psycopg: {fmt_rate(rates[best_pg_binary][0])} (`{best_pg_binary[2]}`), "
                  f"{verdict(rates[best_pg_binary][0] >= PG_BINARY_ROWS_PER_S_TARGET)}. "
                  f"HTTP Arrow at least {ARROW_ROWS_PER_S_TARGET / 1e6:.0f}M rows/s to pyarrow: "
                  f"{fmt_rate(rates[best_arrow][0])} ({'body streamed' if best_arrow[2] == 'stream' else 'whole body'}), "
                  f"{verdict(rates[best_arrow][0] >= ARROW_ROWS_PER_S_TARGET)}. "
                  f"Memory bounded (growth reading all {n_out:,} rows at most {RSS_GROWTH_RATIO_MAX:.0f}x the growth "
                  f"reading {n_small:,}, plus {fmt_mib(RSS_SLACK_BYTES)}): "
                  + ", ".join(f"{name} {verdict(ok)}" for name, ok in bounded.items()) + ".\n")
        text = "\n".join(md) + "\n"
        if a.out:
            benchutil.write_section(Path(a.out), SECTION, text, REGEN_LINE)
            log(f"wrote {SECTION!r} in {a.out}")
        else:
            print(text)
        # A benchmark whose systems gave different answers measured nothing
        # comparable: the report says so, and the run fails.
        if disagree:
            log("the systems disagreed: " + "; ".join(disagree))
            return 1
        if not out_agree:
            log(f"the result-streaming clients disagreed on rows or sum(bsize): {answers}")
            return 1
        return 0
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
