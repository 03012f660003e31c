"""Chaos: while a feed writes at the seed's 48,000 rows/s, hostile queries
(statements thousands of terms deep, functions asked for gigabytes, cross
joins, 50 concurrent slow queries, cancels) arrive over HTTP and psql's
protocol, and slow and idle clients sit on every port. The node must stay
up and keep every acknowledged row, exactly once. Acknowledgement latency
is printed, not asserted: it is a benchmark figure (`tickdb bench
robustness`, docs/benchmarks.md)."""

from __future__ import annotations

import json
import socket
import statistics
import struct
import threading
import time

import psycopg
import requests

from harness import run

T0 = 1_700_000_000_000_000_000
FEED_SYM = "CHAOS"
ROWS_PER_REQUEST = 480
WRITERS = 4
REQUESTS_PER_S_PER_WRITER = 25  # 4 × 25 × 480 = 48,000 rows/s
SLOW_QUERIES = 50
IDLE_PER_PORT = 100
STORM_S = 15


class Feed:
    def __init__(self, url: str):
        self.url = url
        self.lock = threading.Lock()
        self.next_id = 1
        self.acked: list[tuple[int, int]] = []
        self.latency: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def writer(self, offset: float) -> None:
        s = requests.Session()
        every = 1.0 / REQUESTS_PER_S_PER_WRITER
        nxt = time.monotonic() + offset
        while not self.stop.is_set():
            now = time.monotonic()
            if now < nxt:
                time.sleep(nxt - now)
            nxt += every
            with self.lock:
                first = self.next_id
                self.next_id += ROWS_PER_REQUEST
            body = "".join(f"trade,sym={FEED_SYM} price=1.5,size={first + i}i {T0 + first + i}\n"
                           for i in range(ROWS_PER_REQUEST))
            t = time.monotonic()
            try:
                r = s.post(self.url + "/write", data=body, timeout=60)
                ok = r.status_code == 204
            except requests.RequestException:
                ok = False
                s = requests.Session()
            took = time.monotonic() - t
            with self.lock:
                if ok:
                    self.acked.append((first, first + ROWS_PER_REQUEST))
                    self.latency.append(took)
                else:
                    self.errors += 1

    def take_latencies(self) -> list[float]:
        with self.lock:
            out, self.latency = self.latency, []
            return out


def summary(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    if not xs:
        return f"{name}: no acknowledgements"
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return f"{name}: {len(xs)} acks, p50 {statistics.median(xs) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms"


def answered(db, params: dict) -> requests.Response:
    """GET /exec once the storm is over. Its last hostile queries may still
    hold the query slots for up to their 3 s timeout (busy, 503) or starve
    this one past it (408): ask again, for up to a minute, until answered."""
    deadline = time.monotonic() + 60
    while True:
        r = requests.get(db.url + "/exec", params=params, timeout=120)
        if r.status_code not in (408, 503) or time.monotonic() > deadline:
            return r
        time.sleep(0.5)


def subscribe_frame() -> bytes:
    body = struct.pack("<QII", 1, 0, 0)
    return struct.pack("<IB", len(body), 1) + body


def test_chaos_keeps_the_node_up_and_every_acknowledged_row(cluster, rng):
    db = cluster.up(extra=["--query-timeout-ms", "3000", "--pg-idle-timeout-s", "0"])
    pre = [f"trade,sym=S{i % 50} price={100 + i % 97 * 0.25},size={i % 13 + 1}i {T0 - 10**12 + i}"
           for i in range(50_000)]
    for k in range(0, len(pre), 25_000):
        assert requests.post(db.url + "/write", data="\n".join(pre[k:k + 25_000]) + "\n", timeout=60).status_code == 204
    db.wait_rows("trade", len(pre))

    feed = Feed(db.url)
    writers = [threading.Thread(target=feed.writer, args=(w / (WRITERS * REQUESTS_PER_S_PER_WRITER),))
               for w in range(WRITERS)]
    for w in writers:
        w.start()
    time.sleep(5)
    quiet = feed.take_latencies()

    stop = threading.Event()
    outcomes: dict[str, int] = {}
    olock = threading.Lock()

    def tally(k: str) -> None:
        with olock:
            outcomes[k] = outcomes.get(k, 0) + 1

    def http_loop(sql: str, slow: bool = False) -> None:
        while not stop.is_set():
            try:
                with requests.get(db.url + "/exec", params={"query": sql}, stream=True, timeout=30) as r:
                    code = str(r.status_code)
                    if r.status_code != 200:
                        code += " " + r.json().get("code", "?")
                    for _ in r.iter_content(1 << 14):
                        if slow:
                            time.sleep(0.01)
                        if stop.is_set():
                            break
                tally("http " + code)
            except requests.RequestException as e:
                tally("http aborted: " + type(e).__name__)

    def pg_loop(sql: str, timeout_ms: int | None = None, cancel_after: float | None = None) -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(host="127.0.0.1", port=db.pg_port, user="tickdb", password="tickdb",
                                     dbname="tickdb", autocommit=True, connect_timeout=10) as c:
                    if timeout_ms:
                        c.execute(f"set statement_timeout = {timeout_ms}")
                    timer = threading.Timer(cancel_after, c.cancel) if cancel_after else None
                    if timer:
                        timer.start()
                    try:
                        c.execute(sql).fetchall()
                        tally("pg ok")
                    finally:
                        if timer:
                            timer.cancel()
            except psycopg.Error as e:
                tally(f"pg {e.sqlstate or type(e).__name__}")

    deep = "select " + "+".join(["1"] * 3000)
    cross = "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price"
    storm = [
        threading.Thread(target=http_loop, args=(deep,)),
        threading.Thread(target=http_loop, args=("select repeat('a', 2000000000)",)),
        threading.Thread(target=http_loop, args=("select count(*) from trade a cross join trade b",)),
        threading.Thread(target=http_loop, args=("select count(*) from trade a join trade b on a.sym = b.sym",)),
        threading.Thread(target=http_loop, args=("select * from trade", True)),
        threading.Thread(target=pg_loop, args=("select count(*) from trade where " + " or ".join(["price = 1"] * 3000),)),
        threading.Thread(target=pg_loop, args=("select repeat('a', 2000000000)",)),
        threading.Thread(target=pg_loop, args=(cross, 500)),
        threading.Thread(target=pg_loop, args=(cross, None, 0.3)),
    ] + [threading.Thread(target=http_loop, args=(cross,)) for _ in range(SLOW_QUERIES)]
    for t in storm:
        t.start()

    held: list[socket.socket] = []
    for port in (db.http_port, db.ilp_port, db.tp_port, db.pg_port):
        for _ in range(IDLE_PER_PORT):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", db.tp_port), timeout=10)
        s.sendall(subscribe_frame())  # and never read
        held.append(s)

    def trickle(port: int, data: bytes) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            for b in data:
                if stop.is_set():
                    break
                s.sendall(bytes([b]))
                time.sleep(0.5)
            s.close()
        except OSError:
            pass

    trickles = [threading.Thread(target=trickle, args=(p, d)) for p, d in [
        (db.http_port, b"GET /health HTTP/1.1\r\nHost: x\r\n" * 4),
        (db.ilp_port, b"trade,sym=SLOW price=1.0,size=1i" * 4),
        (db.pg_port, b"\x00\x00\x00\x50\x00\x03\x00\x00user\x00tickdb" * 4),
    ] for _ in range(5)]
    for t in trickles:
        t.start()

    time.sleep(STORM_S)
    stormy = feed.take_latencies()
    stop.set()
    feed.stop.set()
    for t in writers + storm + trickles:
        t.join(timeout=60)
    for s in held:
        s.close()

    print(summary("quiet", quiet))
    print(summary("storm", stormy))
    print("hostile query answers:", json.dumps(outcomes, sort_keys=True))
    print("write errors:", feed.errors)

    # The node is up and answers.
    assert db.proc.poll() is None, db.log_tail()
    assert requests.get(db.url + "/health", timeout=10).status_code == 200
    # Every acknowledged row is there exactly once.
    r = answered(db, {"query": f"select size from trade where sym = '{FEED_SYM}'", "format": "csv"})
    assert r.status_code == 200, r.text[:300]
    ids: dict[int, int] = {}
    for line in r.text.splitlines()[1:]:
        ids[int(line)] = ids.get(int(line), 0) + 1
    lost = [i for a, b in feed.acked for i in range(a, b) if i not in ids]
    dups = [i for i, n in ids.items() if n > 1]
    assert not lost, f"{len(lost)} acknowledged rows lost, e.g. {lost[:5]}"
    assert not dups, f"{len(dups)} rows twice, e.g. {dups[:5]}"
    assert len(stormy) > 0, "no write was acknowledged during the storm"
    # The hostile queries got answers, not crashes. During the storm most
    # wait for a query slot behind the 50 slow cross joins until their 3 s
    # timeout (408), so whether the 2 GB one ever ran there is luck (one
    # full run saw only 408s): once the storm is over it must be refused
    # for its memory, with 413.
    assert any(k in ("pg 57014",) for k in outcomes), outcomes
    r = answered(db, {"query": "select repeat('a', 2000000000)"})
    assert r.status_code == 413, (r.status_code, r.text[:300])


def test_bench_robustness_runs_and_checks_every_row(tmp_path):
    out = tmp_path / "robustness.json"
    r = run(["bench", "robustness", "--seconds", "3", "--preload-rows", "20000", "--slow-queries", "8",
             "--idle-per-port", "20", "--updates-per-s", "200", "--runs", "2", "--json", str(out),
             "--work-dir", str(tmp_path / "work")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["node_alive"] and rep["lost_rows"] == 0 and rep["duplicated_rows"] == 0, rep
    # Two rounds of a quiet phase then a storm, each phase measured.
    assert len(rep["quiet"]) == 2 and len(rep["storm"]) == 2, rep
    for q, s in zip(rep["quiet"], rep["storm"]):
        assert q["updates_acked"] > 0 and s["updates_acked"] > 0, rep
        assert q["p99_us"] > 0 and s["max_us"] >= s["p99_us"], rep
    assert "p99 under the storm ÷ quiet p99, the median of the rounds' ratios" in r.stdout, r.stdout
    assert "2 round(s) of a quiet phase then a storm" in r.stdout, r.stdout
