"""Differential tests: the same generated ticks in tickdb and in DuckDB (the
oracle), the same questions, the same answers. Covers ASOF JOIN, time
buckets, aggregates and latest-by, with the edge cases: equal timestamps on
both sides, trades before any quote, symbols on one side only, null prices,
empty tables, and rows arriving while a query runs.

Every test takes the `rng` fixture, which prints its seed
(TICKDB_SEED=N reproduces a run)."""

from __future__ import annotations

import io
import math
import threading

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.ipc
import pytest
import requests

T0 = 1_700_000_000_000_000_000
BOTH = ["AAPL", "MSFT", "IBM", "GOOG", "AMZN"]
ONLY_TRADES = "TONLY"
ONLY_QUOTES = "QONLY"


def gen(rng, trades: int = 1500, quotes: int = 3000):
    """Quotes have unique (sym, time); trades reuse quote times often (equal
    timestamps), start before the first quote of some symbols, and some
    have no price (null)."""
    qrows, used = [], set()
    while len(qrows) < quotes:
        sym = rng.choice(BOTH + [ONLY_QUOTES])
        t = T0 + rng.randrange(1, 20_000) * 1_000_000  # 1 ms grid over 20 s
        if (sym, t) in used:
            continue
        used.add((sym, t))
        bid = round(50 + rng.random() * 50, 4)
        qrows.append((t, sym, bid, round(bid + 0.01 * rng.randint(1, 5), 4), rng.randint(1, 900), rng.randint(1, 900)))
    qtimes = [q[0] for q in qrows]
    trows = []
    for i in range(trades):
        sym = rng.choice(BOTH + [ONLY_TRADES])
        # A third of trades exactly on some quote's time; a few before t0's quotes.
        if qtimes and rng.random() < 0.33:
            t = rng.choice(qtimes)
        else:
            t = T0 + rng.randrange(0, 20_500) * 1_000_000 + rng.randrange(0, 1_000_000)
        price = None if rng.random() < 0.05 else round(50 + rng.random() * 50, 4)
        trows.append((t, sym, price, i + 1))  # size doubles as a unique id
    return trows, qrows


def ilp(trows, qrows) -> str:
    out = []
    for t, s, b, a, bs, as_ in qrows:
        out.append(f"quote,sym={s} bid={b},ask={a},bsize={bs}i,asize={as_}i {t}")
    for t, s, p, n in trows:
        fields = f"price={p},size={n}i" if p is not None else f"size={n}i"
        out.append(f"trade,sym={s} {fields} {t}")
    return "\n".join(out) + "\n"


def write(db, text: str) -> None:
    r = requests.post(db.url + "/write", data=text, timeout=60)
    assert r.status_code == 204, r.text


def oracle(trows, qrows):
    con = duckdb.connect()
    tdf = pd.DataFrame(trows, columns=["time", "sym", "price", "size"])
    qdf = pd.DataFrame(qrows, columns=["time", "sym", "bid", "ask", "bsize", "asize"])
    tdf["time"] = pd.to_datetime(tdf["time"], unit="ns")
    qdf["time"] = pd.to_datetime(qdf["time"], unit="ns")
    tdf["price"] = tdf["price"].astype("float64")
    con.register("tdf", tdf)
    con.register("qdf", qdf)
    con.execute("create table trade as select * from tdf")
    con.execute("create table quote as select * from qdf")
    return con


def tick(db, sql: str) -> pd.DataFrame:
    r = requests.get(db.url + "/exec", params={"query": sql, "format": "arrow"}, timeout=60)
    assert r.status_code == 200, r.text
    table = pa.ipc.open_stream(io.BytesIO(r.content)).read_all()
    return normalize(table.to_pandas())


def duck(con, sql: str) -> pd.DataFrame:
    return normalize(con.execute(sql).df())


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as int64 ns (time zones and units aside), categoricals as
    strings, NaN for every null number."""
    out = pd.DataFrame()
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        if pd.api.types.is_datetime64_any_dtype(s):
            if getattr(s.dt, "tz", None) is not None:
                s = s.dt.tz_convert(None)
            s = s.astype("datetime64[ns]")
            # Exact integers (float64 would round nanoseconds); None for NaT.
            s = pd.Series([None if pd.isna(x) else int(x.value) for x in s], dtype=object)
        elif pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            s = s.astype("float64")
        out[c] = s.reset_index(drop=True)
    return out


def assert_same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert list(got.columns) == list(want.columns), (what, list(got.columns), list(want.columns))
    assert len(got) == len(want), (what, len(got), len(want))
    for c in got.columns:
        for i, (g, w) in enumerate(zip(got[c].tolist(), want[c].tolist())):
            gnull = g is None or (isinstance(g, float) and math.isnan(g))
            wnull = w is None or (isinstance(w, float) and math.isnan(w))
            if gnull or wnull:
                assert gnull and wnull, f"{what}: row {i} column {c}: tickdb {g!r}, duckdb {w!r}"
            elif isinstance(g, float):
                assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9), f"{what}: row {i} column {c}: tickdb {g!r}, duckdb {w!r}"
            else:
                assert g == w, f"{what}: row {i} column {c}: tickdb {g!r}, duckdb {w!r}"


@pytest.fixture
def loaded(cluster, rng):
    trows, qrows = gen(rng)
    db = cluster.up()
    write(db, ilp(trows, qrows))
    db.wait_rows("trade", len(trows))
    db.wait_rows("quote", len(qrows))
    return db, oracle(trows, qrows)


def test_asof_join_matches_duckdb(loaded):
    db, con = loaded
    got = tick(db, "select t.time, t.sym, t.size, t.price, q.time as qtime, q.bid, q.ask from trade t "
                   "asof join quote q match_condition (t.time >= q.time) on t.sym = q.sym "
                   "order by t.size")
    want = duck(con, "select t.time, t.sym, t.size, t.price, q.time as qtime, q.bid, q.ask from trade t "
                     "asof left join quote q on t.sym = q.sym and t.time >= q.time order by t.size")
    assert_same(got, want, "asof >=")
    # The edge cases were really exercised.
    assert (got["time"] == got["qtime"]).any(), "no trade at a quote's exact time"
    assert got["qtime"].isna().any(), "no trade without an earlier quote"
    assert (got["sym"] == ONLY_TRADES).any()


def test_strict_asof_and_aggregate_over_it(loaded):
    db, con = loaded
    got = tick(db, "select t.sym, count(*) as n, count(q.bid) as matched, avg(t.price - (q.bid + q.ask) / 2) as slip "
                   "from trade t asof join quote q match_condition (t.time > q.time) on t.sym = q.sym "
                   "group by t.sym order by t.sym")
    want = duck(con, "select t.sym, count(*) as n, count(q.bid) as matched, avg(t.price - (q.bid + q.ask) / 2) as slip "
                     "from trade t asof left join quote q on t.sym = q.sym and t.time > q.time "
                     "group by t.sym order by t.sym")
    assert_same(got, want, "asof > with aggregate")


def test_one_second_buckets_and_aggregates(loaded):
    db, con = loaded
    got = tick(db, "select time_bucket(interval '1 second', time) as b, sym, count(*) as n, count(price) as np, "
                   "min(price) as lo, max(price) as hi, sum(size) as vol, avg(price) as mean, "
                   "first(price order by time, size) as open, last(price order by time, size) as close, "
                   "vwap(price, size) as vw "
                   "from trade group by b, sym order by b, sym")
    want = duck(con, "select date_trunc('second', time) as b, sym, count(*) as n, count(price) as np, "
                     "min(price) as lo, max(price) as hi, sum(size) as vol, avg(price) as mean, "
                     "first(price order by time, size) as open, last(price order by time, size) as close, "
                     "sum(price * size) filter (where price is not null) / sum(size) filter (where price is not null) as vw "
                     "from trade group by b, sym order by b, sym")
    assert_same(got, want, "1 s buckets")
    got = tick(db, "select xbar(250000000, time) as b, count(*) as n from trade group by b order by b")
    want = duck(con, "select time_bucket(interval '250 milliseconds', time) as b, count(*) as n "
                     "from trade group by b order by b")
    assert_same(got, want, "xbar 250 ms")


def test_latest_by_symbol(loaded):
    db, con = loaded
    got = tick(db, "select sym, last_value(bid order by time) as bid, max(time) as t from quote group by sym order by sym")
    want = duck(con, "select sym, arg_max(bid, time) as bid, max(time) as t from quote group by sym order by sym")
    assert_same(got, want, "latest by sym")


def test_latest_shortcut_matches_duckdb(loaded):
    """latest('quote'), the symbol-index shortcut: each symbol's last row to
    arrive (DuckDB: arg_max over the insertion order)."""
    db, con = loaded
    got = tick(db, "select sym, time, bid, ask from latest('quote') order by sym")
    want = duck(con, "select sym, arg_max(time, rowid) as time, arg_max(bid, rowid) as bid, "
                     "arg_max(ask, rowid) as ask from quote group by sym order by sym")
    assert_same(got, want, "latest('quote')")


def test_empty_tables(cluster, rng):
    trows, _ = gen(rng, trades=200, quotes=0)
    db = cluster.up()
    assert db.scalar("select count(*) from trade") == 0
    got = tick(db, "select count(*) as n, sum(size) as v, vwap(price, size) as vw from trade")
    assert got["n"].tolist() == [0.0] and math.isnan(got["v"][0]) and math.isnan(got["vw"][0])
    assert len(tick(db, "select * from latest('quote')")) == 0
    # Trades but no quotes at all: every trade kept, with nulls.
    write(db, ilp(trows, []))
    db.wait_rows("trade", len(trows))
    got = tick(db, "select t.size, q.bid from trade t asof join quote q match_condition (t.time >= q.time) "
                   "on t.sym = q.sym order by t.size")
    assert len(got) == len(trows) and got["bid"].isna().all()


def test_rows_arriving_while_queries_run_see_whole_requests(cluster, rng):
    """A query reads a snapshot: with ingest going on, every answer counts
    whole requests (each request is one journaled update) and its sum is
    that of exactly those rows."""
    db = cluster.up()
    per_request = 250
    stop = threading.Event()
    sent = []

    def feed():
        s = requests.Session()
        k = 0
        while not stop.is_set() and k < 400:
            lines = [f"trade,sym={BOTH[i % 5]} price=1.0,size={k * per_request + i + 1}i {T0 + k * per_request + i}"
                     for i in range(per_request)]
            r = s.post(db.url + "/write", data="\n".join(lines) + "\n", timeout=30)
            assert r.status_code == 204
            k += 1
            sent.append(k)

    th = threading.Thread(target=feed, daemon=True)
    th.start()
    answers = 0
    try:
        while th.is_alive() and answers < 200:
            rows = db.exec("select count(*), sum(size) from trade")
            n, v = rows[0]
            v = v or 0
            assert n % per_request == 0, f"saw part of a request: {n} rows"
            assert v == n * (n + 1) // 2, f"sum {v} is not that of the first {n} rows"
            answers += 1
    finally:
        stop.set()
        th.join(timeout=60)
    assert answers > 5 and sent


def test_asof_tolerance_matches_duckdb(loaded):
    db, con = loaded
    got = tick(db, "select t.size, q.time as qtime, q.bid from trade t asof join quote q "
                   "match_condition (t.time >= q.time and t.time - q.time <= interval '5 milliseconds') "
                   "on t.sym = q.sym order by t.size")
    # DuckDB has no tolerance: take its unbounded match and drop the far ones.
    # In nanoseconds: DuckDB's intervals hold microseconds, so a difference
    # of 5.000306 ms would compare as 5 ms there.
    near = "epoch_ns(t.time) - epoch_ns(q.time) <= 5000000"
    want = duck(con, f"select t.size, case when {near} then q.time end as qtime, "
                     f"case when {near} then q.bid end as bid "
                     "from trade t asof left join quote q on t.sym = q.sym and t.time >= q.time order by t.size")
    assert_same(got, want, "asof with tolerance")
    unbounded = tick(db, "select count(q.bid) as n from trade t asof join quote q "
                         "match_condition (t.time >= q.time) on t.sym = q.sym")
    assert unbounded["n"][0] > got["bid"].notna().sum(), "the tolerance dropped nothing: the test data is too dense"


def test_long_query_does_not_delay_updates(cluster, rng):
    """While a query keeps both cores busy for seconds, writes are still
    acknowledged and applied: the rdb's row count (from /status, no query
    engine involved) follows each acknowledged write promptly."""
    import time

    db = cluster.up(extra=["--query-timeout-ms", "8000"])
    trows, qrows = gen(rng, trades=3000, quotes=3000)
    write(db, ilp(trows, qrows))
    db.wait_rows("trade", len(trows))
    result = {}

    def long_query():
        t = time.monotonic()
        r = requests.get(db.url + "/exec", params={"query": "select count(*) from trade a, trade b, quote q "
                                                             "where a.size + b.size > q.bsize"}, timeout=60)
        result["status"], result["seconds"] = r.status_code, time.monotonic() - t

    th = threading.Thread(target=long_query, daemon=True)
    th.start()
    time.sleep(0.3)
    lags = []
    n = len(trows)
    for k in range(10):
        if not th.is_alive():
            break
        line = f"trade,sym=LIVE price=1.0,size={k + 1}i {T0 + 10**12 + k}\n"
        t = time.monotonic()
        r = requests.post(db.url + "/write", data=line, timeout=30)
        assert r.status_code == 204, r.text
        n += 1
        while db.status()["tables"]["trade"]["rows"] < n:
            assert time.monotonic() - t < 5, "an update waited more than 5 s behind a running query"
            time.sleep(0.005)
        lags.append(time.monotonic() - t)
        time.sleep(0.1)
    th.join(timeout=60)
    assert len(lags) >= 3, f"the long query ended too soon to overlap ({result})"
    assert result.get("seconds", 0) > max(lags), (result, lags)
    print(f"long query {result}; write-to-visible lags during it: {[round(x, 3) for x in lags]}")


def test_filtered_asof_join_matches_duckdb(loaded):
    """Filters on the left side go below the join (and, through the join
    key, into the right scan); a filter on the right side stays above it."""
    db, con = loaded
    where = "where t.sym in ('IBM', 'MSFT') and (q.bid > 70 or q.bid is null)"
    got = tick(db, "select t.size, t.sym, q.bid from trade t asof join quote q "
                   f"match_condition (t.time >= q.time) on t.sym = q.sym {where} order by t.size")
    want = duck(con, "select t.size, t.sym, q.bid from trade t asof left join quote q "
                     f"on t.sym = q.sym and t.time >= q.time {where} order by t.size")
    assert_same(got, want, "filtered asof")
    assert len(got) > 0
