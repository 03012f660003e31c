"""The PostgreSQL wire front with clients nobody here wrote: psql (\\dt, \\d,
queries), psycopg 3 (server-side parameters, text and binary results),
pandas.read_sql; password authentication on by default; errors that name
what was wrong; a read-only server."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import psycopg
import pytest
import requests

SYMS = ["AAPL", "MSFT", "IBM"]
PASSWORD = "tickdb"


def load(db, rng, trades: int = 300, quotes: int = 600) -> None:
    lines = []
    t0 = 1_700_000_000_000_000_000
    for i in range(quotes):
        s = rng.choice(SYMS)
        bid = round(100 + rng.random(), 4)
        lines.append(f"quote,sym={s} bid={bid},ask={bid + 0.01},bsize={rng.randint(1, 9)}i,asize=2i {t0 + i * 1000}")
    for i in range(trades):
        s = rng.choice(SYMS)
        lines.append(f"trade,sym={s} price={round(100 + rng.random(), 4)},size={rng.randint(1, 500)}i {t0 + i * 2000 + 1}")
    r = requests.post(db.url + "/write", data="\n".join(lines) + "\n", timeout=30)
    assert r.status_code == 204, r.text
    db.wait_rows("trade", trades)
    db.wait_rows("quote", quotes)


def connect(db, **kw):
    args = dict(host="127.0.0.1", port=db.pg_port, user="tickdb", password=PASSWORD, dbname="tickdb", connect_timeout=10)
    args.update(kw)
    return psycopg.connect(**args, autocommit=True)


def psql(db, *args: str, password: str | None = PASSWORD) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PGPASSWORD", None)
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        ["psql", "-X", "-h", "127.0.0.1", "-p", str(db.pg_port), "-U", "tickdb", "-d", "tickdb", "-v", "ON_ERROR_STOP=1", *args],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def db(cluster, rng):
    d = cluster.up()
    load(d, rng)
    return d


def test_psql_lists_and_describes_tables_and_queries(db):
    r = psql(db, "-c", r"\dt")
    assert r.returncode == 0, r.stderr
    assert "trade" in r.stdout and "quote" in r.stdout, r.stdout
    r = psql(db, "-c", r"\d trade")
    assert r.returncode == 0, r.stderr
    for col in ("time", "sym", "price", "size"):
        assert col in r.stdout, r.stdout
    r = psql(db, "-A", "-t", "-c", "select count(*) from trade")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(db.scalar("select count(*) from trade"))


def test_password_is_required_by_default(db):
    r = psql(db, "-c", "select 1", password="wrong")
    assert r.returncode != 0
    assert "password" in r.stderr.lower(), r.stderr
    with pytest.raises(psycopg.OperationalError):
        connect(db, password="wrong")
    with pytest.raises(psycopg.OperationalError):
        connect(db, user="nobody")
    # The server keeps serving after refused logins.
    with connect(db) as c:
        assert c.execute("select 1").fetchone()[0] == 1


def test_credentials_by_flag_and_no_auth_only_when_asked(cluster, rng):
    d = cluster.up(extra=["--pg-user", "ops", "--pg-password", "s3cret"])
    with psycopg.connect(host="127.0.0.1", port=d.pg_port, user="ops", password="s3cret", dbname="x", autocommit=True) as c:
        assert c.execute("select 41 + 1").fetchone()[0] == 42
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=d.pg_port, user="tickdb", password="tickdb", dbname="x")
    d.terminate()
    d2 = cluster.up(data_dir=d.data_dir.parent / "data2", extra=["--pg-no-auth"])
    with psycopg.connect(host="127.0.0.1", port=d2.pg_port, user="anyone", dbname="x", autocommit=True) as c:
        assert c.execute("select 1").fetchone()[0] == 1


def test_psycopg_server_side_parameters_match_http(db):
    want = db.exec("select sym, count(*) as n, sum(size) as v from trade where sym = 'MSFT' group by sym")
    with connect(db) as c:
        # psycopg 3 binds %s server-side ($1 in an extended-protocol Parse).
        got = c.execute("select sym, count(*) as n, sum(size) as v from trade where sym = %s group by sym", ("MSFT",)).fetchall()
        assert [list(r) for r in got] == want
        # The same statement with binary results.
        cur = c.cursor(binary=True)
        got = cur.execute("select sym, count(*) as n, sum(size) as v from trade where sym = %s group by sym", ("MSFT",)).fetchall()
        assert [list(r) for r in got] == want
        # A timestamp and a float parameter.
        n = c.execute("select count(*) from trade where price > %s and size >= %s", (100.5, 10)).fetchone()[0]
        assert n == db.scalar("select count(*) from trade where price > 100.5 and size >= 10")


@pytest.mark.filterwarnings("ignore:pandas only supports SQLAlchemy")
def test_pandas_read_sql(db):
    with connect(db) as c:
        df = pd.read_sql("select sym, price, size from trade order by time", c)
    assert list(df.columns) == ["sym", "price", "size"]
    assert len(df) == db.scalar("select count(*) from trade")
    assert df["size"].sum() == db.scalar("select sum(size) from trade")


def test_asof_join_over_pg_matches_http(db):
    q = ("select t.time, t.sym, t.price, q.bid from trade t "
         "asof join quote q match_condition (t.time >= q.time) on t.sym = q.sym "
         "where t.sym = 'IBM' order by t.time")
    want = db.exec(q)
    with connect(db) as c:
        got = c.execute(q).fetchall()
    assert len(got) == len(want) > 0
    assert [(r[1], r[2], r[3]) for r in got] == [(w[1], w[2], w[3]) for w in want]


def test_bad_queries_get_clear_errors_and_the_server_keeps_serving(db):
    with connect(db) as c:
        with pytest.raises(psycopg.errors.UndefinedColumn) as e:
            c.execute("select pricee from trade")
        assert "pricee" in str(e.value) and "price" in str(e.value)
        with pytest.raises(psycopg.errors.UndefinedTable) as e:
            c.execute("select * from trades")
        assert "trades" in str(e.value)
        with pytest.raises(psycopg.errors.SyntaxError) as e:
            c.execute("selec price from trade")
        assert "line 1" in str(e.value).lower() or "Line: 1" in str(e.value), str(e.value)
        # Read-only: no DDL or DML, nothing changes.
        with pytest.raises(psycopg.Error):
            c.execute("create table x (a int)")
        with pytest.raises(psycopg.Error):
            c.execute("insert into trade (sym) values ('X')")
        assert c.execute("select count(*) from trade").fetchone()[0] == db.scalar("select count(*) from trade")
    r = psql(db, "-c", "select nosuch from quote")
    assert r.returncode != 0 and "nosuch" in r.stderr, r.stderr


def test_query_timeout_over_pg(cluster, rng):
    d = cluster.up(extra=["--query-timeout-ms", "300"])
    load(d, rng, trades=2000, quotes=2000)
    with connect(d) as c:
        with pytest.raises(psycopg.errors.QueryCanceled) as e:
            # A cross join big enough to run well past 300 ms.
            c.execute("select count(*) from trade a, trade b, quote q where a.size + b.size > q.bsize")
        assert "timed out" in str(e.value) or "deadline" in str(e.value), str(e.value)
        assert c.execute("select count(*) from trade").fetchone()[0] == 2000
    r = requests.get(d.url + "/exec", params={"query": "select count(*) from trade a, trade b, quote q "
                                                       "where a.size + b.size > q.bsize"}, timeout=30)
    assert r.status_code == 408 and r.json()["code"] == "timeout", r.text


def test_memory_limit_over_http_and_pg(cluster, rng):
    """A query over the memory limit is stopped with a clear error over each
    protocol, and the server goes on answering."""
    d = cluster.up(extra=["--query-memory-bytes", str(256 * 1024)])
    load(d, rng, trades=30000, quotes=100)
    big_sort = "select * from trade order by price, time"
    r = requests.get(d.url + "/exec", params={"query": big_sort}, timeout=30)
    assert r.status_code == 413 and r.json()["code"] == "resources_exhausted", r.text
    with connect(d) as c:
        with pytest.raises(psycopg.errors.OutOfMemory) as e:
            c.execute(big_sort)
        assert "memory" in str(e.value).lower(), str(e.value)
        assert c.execute("select count(*) from trade").fetchone()[0] == 30000
    assert d.scalar("select count(*) from trade") == 30000
