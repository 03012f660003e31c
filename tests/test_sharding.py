"""Socket sharding (the KX whitepaper "Socket Sharding with kdb+ and Linux"):
several rdbs share one HTTP, PostgreSQL and kdb+ IPC query port (rp,PORT,
SO_REUSEPORT) and the kernel spreads fresh connections over them. What tickdb
adds to the plain socket option, checked here with real clients (requests,
psycopg, PyKX, raw IPC sockets):

- a member listens on a shared port only once it is ready, so a new member
  never answers from half-loaded tables;
- each member has an --admin-port of its own, answering also while it loads;
- a member drains on SIGTERM or POST /admin/drain: running queries get their
  answers, idle sessions are ended (PostgreSQL with FATAL 57P01), new
  connections go to the other members, and it exits 0;
- a busy member steps out of the group and rejoins when it has capacity;
- membership changes (a member killed) are logged by the others.

Tests that set net.ipv4.tcp_migrate_req need root; they skip, saying why,
without it, and put the previous value back afterwards."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg
import pytest
import requests

os.environ.setdefault("PYKX_UNLICENSED", "true")
os.environ.setdefault("PYKX_SUPPRESS_WARNINGS", "true")
import pykx as kx  # noqa: E402

from harness import free_port, member  # noqa: E402

T0 = 1_700_000_000_000_000_000
SYMS = ["AAPL", "MSFT", "IBM", "GOOG", "TSLA"]
N = 1000
COUNT = "select count(*) from trade"
USER, PASSWORD = "tickdb", "tickdb"
MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req"


# --- fixtures and helpers ---------------------------------------------------

@pytest.fixture
def migrate_req():
    """net.ipv4.tcp_migrate_req=1 for the test (previous value restored)."""
    if os.geteuid() != 0:
        pytest.skip(f"needs root to set {MIGRATE_REQ} (running as euid {os.geteuid()})")
    try:
        with open(MIGRATE_REQ) as f:
            before = f.read().strip()
        with open(MIGRATE_REQ, "w") as f:
            f.write("1")
    except OSError as e:
        pytest.skip(f"cannot set {MIGRATE_REQ}: {e}")
    print(f"{MIGRATE_REQ}: {before} -> 1")
    try:
        yield
    finally:
        with open(MIGRATE_REQ, "w") as f:
            f.write(before)


def migrate_req_now() -> str | None:
    try:
        with open(MIGRATE_REQ) as f:
            return f.read().strip()
    except OSError:
        return None


class Group:
    """A tp with N trades and the shared query ports of a group of rdbs."""

    def __init__(self, cluster, rows: int = N, ipc: bool = True):
        self.cluster = cluster
        self.tp = cluster.tp()
        self.rows = rows
        for start in range(0, rows, 10_000):
            lines = [f"trade,sym={SYMS[i % 5]} price={100 + i % 97 * 0.25},size={i % 13 + 1}i {T0 + i}"
                     for i in range(start, min(rows, start + 10_000))]
            r = requests.post(self.tp.url + "/write", data="\n".join(lines) + "\n", timeout=60)
            assert r.status_code == 204, r.text
        self.http, self.pg = free_port(), free_port()
        self.ipc = free_port() if ipc else None
        self.url = f"http://127.0.0.1:{self.http}"

    def ports(self) -> list[int]:
        return [p for p in (self.http, self.pg, self.ipc) if p is not None]

    def member(self, extra=(), start=True, tp_port=None):
        m = member(self.cluster, tp_port or self.tp.tp_port, self.http, self.pg, self.ipc, extra=extra, start=start)
        if start:
            m.wait_rows("trade", self.rows)
        return m


def pid_of(m) -> int:
    return m.proc.pid


def phase(status: dict) -> str | None:
    return status.get("phase", status.get("lifecycle", {}).get("phase"))


def fresh_http(url: str, path: str = "/exec", params=None, timeout: float = 10) -> requests.Response:
    """One request on a connection of its own."""
    return requests.get(url + path, params=params, headers={"Connection": "close"}, timeout=timeout)


def http_member(r: requests.Response) -> int:
    assert "x-tickdb-member" in r.headers, dict(r.headers)
    return int(r.headers["x-tickdb-member"])


def pg_connect(port: int, **kw) -> psycopg.Connection:
    args = dict(host="127.0.0.1", port=port, user=USER, password=PASSWORD, dbname="tickdb",
                connect_timeout=10, autocommit=True)
    args.update(kw)
    return psycopg.connect(**args)


def spread_ok(seen: Counter, pids: set[int], total: int) -> bool:
    return set(seen) == pids and all(seen[p] > total * 0.2 for p in pids)


# --- raw kdb+ IPC (the bytes of docs/ipc.md) --------------------------------

class Ipc:
    def __init__(self, port: int, timeout: float = 10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.sendall(f"{USER}:{PASSWORD}".encode() + b"\x03\x00")
        cap = self.s.recv(1)
        if cap == b"":
            raise ConnectionError("login refused or connection closed")

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def sync(self, text: str):
        body = bytes([10, 0]) + struct.pack("<i", len(text)) + text.encode()
        self.s.sendall(bytes([1, 1, 0, 0]) + struct.pack("<I", 8 + len(body)) + body)
        head = self._read(8)
        n = struct.unpack("<I" if head[0] == 1 else ">I", head[4:8])[0]
        msg = self._read(n - 8)
        t = msg[0]
        if t == 0x80:
            raise RuntimeError("q error: " + msg[1:msg.index(0, 1)].decode())
        if t == 0xFA:  # -6 int
            return struct.unpack("<i", msg[1:5])[0]
        if t == 0xF9:  # -7 long
            return struct.unpack("<q", msg[1:9])[0]
        raise AssertionError(f"unexpected answer type {t}: {msg[:32]!r}")

    def close(self):
        self.s.close()


# --- raw HTTP keep-alive (to see the server close an idle connection) -------

def http_keepalive(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        assert chunk, buf
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    m = re.search(rb"content-length:\s*(\d+)", head, re.I)
    assert m, head
    while len(body) < int(m.group(1)):
        body += s.recv(4096)
    assert head.split(b"\r\n")[0].split()[1] == b"200", head
    assert b"connection: close" not in head.lower(), head
    return s


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """True once the peer closed s (EOF or reset) within timeout."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def log_lines(m) -> int:
    return len(m.log.read_text(errors="replace").splitlines())


def wait_new_log(m, text: str, after: int, timeout: float = 10) -> list[str]:
    """The log lines past line `after` that contain text, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in m.log.read_text(errors="replace").splitlines()[after:] if text in l]
        if lines:
            return lines
        if time.monotonic() >= deadline:
            raise AssertionError(f"{text!r} not logged within {timeout}s:\n{m.log_tail()}")
        time.sleep(0.05)


def wait_running(m, n: int, timeout: float = 10) -> None:
    """Waits until the member's admin /status shows n queries running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if m.status()["queries"]["running"] >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{n} queries not running after {timeout}s: {m.status()['queries']}")


# --- 1. the group ---------------------------------------------------------

def test_fresh_connections_spread_over_the_group_and_all_answer_in_full(cluster):
    """200 fresh connections over each of HTTP, PostgreSQL and kdb+ IPC on
    the shared ports reach both members (> 20% each); each answer is the
    whole table and names the member that gave it."""
    sysctl = migrate_req_now()
    g = Group(cluster)
    a, b = g.member(), g.member()
    pids = {pid_of(a), pid_of(b)}
    assert len(pids) == 2
    for m in (a, b):
        st = m.status()
        assert st["member"]["pid"] == pid_of(m), st.get("member")
        assert phase(st) == "ready", st
        # Every HTTP response names its member, the admin port's too.
        for path in ("/health", "/status", "/metrics"):
            assert http_member(requests.get(m.url + path, timeout=10)) == pid_of(m), path
        if sysctl == "0":
            # A shared port without tcp_migrate_req: said at start-up.
            assert "tcp_migrate_req" in m.log.read_text(), m.log_tail()

    seen = Counter()
    for _ in range(200):
        r = fresh_http(g.url, params={"query": COUNT})
        assert r.status_code == 200, r.text
        assert r.json()["dataset"] == [[N]], r.text
        seen[http_member(r)] += 1
    print("http", dict(seen))
    assert spread_ok(seen, pids, 200), seen
    # pg_backend_pid() over /exec is the member too.
    r = fresh_http(g.url, params={"query": "select pg_backend_pid()"})
    assert r.status_code == 200 and r.json()["dataset"] == [[http_member(r)]], r.text

    seen = Counter()
    for _ in range(200):
        with pg_connect(g.pg) as c:
            pid = c.execute("select pg_backend_pid()").fetchone()[0]
            assert c.execute(COUNT).fetchone() == (N,)
        seen[pid] += 1
    print("pg", dict(seen))
    assert spread_ok(seen, pids, 200), seen

    seen = Counter()
    for _ in range(200):
        with kx.SyncQConnection("127.0.0.1", g.ipc, username=USER, password=PASSWORD, no_ctx=True) as q:
            pid = q(".z.i").py()
            assert q("count trade").py() == N
        seen[pid] += 1
    print("ipc", dict(seen))
    assert spread_ok(seen, pids, 200), seen


def test_ready_means_listening_on_every_shared_port(cluster):
    """The moment a member's admin /health says 200 (what an operator waits
    for before stopping the old member in a rolling upgrade), it accepts
    connections on each shared port. Here it is the only member, so a
    refused connection means it is not listening yet."""
    g = Group(cluster)
    m = g.member(start=False)
    m.start(wait_ready=False)
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(m.url + "/health", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline and m.proc.poll() is None, m.log_tail()
        time.sleep(0.002)
    not_listening = [port for port in g.ports() if refused(port)]
    print("refused right after /health 200:", not_listening, "of", g.ports())
    assert not_listening == [], (not_listening, m.log_tail())


# --- 2. not ready: not in the group ---------------------------------------

def test_a_member_that_is_not_ready_takes_no_connections(cluster):
    g = Group(cluster, ipc=False)
    a = g.member()
    nowhere = free_port()
    b = g.member(start=False, tp_port=nowhere)
    b.start(wait_ready=False)
    # Its admin port answers at once, while it waits for its tp.
    deadline = time.monotonic() + 10
    while True:
        try:
            st = b.status()
            break
        except requests.ConnectionError:
            assert time.monotonic() < deadline, b.log_tail()
            time.sleep(0.05)
    assert st["member"]["pid"] == pid_of(b), st
    assert phase(st) != "ready" and st.get("ready") is not True, st
    h = requests.get(b.url + "/health", timeout=10)
    assert h.status_code == 503 and http_member(h) == pid_of(b), (h.status_code, h.text)
    time.sleep(0.5)
    assert phase(b.status()) != "ready"

    seen = Counter()
    for _ in range(100):
        r = fresh_http(g.url, params={"query": COUNT})
        assert r.status_code == 200 and r.json()["dataset"] == [[N]], r.text
        seen[http_member(r)] += 1
    for _ in range(100):
        with pg_connect(g.pg) as c:
            seen[c.execute("select pg_backend_pid()").fetchone()[0]] += 1
            assert c.execute(COUNT).fetchone() == (N,)
    print("not ready B:", dict(seen), "A", pid_of(a), "B", pid_of(b))
    assert seen == Counter({pid_of(a): 200}), seen

    # Once its tp is there it catches up and joins the group.
    cluster.tp(data_dir=cluster.tmp / "data-b", tp=nowhere)
    b.wait_ready(timeout=30)
    seen = Counter(http_member(fresh_http(g.url, "/health")) for _ in range(60))
    print("B ready:", dict(seen))
    assert set(seen) == {pid_of(a), pid_of(b)}, seen
    assert b.terminate(timeout=30) == 0, b.log_tail()


# --- 3. drain -------------------------------------------------------------

@pytest.mark.parametrize("how", ["sigterm", "admin"])
def test_drain_answers_running_queries_ends_idle_sessions_and_exits_0(cluster, how):
    g = Group(cluster)
    a = g.member(extra=["--drain-timeout-s", "10"])
    pid = pid_of(a)

    idle_pg = pg_connect(g.pg)
    notices: dict[str, list] = {"idle": [], "busy": []}
    idle_pg.add_notice_handler(lambda d: notices["idle"].append((d.sqlstate, d.message_primary)))
    assert idle_pg.execute("select pg_backend_pid()").fetchone() == (pid,)
    idle_http = http_keepalive(g.http)
    idle_ipc = Ipc(g.ipc)
    assert idle_ipc.sync(".z.i") == pid

    busy_pg = pg_connect(g.pg)
    busy_pg.add_notice_handler(lambda d: notices["busy"].append((d.sqlstate, d.message_primary)))
    busy_http = requests.Session()
    assert http_member(busy_http.get(g.url + "/health", timeout=10)) == pid
    got: dict[str, object] = {}

    def run_pg():
        try:
            got["pg"] = busy_pg.execute("select pg_sleep(1.5)").fetchall()
        except Exception as e:  # noqa: BLE001 - reported below
            got["pg"] = e
        try:
            busy_pg.execute("select 1")
            got["pg_after"] = "answered"
        except Exception as e:  # noqa: BLE001
            got["pg_after"] = e

    def run_http():
        try:
            r = busy_http.get(g.url + "/exec", params={"query": "select pg_sleep(1.5)"}, timeout=30)
            got["http"] = (r.status_code, r.json(), http_member(r))
        except Exception as e:  # noqa: BLE001
            got["http"] = e

    threads = [threading.Thread(target=run_pg), threading.Thread(target=run_http)]
    for t in threads:
        t.start()
    wait_running(a, 2)
    t0 = time.monotonic()
    if how == "sigterm":
        a.proc.send_signal(signal.SIGTERM)
    else:
        r = requests.post(a.url + "/admin/drain", timeout=10)
        assert r.status_code == 202, (r.status_code, r.text)
    time.sleep(0.3)
    # Draining: no new connections, on its own port nor (the last member) the shared ones.
    assert a.proc.poll() is None, "exited before its running queries ended"
    assert refused(a.admin_port), "the admin port still accepts during the drain"
    assert refused(g.http) and refused(g.pg) and refused(g.ipc)

    # The idle sessions are ended by the drain, not by the exit at its
    # timeout (10 s): within 3 s, while the pg_sleep(1.5)s still run or
    # just after.
    assert closed_by_peer(idle_http, 3), "idle keep-alive HTTP connection not closed"
    ipc_closed = closed_by_peer(idle_ipc.s, 3)  # asserted below, after the rest
    r, _, _ = select.select([idle_pg.fileno()], [], [], 3)
    assert r, "idle PostgreSQL session not ended"
    with pytest.raises(psycopg.OperationalError) as e:
        idle_pg.execute("select 1")
    print("idle pg:", type(e.value).__name__, e.value.sqlstate, str(e.value).strip(), notices["idle"])
    states = {e.value.sqlstate} | {s for s, _ in notices["idle"]}
    assert "57P01" in states, (repr(e.value), notices["idle"])

    for t in threads:
        t.join(timeout=15)
    print("busy:", got, notices["busy"])
    assert got["pg"] == [(None,)] or (isinstance(got["pg"], list) and len(got["pg"]) == 1), got["pg"]
    assert isinstance(got["http"], tuple), got["http"]
    status, body, who = got["http"]
    assert status == 200 and len(body["dataset"]) == 1 and who == pid, got["http"]
    # The PostgreSQL session that was running gets 57P01 after its answer.
    after = got["pg_after"]
    assert isinstance(after, psycopg.OperationalError), after
    assert "57P01" in {after.sqlstate} | {s for s, _ in notices["busy"]}, (repr(after), notices["busy"])

    assert ipc_closed, f"idle kdb+ IPC connection not closed by the drain:\n{a.log_tail(5)}"
    rc = a.wait_exit(timeout=15)
    took = time.monotonic() - t0
    print(f"{how}: exit {rc} after {took:.2f}s")
    assert rc == 0, a.log_tail()
    assert took < 10, took
    for c in (idle_pg, busy_pg):
        c.close()
    idle_http.close()
    idle_ipc.close()


def test_drain_timeout_ends_a_query_that_runs_on(cluster):
    g = Group(cluster, rows=10, ipc=False)
    a = g.member(extra=["--drain-timeout-s", "1"])
    c = pg_connect(g.pg)
    got = {}

    def run():
        try:
            got["pg"] = c.execute("select pg_sleep(20)").fetchall()
        except Exception as e:  # noqa: BLE001
            got["pg"] = e

    t = threading.Thread(target=run)
    t.start()
    wait_running(a, 1)
    t0 = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    rc = a.wait_exit(timeout=20)
    took = time.monotonic() - t0
    t.join(timeout=10)
    c.close()
    tail = a.log_tail(50)
    line = next((l for l in tail.splitlines() if "drain timeout" in l), None)
    print(f"exit {rc} after {took:.2f}s; client got {got.get('pg')!r}; log: {line}")
    assert took < 3, (took, tail)
    assert line is not None, tail
    assert re.search(r"\b1 quer", line), line
    assert isinstance(got.get("pg"), Exception), got


# --- 5. rolling upgrade ---------------------------------------------------

class Clients:
    """Client threads that keep querying the group, each answer checked;
    a request that fails because its connection was closed or reset is
    resent once on a new connection (the whitepaper's .util.connect)."""

    def __init__(self, g: Group):
        self.g = g
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = Counter()       # (protocol, pid) -> answers
        self.failed: list[str] = []
        self.retries = Counter()
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.http, self.http, self.pg, self.pg, self.ipc)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in self.threads)

    def fail(self, what: str):
        with self.lock:
            self.failed.append(what)

    def answer(self, proto: str, pid: int, n: int):
        with self.lock:
            if n != self.g.rows:
                self.failed.append(f"{proto}: count {n} from {pid}, want {self.g.rows}")
            self.ok[(proto, pid)] += 1

    def pids(self) -> set[int]:
        return {p for _, p in self.ok}

    def run(self, proto: str, open_, ask, closed: tuple):
        """One client: `ask` on a connection from `open_`; when it fails with
        one of the `closed` errors (the connection was closed or reset), the
        request is resent once on a new connection."""
        conn = None
        while not self.stop.is_set():
            for attempt in (0, 1):
                try:
                    conn = conn or open_()
                    pid, n = ask(conn)
                except closed as e:
                    if conn is not None:
                        conn.close()
                    conn = None
                    if attempt == 1:
                        self.fail(f"{proto}: {e!r}")
                        break
                    with self.lock:
                        self.retries[proto] += 1
                    continue
                except Refused as e:
                    self.fail(f"{proto}: {e}")
                    break
                self.answer(proto, pid, n)
                break
            time.sleep(0.005)
        if conn is not None:
            conn.close()

    def http(self):
        def ask(s):
            r = s.get(self.g.url + "/exec", params={"query": COUNT}, timeout=10)
            if r.status_code != 200:
                raise Refused(f"{r.status_code} {r.text[:200]} from {r.headers.get('x-tickdb-member')}")
            return http_member(r), r.json()["dataset"][0][0]
        self.run("http", requests.Session, ask, (requests.ConnectionError,))

    def pg(self):
        def ask(conn):
            return conn.execute("select pg_backend_pid(), count(*) from trade").fetchone()
        self.run("pg", lambda: pg_connect(self.g.pg), ask, (psycopg.OperationalError,))

    def ipc(self):
        def ask(conn):
            return conn.sync(".z.i"), conn.sync("count trade")
        # OSError: ConnectionError, reset, refused.
        self.run("ipc", lambda: Ipc(self.g.ipc), ask, (OSError,))


class Refused(Exception):
    """An answer that is an error, not a closed connection: a failure."""


def test_rolling_upgrade_fails_no_request(migrate_req, cluster):
    g = Group(cluster)
    a = g.member()
    clients = Clients(g)
    clients.start()
    try:
        time.sleep(1)
        b = g.member(start=False)
        b.start()  # returns once its admin /health is 200
        a.proc.send_signal(signal.SIGTERM)
        time.sleep(2)
    finally:
        clients.finish()
    rc = a.wait_exit(timeout=30)
    print(f"A {pid_of(a)} exit {rc}; B {pid_of(b)}; answers {dict(clients.ok)}; "
          f"retries {dict(clients.retries)}; failed {clients.failed[:10]}")
    assert clients.failed == [], clients.failed[:20]
    assert clients.pids() == {pid_of(a), pid_of(b)}, clients.ok
    # After A went, everyone is answered by B.
    for proto in ("http", "pg", "ipc"):
        assert clients.ok[(proto, pid_of(b))] > 0, (proto, clients.ok)
    assert rc == 0, a.log_tail()


# --- 6. busy steering -----------------------------------------------------

def block(m, seconds: float, got: dict):
    def run():
        r = requests.get(m.url + "/exec", params={"query": f"select pg_sleep({seconds})"}, timeout=seconds + 30)
        got["block"] = r.status_code

    t = threading.Thread(target=run)
    t.start()
    return t


def probe(g: Group, n: int) -> tuple[Counter, float, int]:
    """n fresh connections to the shared HTTP port, each GET /status:
    who answered, the longest wait, and how many timed out."""
    seen, worst, timeouts = Counter(), 0.0, 0
    for _ in range(n):
        t = time.monotonic()
        try:
            seen[http_member(fresh_http(g.url, "/status", timeout=2))] += 1
        except requests.Timeout:
            timeouts += 1
        worst = max(worst, time.monotonic() - t)
    return seen, worst, timeouts


def test_a_busy_member_steps_out_of_the_group_and_rejoins(migrate_req, cluster):
    g = Group(cluster, rows=10, ipc=False)
    flags = ["--query-concurrency", "1", "--busy-query-ms", "300"]
    a, b = g.member(extra=flags), g.member(extra=flags)
    got = {}
    mark = log_lines(a)
    t = block(a, 6, got)
    time.sleep(1)
    print("A:", wait_new_log(a, "busy", mark, timeout=2))
    seen, worst, timeouts = probe(g, 50)
    print(f"A {pid_of(a)} busy: {dict(seen)}, longest {worst:.3f}s, timeouts {timeouts}")
    assert timeouts == 0 and seen == Counter({pid_of(b): 50}), (seen, timeouts)
    assert worst < 1.0, worst
    t.join(timeout=30)
    assert got["block"] == 200, got
    print("A:", wait_new_log(a, "rejoin", mark, timeout=5))
    seen, worst, timeouts = probe(g, 60)
    print(f"A rejoined: {dict(seen)}, longest {worst:.3f}s")
    assert timeouts == 0 and set(seen) == {pid_of(a), pid_of(b)}, seen


def test_without_busy_steering_the_kernel_still_sends_to_the_busy_member(migrate_req, cluster):
    g = Group(cluster, rows=10, ipc=False)
    flags = ["--query-concurrency", "1", "--busy-query-ms", "300", "--no-busy-steering"]
    a, b = g.member(extra=flags), g.member(extra=flags)
    got = {}
    t = block(a, 3, got)
    time.sleep(1)
    seen, worst, timeouts = probe(g, 50)
    t.join(timeout=30)
    print(f"no steering, A {pid_of(a)} blocked: {dict(seen)}, longest {worst:.3f}s, timeouts {timeouts}")
    assert seen[pid_of(a)] + timeouts >= 1, seen


def test_the_last_listener_never_steps_out(migrate_req, cluster):
    g = Group(cluster, rows=10, ipc=False)
    a = g.member(extra=["--query-concurrency", "1", "--busy-query-ms", "300"])
    got = {}
    t = block(a, 2, got)
    time.sleep(0.8)
    r = fresh_http(g.url, "/status", timeout=2)
    assert r.status_code == 200 and http_member(r) == pid_of(a)
    t.join(timeout=30)
    assert got["block"] == 200


def test_two_busy_members_never_both_leave_the_port(migrate_req, cluster):
    """Both members saturated at once: each takes the port's leave lock and
    counts the listeners, holding the lock until its own socket is gone, so
    one stays and the port keeps answering throughout."""
    g = Group(cluster, rows=10, ipc=False)
    flags = ["--query-concurrency", "1", "--busy-query-ms", "0"]
    a, b = g.member(extra=flags), g.member(extra=flags)
    for round_ in range(5):
        got_a, got_b = {}, {}
        ta, tb = block(a, 1.0, got_a), block(b, 1.0, got_b)
        least, end = 2, time.monotonic() + 0.8
        while time.monotonic() < end:
            least = min(least, listeners(g.http))
            time.sleep(0.002)
        ta.join(timeout=30)
        tb.join(timeout=30)
        assert got_a["block"] == got_b["block"] == 200
        print(f"round {round_}: fewest listeners on the shared port during the blocks: {least}")
        assert least == 1, least
        # Both have capacity again: both listen. A member whose query has
        # just answered can still count it as running for a steering
        # period, and step out for a moment, so both must listen for a
        # while, not at one instant.
        assert steady_listeners(g.http, 2, hold_s=0.5, within_s=5), listeners(g.http)


def steady_listeners(port: int, want: int, hold_s: float, within_s: float) -> bool:
    """Whether `want` sockets listen on the port, unbroken for `hold_s`,
    at some point in the next `within_s` seconds."""
    deadline, since = time.monotonic() + within_s, None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if listeners(port) != want:
            since = None
        elif since is None:
            since = now
        elif now - since >= hold_s:
            return True
        time.sleep(0.01)
    return False


def listeners(port: int) -> int:
    """Sockets listening on 127.0.0.1:port (/proc/net/tcp, state LISTEN)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return sum(1 for line in f.readlines()[1:]
                   if line.split()[1] == want and line.split()[3] == "0A")


# --- 7. bad cases ---------------------------------------------------------

def test_rp_on_a_port_held_without_rp_fails_at_once(cluster):
    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
         "print('listening', flush=True); time.sleep(120)", str(port)],
        stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == b"listening"
        # Pointed at a tp that is not there: it could never get ready, so
        # only a bind at start can notice the conflict.
        nowhere = free_port()
        m = member(cluster, nowhere, port, free_port(), start=False)
        t = time.monotonic()
        m.start(wait_ready=False)
        rc = m.wait_exit(timeout=30)
        took = time.monotonic() - t
        log = m.log.read_text()
        print(f"exit {rc} after {took:.2f}s: {log.strip()[-500:]}")
        assert rc != 0 and took < 10, (rc, took)
        lines = [l for l in log.splitlines() if "address already in use" in l.lower()]
        assert lines and any("rp" in l and str(port) in l for l in lines), log
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_member_leaves_the_group_and_clients_reconnect(cluster):
    g = Group(cluster, ipc=False)
    a, b = g.member(), g.member()
    stop = threading.Event()
    stats = Counter()
    failed = []

    def loop():
        s = requests.Session()
        while not stop.is_set():
            for attempt in range(3):
                try:
                    if attempt or stats["requests"] % 3 == 0:
                        s.close()
                        s = requests.Session()
                    r = s.get(g.url + "/exec", params={"query": COUNT}, timeout=10)
                except requests.ConnectionError:
                    stats["reconnects"] += 1
                    continue
                if r.status_code != 200 or r.json()["dataset"] != [[N]]:
                    failed.append(f"{r.status_code} {r.text[:200]}")
                stats["requests"] += 1
                stats[http_member(r)] += 1
                break
            else:
                failed.append("no answer after 3 connections")
        s.close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        before = log_lines(a)
        b.kill9()
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    print(f"A {pid_of(a)} B {pid_of(b)} (killed): {dict(stats)} failed {failed[:5]}")
    assert failed == []
    assert stats[pid_of(a)] > 0 and stats[pid_of(b)] > 0, stats
    new = wait_new_log(a, "query group", before, timeout=5)
    print("survivor:", new)
    # e.g. "query group on 127.0.0.1:P (HTTP): 1 listener(s) now, was 2"
    counts = [tuple(map(int, m.groups())) for l in new
              if f":{g.http} " in l and (m := re.search(r"(\d+) listener\(s\) now, was (\d+)", l))]
    assert (1, 2) in counts, new
