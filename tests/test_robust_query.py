"""No query or query client can crash the node, stall ingest or exhaust its
memory, and no query answers from half-loaded tables. Each test reproduces
what a hostile or careless user did to `tickdb up` (the "Robustness" issue)
and checks the node's answer now: a clear error, the node still serving
everyone else."""

from __future__ import annotations

import socket
import statistics
import threading
import time

import psycopg
import pytest
import requests

from harness import free_port

T0 = 1_700_000_000_000_000_000
SYMS = ["AAPL", "MSFT", "IBM", "GOOG", "TSLA"]


def write(db, lines: list[str]) -> None:
    r = requests.post(db.url + "/write", data="\n".join(lines) + "\n", timeout=60)
    assert r.status_code == 204, r.text


def load_trades(db, n: int, per_request: int = 50_000, rows_per_line_group: int = 1) -> None:
    for start in range(0, n, per_request):
        write(db, [f"trade,sym={SYMS[i % 5]} price={100 + i % 97 * 0.25},size={i % 13 + 1}i {T0 + i}"
                   for i in range(start, min(n, start + per_request))])
    db.wait_rows("trade", n, timeout=120)


def pg(db, **kw):
    args = dict(host="127.0.0.1", port=db.pg_port, user="tickdb", password="tickdb", dbname="tickdb",
                connect_timeout=10, autocommit=True)
    args.update(kw)
    return psycopg.connect(**args)


def rss(db) -> int:
    return db.status()["process"]["rss_bytes"]


def timed_write(db, i: int) -> float:
    t = time.monotonic()
    write(db, [f"trade,sym=PROBE price=1.0,size={i}i {T0 + 10**12 + i}"])
    return time.monotonic() - t


def chain(op: str, term: str, n: int) -> str:
    return op.join([term] * n)


def test_deep_expressions_never_crash_the_node(cluster):
    """`select 1+1+…+1` with 3,000 terms (about 4 KB) aborted the whole
    process with a stack overflow, over /exec and psql alike."""
    db = cluster.up()
    load_trades(db, 100)
    r = requests.get(db.url + "/exec", params={"query": "select " + chain("+", "1", 3000)}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["dataset"] == [[3000]]
    with pg(db) as c:
        sql = "select count(*) from trade where " + chain(" or ", "price = 1", 3000)
        assert c.execute(sql).fetchone() == (0,)
        # Past the nesting limit: refused with SQLSTATE 54001, not a crash.
        with pytest.raises(psycopg.errors.StatementTooComplex) as e:
            c.execute("select " + chain("+", "1", 10_000))
        assert "levels deep" in str(e.value)
    r = requests.get(db.url + "/exec", params={"query": "select " + chain("+", "1", 10_000)}, timeout=60)
    assert r.status_code == 400 and r.json()["code"] == "too_complex", r.text
    # Over the text limit (1 MiB): refused before it is parsed.
    r = requests.post(db.url + "/exec", data="select " + chain("+", "1", 540_000), timeout=60,
                      headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "over the limit" in r.json()["message"], r.text[:300]
    # A POSTed statement in a form works like a GET.
    r = requests.post(db.url + "/exec", data={"query": "select count(*) from trade"}, timeout=60)
    assert r.status_code == 200 and r.json()["dataset"] == [[100]], r.text
    # The node and its ingest are still there.
    write(db, ["trade,sym=AFTER price=1.0,size=1i 1"])
    db.wait_rows("trade", 101)


def test_allocating_functions_are_held_to_the_memory_limit(cluster):
    """`select repeat('a', 2000000000)` ran 118 s past the 30 s timeout and
    peaked at 13.7 GB RSS past the 1 GiB memory limit; a concurrent write
    waited 22 s."""
    db = cluster.up(extra=["--query-memory-bytes", str(256 << 20)])
    load_trades(db, 1000)
    before = rss(db)
    for sql in ["select repeat('a', 2000000000)",
                "select lpad('x', 1000000000)",
                "select repeat(sym, 10000000) from trade",
                "select length(x || x || x || x) from (select repeat('a', 100000000) as x)"]:
        t = time.monotonic()
        r = requests.get(db.url + "/exec", params={"query": sql}, timeout=60)
        assert r.status_code == 413 and r.json()["code"] == "resources_exhausted", (sql, r.text)
        assert "query memory limit" in r.json()["message"]
        assert time.monotonic() - t < 10, sql
    assert rss(db) - before < 600 << 20, (before, rss(db))
    with pg(db) as c:
        with pytest.raises(psycopg.errors.OutOfMemory):
            c.execute("select repeat('a', 2000000000)")
    # Writes are acknowledged promptly meanwhile.
    assert timed_write(db, 1) < 2.0


def test_query_load_does_not_stall_ingest(cluster):
    """20 concurrent self-joins of a 4M-row table made /write take 5.6 s,
    /health 6.0 s and psql `select 1` 2.4 s; there was no bound on
    concurrent queries."""
    db = cluster.up(extra=["--query-concurrency", "2", "--query-queue-max", "6", "--query-timeout-ms", "8000"])
    load_trades(db, 100_000)
    quiet = [timed_write(db, i) for i in range(20)]
    heavy = "select count(*) from trade a join trade b on a.sym = b.sym and a.size = b.size"
    codes: list[int] = []
    lock = threading.Lock()

    def query():
        try:
            r = requests.get(db.url + "/exec", params={"query": heavy}, timeout=60)
            with lock:
                codes.append(r.status_code)
                if r.status_code == 503:
                    assert r.json()["code"] == "busy", r.text
        except requests.RequestException:
            with lock:
                codes.append(-1)

    threads = [threading.Thread(target=query) for _ in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    loaded = []
    health = []
    for i in range(30):
        loaded.append(timed_write(db, 100 + i))
        t = time.monotonic()
        assert requests.get(db.url + "/health", timeout=30).status_code == 200
        health.append(time.monotonic() - t)
        time.sleep(0.05)
    for t in threads:
        t.join()
    print(f"write s quiet p50 {statistics.median(quiet):.4f} max {max(quiet):.4f}; "
          f"under queries p50 {statistics.median(loaded):.4f} max {max(loaded):.4f}; "
          f"health max {max(health):.4f}; query codes {sorted(codes)}")
    # Beyond 2 running and 6 waiting, queries are refused at once as busy.
    assert codes.count(503) >= 20 - 8 - 2, codes
    assert -1 not in codes
    # Generous bounds (2 cores shared with the client and 20 queries); the
    # latency figures themselves are a benchmark (tickdb bench robustness).
    assert statistics.median(loaded) < 1.0 and max(loaded) < 3.0, loaded
    assert max(health) < 3.0, health


@pytest.mark.parametrize("fmt", ["json", "csv", "arrow"])
def test_results_stream_in_bounded_memory(cluster, fmt):
    """A 20M-row result peaked at 6.25 GB RSS in JSON (CSV 1.1 GB, Arrow
    0.73 GB) and RSS stayed at 5.5 GB afterwards: results were built whole."""
    db = cluster.up()
    n = 600_000
    load_trades(db, n, per_request=100_000)
    base = rss(db)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak.append(rss(db))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    size = 0
    lines = 0
    with requests.get(db.url + "/exec", params={"query": "select * from trade", "format": fmt},
                      stream=True, timeout=120) as r:
        assert r.status_code == 200
        for chunk in r.iter_content(1 << 16):
            size += len(chunk)
            lines += chunk.count(b"\n")
            # A slow reader: the query waits for it instead of piling up.
            time.sleep(0.0005)
    done.set()
    sampler.join()
    grew = max(peak) - base
    print(f"{fmt}: {size} bytes streamed, RSS grew by at most {grew} bytes")
    # Built whole, the body alone would be in memory (and, for JSON, several
    # times more as values); streamed, a few batches are.
    assert grew < size / 3, (grew, size)
    if fmt == "csv":
        assert lines == n + 1


def test_an_error_after_the_first_rows_aborts_the_response(cluster):
    """A client must never take part of an answer for all of it."""
    db = cluster.up(extra=["--query-timeout-ms", "1500"])
    load_trades(db, 20_000)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        with requests.get(db.url + "/exec", params={"query": "select a.price from trade a cross join trade b"},
                          stream=True, timeout=60) as r:
            assert r.status_code == 200
            for _ in r.iter_content(1 << 16):
                pass


def test_no_answer_from_half_loaded_tables(cluster):
    """While the journal replayed after a restart, /health said 503 but
    /exec and PostgreSQL answered from the partly replayed tables: count(*)
    of 3,000,000 rows answered 0, 158,100, 1,200,000 and 2,292,700."""
    db = cluster.up()
    n = 400_000
    # Many small updates: a replay long enough to look inside.
    for start in range(0, n, 20_000):
        write(db, [f"trade,sym={SYMS[i % 5]} price=1.5,size=1i {T0 + i}" for i in range(start, start + 20_000)])
    db.wait_rows("trade", n)
    db.terminate()
    again = cluster.up(data_dir=db.data_dir, start=False)
    again.start(wait_ready=False)
    answers = {"not_ready": 0, "full": 0}
    progress_seen = False
    pg_refused = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            r = requests.get(again.url + "/exec", params={"query": "select count(*) from trade"}, timeout=10)
        except requests.ConnectionError:
            time.sleep(0.01)
            continue
        if r.status_code == 503:
            body = r.json()
            assert body["code"] == "not_ready", body
            answers["not_ready"] += 1
            progress_seen |= body.get("total", 0) > 0 and " of " in body["message"]
            if not pg_refused:
                try:
                    with pg(again) as c:
                        c.execute("select count(*) from trade")
                except psycopg.errors.CannotConnectNow as e:
                    pg_refused = "replaying" in str(e) or "starting" in str(e) or "restoring" in str(e)
                except psycopg.OperationalError:
                    pass
            continue
        assert r.status_code == 200, r.text
        got = r.json()["dataset"][0][0]
        assert got == n, f"a partial answer: {got} of {n}"
        answers["full"] += 1
        if answers["full"] >= 3:
            break
    print(answers, "progress seen:", progress_seen, "pg refused:", pg_refused)
    assert answers["full"] >= 3
    assert answers["not_ready"] > 0, "the replay was too short to look inside"


def test_pg_cancel_and_statement_timeout(cluster):
    """psycopg's cancel() did nothing, and `set statement_timeout = 100` was
    accepted but not applied."""
    db = cluster.up()
    load_trades(db, 30_000)
    slow = "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price"
    with pg(db) as c:
        c.execute("set statement_timeout = 200")
        assert c.execute("show statement_timeout").fetchone() is not None
        t = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute(slow)
        assert time.monotonic() - t < 3
        c.execute("set statement_timeout = 0")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("set statement_timeout = 'soon'")
    with pg(db) as c:
        timer = threading.Timer(0.5, c.cancel)
        timer.start()
        t = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute(slow)
        timer.join()
        assert time.monotonic() - t < 5
        # The connection is usable afterwards.
        assert c.execute("select 1").fetchone() == (1,)


def test_pg_cancel_reaches_its_query_while_queries_hold_every_query_thread(cluster):
    """A cancel request was served on the query threads, so with every one
    busy it waited for the query it was meant to stop (4 s and more for a
    nested-loop join, until the 30 s deadline for a cross join)."""
    db = cluster.up()
    load_trades(db, 30_000)
    slow = "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price"
    conns = [pg(db) for _ in range(2)]  # as many queries as the node has query threads
    # Each session has a process id of its own (password sessions all had 100000).
    assert conns[0].info.backend_pid != conns[1].info.backend_pid
    outcomes: list = [None, None]

    def run(i):
        t = time.monotonic()
        try:
            conns[i].execute(slow)
            outcomes[i] = ("finished", time.monotonic() - t)
        except psycopg.errors.QueryCanceled:
            outcomes[i] = ("cancelled", time.monotonic() - t)
        except Exception as e:  # noqa: BLE001 - reported below
            outcomes[i] = (repr(e), time.monotonic() - t)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for th in threads:
            th.start()
        # Both queries hold a query thread before the cancels. Polled, not
        # a fixed sleep: on a loaded machine the second session's statement
        # took over a second to be admitted.
        deadline = time.monotonic() + 15
        while db.status()["queries"]["running"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.status()["queries"]["running"] == 2, db.status()["queries"]
        for i, c in enumerate(conns):
            t = time.monotonic()
            c.cancel()
            threads[i].join(timeout=30)
            waited = time.monotonic() - t
            assert outcomes[i] is not None and outcomes[i][0] == "cancelled", outcomes
            assert waited < 3, f"query {i} stopped {waited:.2f} s after its cancel"
        # Both connections serve again.
        for c in conns:
            assert c.execute("select 1").fetchone() == (1,)
    finally:
        for th in threads:
            th.join(timeout=60)
        for c in conns:
            c.close()


def test_pg_limits(cluster):
    """PostgreSQL messages had no size limit (a 50 MB literal was
    accepted), and idle or half-open sessions were held forever."""
    db = cluster.up(extra=["--pg-message-bytes-max", str(1 << 20), "--pg-idle-timeout-s", "1",
                           "--pg-startup-timeout-s", "1", "--pg-connections-max", "3"])
    with pg(db) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute("select length('" + "x" * (50 << 20) + "')")
        assert "message too large" in str(e.value) or e.value.sqlstate == "54000", e.value
    # A session idle longer than the timeout is ended with 57P05.
    with pg(db) as c:
        c.execute("select 1")
        time.sleep(2.5)
        with pytest.raises(psycopg.OperationalError):
            c.execute("select 1")
    # A client that connects and says nothing is dropped after the startup timeout.
    s = socket.create_connection(("127.0.0.1", db.pg_port), timeout=10)
    t = time.monotonic()
    assert s.recv(1024) == b""
    assert time.monotonic() - t < 5
    s.close()
    # Over the connection limit: "too many clients" (53300), others unaffected.
    held = [pg(db) for _ in range(3)]
    with pytest.raises(psycopg.OperationalError) as e:
        pg(db)
    assert "too many clients" in str(e.value), e.value
    for c in held:
        assert c.execute("select 1").fetchone() == (1,)
        c.close()
    # A float with a fraction for an integer parameter names its real value
    # (it used to say "FLOAT value 1" for 1.5).
    load_trades(db, 10)
    with pg(db) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            c.execute("select count(*) from trade where size = %s", (1.5,))
        assert "1.5" in str(e.value) and "$1" in str(e.value), e.value
        assert c.execute("select count(*) from trade where size = %s", (1,)).fetchone()[0] >= 0


def test_http_limits(cluster):
    """HTTP held idle and slowloris connections forever and had no bound on
    connections; a gzip body got its raw bytes echoed back in the 400."""
    db = cluster.up(extra=["--http-header-timeout-s", "1", "--http-body-timeout-s", "1",
                           "--http-connections-max", "8"])
    # Slowloris: a head that never ends is cut off.
    s = socket.create_connection(("127.0.0.1", db.http_port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    t = time.monotonic()
    while s.recv(1024):
        pass
    assert time.monotonic() - t < 5
    s.close()
    # A body that never arrives: 408.
    s = socket.create_connection(("127.0.0.1", db.http_port), timeout=10)
    s.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\ntrade")
    reply = s.recv(4096)
    assert b" 408 " in reply.split(b"\r\n")[0], reply
    s.close()
    # Over the connection bound: a 503 naming the flag, others unaffected.
    idle = [socket.create_connection(("127.0.0.1", db.http_port), timeout=10) for _ in range(8)]
    time.sleep(0.2)
    extra = socket.create_connection(("127.0.0.1", db.http_port), timeout=10)
    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    reply = extra.recv(4096)
    assert b" 503 " in reply.split(b"\r\n")[0] and b"--http-connections-max" in reply, reply
    for x in idle + [extra]:
        x.close()
    time.sleep(1.5)
    assert requests.get(db.url + "/health", timeout=10).status_code == 200
    # A compressed body is refused as such, without quoting its bytes.
    import gzip
    body = gzip.compress(b"trade,sym=A price=1.0,size=1i 1\n")
    r = requests.post(db.url + "/write", data=body, headers={"Content-Encoding": "gzip"}, timeout=10)
    assert r.status_code == 415 and "Content-Encoding" in r.json()["message"], r.text
    r = requests.post(db.url + "/write", data=body, timeout=10)
    assert r.status_code == 400
    assert "\\u001f" not in r.text and "\x1f" not in r.text, r.text


def test_a_remote_rdb_answers_only_once_caught_up(cluster):
    """The same rule for an rdb catching up with its tp: no partial count."""
    tp = cluster.tp()
    n = 300_000
    for start in range(0, n, 10_000):
        write(tp, [f"trade,sym={SYMS[i % 5]} price=1.5,size=1i {T0 + i}" for i in range(start, start + 10_000)])
    rdb = cluster.rdb(tp.tp_port, start=False)
    rdb.start(wait_ready=False)
    seen = {"not_ready": 0, "full": 0}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and seen["full"] < 3:
        try:
            r = requests.get(rdb.url + "/exec", params={"query": "select count(*) from trade"}, timeout=10)
        except requests.ConnectionError:
            time.sleep(0.01)
            continue
        if r.status_code == 503:
            assert r.json()["code"] == "not_ready", r.text
            seen["not_ready"] += 1
            continue
        assert r.status_code == 200, r.text
        assert r.json()["dataset"][0][0] == n, f"a partial answer: {r.text}"
        seen["full"] += 1
    print(seen)
    assert seen["full"] == 3
    st = rdb.status()
    assert st["lifecycle"]["phase"] == "ready" and st["role"] == "rdb", st["lifecycle"]


def test_pg_results_stream_in_bounded_memory(cluster):
    """The same bound on PostgreSQL wire: rows go out as batches are
    computed, a slow reader holds its own query back."""
    db = cluster.up()
    n = 600_000
    load_trades(db, n, per_request=100_000)
    base = rss(db)
    peak = base
    got = 0
    with pg(db) as c:
        with c.cursor() as cur:
            for i, _row in enumerate(cur.stream("select * from trade")):
                got += 1
                if i % 20_000 == 0:
                    peak = max(peak, rss(db))
                    time.sleep(0.02)
    print(f"pg: {got} rows streamed, RSS grew by at most {peak - base} bytes")
    assert got == n
    # The rows as text are ~40 MB and as Arrow more; streamed, a few
    # batches are held.
    assert peak - base < 64 << 20, peak - base


def test_status_says_how_the_c_allocator_is_tuned(cluster, monkeypatch, tmp_path):
    """Every tickdb process sets glibc malloc's thresholds as it starts
    (docs/robustness.md, "The C allocator"); /status says so, and a
    GLIBC_TUNABLES that sets a threshold is left to win."""
    db = cluster.up()
    assert db.status()["process"]["malloc"] == {
        "state": "tuned", "mmap_threshold_bytes": 32 << 20, "trim_threshold_bytes": 64 << 20}
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576")
    other = cluster.up(data_dir=tmp_path / "other")
    assert other.status()["process"]["malloc"] == {
        "state": "left to GLIBC_TUNABLES", "mmap_threshold_bytes": None, "trim_threshold_bytes": None}
