"""The tickerplant side of "no query or client can crash the node, stall
ingest or exhaust memory": subscriber memory has one global bound that
catch-up read-ahead counts in, slow subscribers are cut off without the
publisher ever waiting, idle and slowloris connections are dropped on both
ports, connection counts are bounded, and loose ILP input is refused.

Subscribers here are raw sockets speaking the subscription protocol
(docs/protocol.md: little-endian frames, u32 body length + u8 type). A
"slow" subscriber sends Subscribe with a small receive buffer and never
reads. Memory is measured from /proc/PID/status: VmHWM (the peak) against
the peak after a warm-up write of the same size, so parsing's own transient
memory is in the baseline. Bounds carry generous margins: the tests run on
a loaded 2-core machine against a debug build.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time

import pytest
import requests

from harness import run

TYPE_SUBSCRIBE, TYPE_SUBSCRIBE_OK, TYPE_UPDATE, TYPE_ERROR, TYPE_WRITE, TYPE_WRITE_ACK = 1, 2, 3, 4, 6, 7
LIVE_ONLY = 1 << 63  # a from_seq past the tp's sequence: no catch-up
MB = 1_000_000
# Slack over a memory bound for what the process holds besides subscriber
# buffers (allocator slack, per-connection tasks, journal buffers).
RSS_SLACK_BYTES = 96 * MB
T0 = 1_700_000_000_000_000_000


# --- the subscription protocol ---------------------------------------------

def frame(ty: int, body: bytes) -> bytes:
    return struct.pack("<IB", len(body), ty) + body


def subscribe_frame(from_seq: int, tables=(), symbols=()) -> bytes:
    body = struct.pack("<Q", from_seq)
    for names in (tables, symbols):
        body += struct.pack("<I", len(names))
        for n in names:
            b = n.encode()
            body += struct.pack("<H", len(b)) + b
    return frame(TYPE_SUBSCRIBE, body)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(min(n - len(buf), 1 << 20))
        if not got:
            return None
        buf += got
    return bytes(buf)


def read_frame(sock: socket.socket) -> tuple[int, bytes] | None:
    """(type, body), or None when the tp closed the connection."""
    head = recv_exact(sock, 5)
    if head is None:
        return None
    n, ty = struct.unpack("<IB", head)
    body = recv_exact(sock, n)
    assert body is not None, f"connection closed inside a frame of type {ty}"
    return ty, body


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        # Before connect, so the window the tp sees is small from the start.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s


def slow_subscriber(port: int, from_seq: int = LIVE_ONLY, tables=()) -> socket.socket:
    """Subscribes and never reads."""
    s = connect(port, rcvbuf=4096)
    s.sendall(subscribe_frame(from_seq, tables))
    return s


class FastSubscriber:
    """Reads everything the tp sends, on its own thread; records sequences."""

    def __init__(self, port: int, symbols=()):
        self.sock = connect(port)
        self.sock.sendall(subscribe_frame(LIVE_ONLY, symbols=symbols))
        ty, body = read_frame(self.sock)
        assert ty == TYPE_SUBSCRIBE_OK, (ty, body[:200])
        (self.start_seq,) = struct.unpack_from("<Q", body)
        self.seqs: list[int] = []
        self.error: str | None = None
        self.cv = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                f = read_frame(self.sock)
                if f is None:
                    self.error = "closed by the tp"
                    break
                ty, body = f
                if ty == TYPE_ERROR:
                    self.error = body.decode(errors="replace")
                    break
                if ty == TYPE_UPDATE:
                    with self.cv:
                        self.seqs.append(struct.unpack_from("<Q", body)[0])
                        self.cv.notify_all()
        except OSError as e:
            self.error = str(e)
        with self.cv:
            self.cv.notify_all()

    def close(self) -> None:
        # shutdown first: close alone does not reach the kernel while the
        # reading thread sits in recv on the socket.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def wait_for(self, seq: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        with self.cv:
            while not (self.seqs and self.seqs[-1] >= seq):
                assert self.error is None, f"fast subscriber stopped: {self.error}"
                left = deadline - time.monotonic()
                assert left > 0, f"fast subscriber at {self.seqs[-1:]} after {timeout}s, want {seq}"
                self.cv.wait(left)


# --- helpers -----------------------------------------------------------------

def rows_body(n: int, first: int = 0, sym: str = "S") -> str:
    return "".join(f"trade,{'sym'}={sym}{i % 97} price={i}.5,size={i}i {T0 + first + i}\n" for i in range(n))


def write(db, body: str) -> int:
    r = requests.post(db.url + "/write", data=body, timeout=60)
    assert r.status_code == 204, r.text
    return db.status()["tp"]["seq"]


def proc_status_kb(db, field: str) -> int:
    with open(f"/proc/{db.proc.pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{db.proc.pid}/status")


def peak_rss(db) -> int:
    return proc_status_kb(db, "VmHWM") * 1024


def rss(db) -> int:
    return proc_status_kb(db, "VmRSS") * 1024


def wait_until(cond, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout}s: {what}")


def log_text(db) -> str:
    return db.log.read_text(errors="replace")


def tp_with(cluster, *flags: str):
    return cluster.tp(extra=["--fsync", "never", *flags])


# --- subscriber memory ----------------------------------------------------------

ROWS_PER_WRITE = 100_000  # about 3 MB of update payload


def test_slow_subscribers_share_updates_and_stay_within_the_bound(cluster):
    """100 slow subscribers and a fast one, unfiltered: an update's payload is
    shared, never copied per subscriber, so memory stays near one copy of
    what is outstanding; the tp keeps acknowledging and the fast subscriber
    gets every update."""
    bound = 64 * MB
    db = tp_with(cluster, "--sub-memory-bytes-max", str(bound), "--sub-queue-bytes-max", str(32 * MB))
    write(db, rows_body(ROWS_PER_WRITE))  # warm-up: parsing's peak is in the baseline
    base = peak_rss(db)
    slow = [slow_subscriber(db.tp_port) for _ in range(100)]
    fast = FastSubscriber(db.tp_port)
    wait_until(lambda: len(db.status()["tp"]["subscribers"]) == 101, 20, "101 subscribers registered")
    t = time.monotonic()
    for k in range(4):
        seq = write(db, rows_body(ROWS_PER_WRITE, first=(k + 1) * ROWS_PER_WRITE))
        fast.wait_for(seq)
        st = db.status()["tp"]
        mem = st["subscriber_memory"]
        assert mem["bytes_max"] == bound
        assert 0 <= mem["bytes"] <= bound, mem
    print(f"4 writes acknowledged and delivered in {time.monotonic() - t:.1f}s")
    assert fast.seqs == list(range(fast.start_seq + 1, seq + 1)), "no gap, no duplicate"
    st = db.status()["tp"]
    held = [s["held_bytes"] for s in st["subscribers"]]
    # The slow ones hold the updates the kernel did not take; one copy each
    # would be 100x what the shared payloads cost.
    assert max(held) > 0, st["subscribers"][:3]
    assert st["subscriber_memory"]["bytes"] < sum(held), st["subscriber_memory"]
    grew = peak_rss(db) - base
    print(f"peak RSS grew {grew / MB:.0f} MB with 100 slow subscribers")
    assert grew < bound + RSS_SLACK_BYTES, f"peak RSS grew {grew / MB:.0f} MB"
    for s in slow:
        s.close()


def test_filtered_slow_subscribers_are_cut_off_at_the_global_bound(cluster):
    """Filtered subscribers get their own copy of each update, so 40 slow
    ones would hold 40 copies; the global bound cuts off the subscribers
    holding the most, with a log line giving the numbers, while the tp keeps
    acknowledging and a fast subscriber keeps receiving.

    The fast one asks for one symbol, so it never holds the most: until
    their kernel socket buffers fill (a few MB each), slow subscribers take
    updates as fast as it does, and among equal holders equally far behind
    the tp cannot tell them apart (it cuts the one idle longest)."""
    bound = 32 * MB
    db = tp_with(cluster, "--sub-memory-bytes-max", str(bound), "--sub-queue-bytes-max", str(1000 * MB))
    write(db, rows_body(ROWS_PER_WRITE))
    base = peak_rss(db)
    slow = [slow_subscriber(db.tp_port, tables=["trade"]) for _ in range(40)]
    fast = FastSubscriber(db.tp_port, symbols=["S1"])
    wait_until(lambda: len(db.status()["tp"]["subscribers"]) == 41, 20, "41 subscribers registered")
    for k in range(4):
        seq = write(db, rows_body(ROWS_PER_WRITE, first=(k + 1) * ROWS_PER_WRITE))
        fast.wait_for(seq)
        mem = db.status()["tp"]["subscriber_memory"]
        assert 0 <= mem["bytes"] <= bound, mem
    assert fast.seqs == list(range(fast.start_seq + 1, seq + 1))
    st = db.status()["tp"]
    assert st["subscriber_memory"]["cut_offs"] > 0, st["subscriber_memory"]
    assert len(st["subscribers"]) < 41
    cut = re.findall(r"subscriber memory bound: (\d+) bytes held by subscribers \+ (\d+) bytes for the update at seq (\d+) "
                     r"would exceed (\d+) bytes \(--sub-memory-bytes-max\); cutting off (\S+), which holds (\d+) bytes",
                     log_text(db))
    assert cut, log_text(db)[-3000:]
    for held, need, _seq, limit, _name, victim in cut:
        assert int(held) + int(need) > int(limit) == bound
        assert int(victim) > 0
    grew = peak_rss(db) - base
    print(f"peak RSS grew {grew / MB:.0f} MB; {len(cut)} cut-offs")
    assert grew < bound + RSS_SLACK_BYTES, f"peak RSS grew {grew / MB:.0f} MB"
    for s in slow:
        s.close()


def test_too_slow_log_line_tells_the_truth(cluster):
    db = tp_with(cluster, "--sub-queue-bytes-max", "1000000")
    s = slow_subscriber(db.tp_port)
    wait_until(lambda: len(db.status()["tp"]["subscribers"]) == 1, 20, "subscriber registered")
    seq = write(db, rows_body(ROWS_PER_WRITE))
    m = wait_until(
        lambda: re.search(r"too slow: (\d+) bytes queued or being written \+ (\d+) bytes of the update at seq (\d+) "
                          r"would exceed its bound of 1000000 bytes \(--sub-queue-bytes-max\)", log_text(db)),
        10, "the cut-off log line")
    queued, update, at = (int(x) for x in m.groups())
    assert queued + update > 1_000_000 and update > 1_000_000, m.group(0)
    assert at == seq
    assert db.status()["tp"]["subscribers"] == []
    s.close()


def test_catch_up_read_ahead_is_counted_and_bounded(cluster):
    """30 subscribers replaying from seq 1 that never read: their read-ahead
    is charged to the same bound, /status shows it, memory stays bounded."""
    bound = 16 * MB
    db = tp_with(cluster, "--sub-memory-bytes-max", str(bound))
    for k in range(8):  # ~24 MB of journal
        seq = write(db, rows_body(ROWS_PER_WRITE, first=k * ROWS_PER_WRITE))
    base = peak_rss(db)
    slow = [slow_subscriber(db.tp_port, from_seq=1) for _ in range(30)]
    wait_until(lambda: len(db.status()["tp"]["subscribers"]) == 30, 20, "30 subscribers registered")

    def counted():
        st = db.status()["tp"]
        catchup = sum(s["catchup_bytes"] for s in st["subscribers"])
        return (catchup, st) if catchup > 4 * MB else None

    catchup, st = wait_until(counted, 20, "catch-up read-ahead in /status")
    time.sleep(1.0)  # let every reader go as far as the bound lets it
    st = db.status()["tp"]
    total = st["subscriber_memory"]["bytes"]
    assert total <= bound, st["subscriber_memory"]
    assert total == sum(s["held_bytes"] for s in st["subscribers"]), "nothing shared in a catch-up"
    for s in st["subscribers"]:
        assert s["held_bytes"] == s["queued_bytes"] + s["writing_bytes"] + s["catchup_bytes"], s
    grew = peak_rss(db) - base
    print(f"catch-up: {total / MB:.1f} MB counted, peak RSS grew {grew / MB:.0f} MB")
    assert grew < bound + RSS_SLACK_BYTES, f"peak RSS grew {grew / MB:.0f} MB"
    # The tp still acknowledges writes while the readers wait for budget.
    assert write(db, rows_body(10, first=10 * ROWS_PER_WRITE)) == seq + 1
    for s in slow:
        s.close()
    wait_until(lambda: db.status()["tp"]["subscriber_memory"]["bytes"] == 0, 20, "memory released on disconnect")


# --- ILP TCP ---------------------------------------------------------------------

def test_idle_ilp_connections_cost_little(cluster):
    """300 connections that each send a line and then idle: the read buffer
    is given back when a connection goes quiet."""
    db = tp_with(cluster)
    conns = [connect(db.ilp_port) for _ in range(20)]  # warm-up: tasks, allocator arenas
    for i, c in enumerate(conns):
        c.sendall(f"trade,sym=W price=1.5,size={i}i {T0 + i}\n".encode())
    wait_until(lambda: db.status()["tp"]["rows"] == 20, 20, "warm-up rows")
    time.sleep(1.0)
    before = rss(db)
    n = 300
    for i in range(n):
        c = connect(db.ilp_port)
        c.sendall(f"trade,sym=I{i % 7} price=1.5,size={i}i {T0 + 100 + i}\n".encode())
        conns.append(c)
    wait_until(lambda: db.status()["tp"]["rows"] == 20 + n, 30, "every connection's line applied")
    assert db.status()["tp"]["connections"]["ilp_tcp"] == 20 + n
    time.sleep(1.5)  # past the buffer's give-back delay
    per_conn = (rss(db) - before) / n
    print(f"{per_conn / 1024:.1f} KiB of RSS per idle ILP connection")
    assert per_conn < 40 * 1024, f"{per_conn / 1024:.0f} KiB per idle connection"
    for c in conns:
        c.close()


def test_ilp_slowloris_and_idle_connections_are_dropped(cluster):
    db = tp_with(cluster, "--ilp-partial-line-timeout-s", "2", "--ilp-idle-timeout-s", "3")
    # A client dripping an unfinished line a byte at a time is dropped after
    # the partial-line timeout, though it is never idle for long.
    drip = connect(db.ilp_port)
    t = time.monotonic()
    line = b"trade,sym=SLOW price=1.5,size=1i" + b"0" * 100
    closed = False
    for b in line:
        try:
            drip.sendall(bytes([b]))
        except OSError:
            closed = True
            break
        time.sleep(0.2)
        drip.setblocking(False)
        try:
            if drip.recv(1) == b"":
                closed = True
                break
        except BlockingIOError:
            pass
        except OSError:
            closed = True
            break
        finally:
            drip.setblocking(True)
    took = time.monotonic() - t
    assert closed, "a slowloris client was never dropped"
    assert 1.5 < took < 15, took
    m = wait_until(lambda: re.search(r"ILP TCP (\S+): an unfinished line \((\d+) bytes\) did not complete within 2 s "
                                     r"\(--ilp-partial-line-timeout-s\)", log_text(db)), 5, "the slowloris log line")
    assert m.group(1) == "127.0.0.1:%d" % drip.getsockname()[1]
    # An idle connection is closed after the idle timeout; lines sent
    # before are kept.
    idle = connect(db.ilp_port)
    idle.sendall(f"trade,sym=IDLE price=1.5,size=1i {T0}\n".encode())
    t = time.monotonic()
    idle.settimeout(20)
    assert idle.recv(1) == b""
    took = time.monotonic() - t
    assert 2 < took < 15, took
    idle_line = r"ILP TCP 127\.0\.0\.1:%d: idle for 3 s \(--ilp-idle-timeout-s\); closing" % idle.getsockname()[1]
    wait_until(lambda: re.search(idle_line, log_text(db)), 5, "the idle log line")
    assert db.status()["tp"]["rows"] == 1


def test_ilp_connection_limit(cluster):
    db = tp_with(cluster, "--ilp-connections-max", "3")
    held = [connect(db.ilp_port) for _ in range(3)]
    wait_until(lambda: db.status()["tp"]["connections"]["ilp_tcp"] == 3, 10, "3 connections open")
    extra = connect(db.ilp_port)
    extra.settimeout(10)
    try:
        assert extra.recv(1) == b""
    except ConnectionResetError:
        pass
    wait_until(lambda: re.search(r"ILP TCP: refusing 127\.0\.0\.1:\d+: 3 connections open \(--ilp-connections-max\)",
                                 log_text(db)), 5, "the refusal log line")
    assert db.status()["tp"]["connections"]["ilp_tcp_refused"] >= 1
    held.pop().close()
    wait_until(lambda: db.status()["tp"]["connections"]["ilp_tcp"] == 2, 10, "a slot freed")
    ok = connect(db.ilp_port)
    ok.sendall(f"trade,sym=OK price=1.5,size=1i {T0}\n".encode())
    wait_until(lambda: db.status()["tp"]["rows"] == 1, 10, "the new connection's line applied")


# --- the subscription port ----------------------------------------------------------

def test_subscription_handshake_and_publisher_idle_timeouts(cluster):
    db = tp_with(cluster, "--sub-handshake-timeout-s", "1", "--publisher-idle-timeout-s", "2")
    # Nothing sent after connecting: an Error frame, then the close.
    mute = connect(db.tp_port)
    mute.settimeout(15)
    t = time.monotonic()
    ty, body = read_frame(mute)
    assert ty == TYPE_ERROR
    assert "no Subscribe or Write within 1 s (--sub-handshake-timeout-s)" in body.decode(), body
    assert 0.5 < time.monotonic() - t < 10
    assert read_frame(mute) is None
    # Half a frame is no handshake either.
    half = connect(db.tp_port)
    half.sendall(subscribe_frame(LIVE_ONLY)[:7])
    half.settimeout(15)
    assert read_frame(half)[0] == TYPE_ERROR
    # A publisher idle past its timeout is closed (after a Write: this one's
    # payload does not decode, so it is refused in its ack).
    pub = connect(db.tp_port)
    pub.sendall(frame(TYPE_WRITE, struct.pack("<Q", 7) + b"\x00junk"))
    pub.settimeout(15)
    ty, body = read_frame(pub)
    assert ty == TYPE_WRITE_ACK and struct.unpack_from("<Q", body)[0] == 7
    t = time.monotonic()
    ty, body = read_frame(pub)
    assert ty == TYPE_ERROR and b"no Write for 2 s (--publisher-idle-timeout-s)" in body, body
    assert 1.5 < time.monotonic() - t < 12
    assert read_frame(pub) is None
    wait_until(lambda: re.search(r"publisher 127\.0\.0\.1:\d+: no Write for 2 s \(--publisher-idle-timeout-s\); closing",
                                 log_text(db)), 5, "the publisher idle log line")
    # A subscriber quiet far longer than either timeout is not timed out.
    sub = FastSubscriber(db.tp_port)
    time.sleep(3.5)
    seq = write(db, rows_body(3))
    sub.wait_for(seq, timeout=10)
    assert sub.error is None


def test_subscription_connection_limit(cluster):
    db = tp_with(cluster, "--sub-connections-max", "3")
    subs = [FastSubscriber(db.tp_port) for _ in range(3)]
    extra = connect(db.tp_port)
    extra.settimeout(10)
    ty, body = read_frame(extra)
    assert ty == TYPE_ERROR
    assert "too many connections: 3 open (--sub-connections-max)" in body.decode(), body
    assert read_frame(extra) is None
    wait_until(lambda: re.search(r"subscriptions: refusing 127\.0\.0\.1:\d+: 3 connections open \(--sub-connections-max\)",
                                 log_text(db)), 5, "the refusal log line")
    st = db.status()["tp"]["connections"]
    assert st["subscription"] == 3 and st["subscription_max"] == 3 and st["subscription_refused"] >= 1
    subs[0].close()
    wait_until(lambda: db.status()["tp"]["connections"]["subscription"] == 2, 10, "a slot freed")
    again = FastSubscriber(db.tp_port)
    seq = write(db, rows_body(2))
    again.wait_for(seq)
    subs[1].wait_for(seq)


# --- loose ILP input ---------------------------------------------------------------

GOOD = f"trade,sym=OK price=1.5,size=10i {T0}\n"


@pytest.mark.parametrize(
    "bad_line, words",
    [
        ("trade,sym=A\0B price=1.5,size=1i 1", ["symbol 'sym'", "control character", "0x00"]),
        ("trade,sym=A\x01 price=1.5,size=1i 1", ["symbol 'sym'", "0x01"]),
        ("trade,sym=new\\\nline price=1.5 1", ["symbol 'sym'", "0x0a"]),
        ("tra\0de,sym=A price=1.5 1", ["table name", "control character"]),
        ("trade,s\0ym=A price=1.5 1", ["column name", "control character"]),
        ("trade,sym=A pri\x1fce=1.5 1", ["column name", "0x1f"]),
        ("trade,sym=A 1", ["has tags but no fields"]),
        ("trade,sym=A", ["has tags but no fields"]),
        ("trade,sym=A price=1.5 -9223372036854775808", ["outside the accepted range"]),
        ("trade,sym=A price=1.5 9223372036854775807", ["outside the accepted range"]),
        ("trade,sym=A price=1.5,time=-9223372036854775808n", ["outside the accepted range"]),
    ],
)
def test_loose_ilp_is_refused_over_http(cluster, bad_line, words):
    db = tp_with(cluster)
    body = GOOD + GOOD + bad_line + "\n" + GOOD
    r = requests.post(db.url + "/write", data=body.encode(), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["line"] == 3, err
    for w in words:
        assert w in err["message"], err
    assert "\0" not in err["message"]
    assert db.status()["tp"]["rows"] == 0, "nothing of the request applied"
    # Escaped spaces, commas and equals signs stay ordinary symbol text.
    assert requests.post(db.url + "/write", data="trade,sym=A\\ B\\,C\\=D price=1.5 1\n", timeout=30).status_code == 204


def test_loose_ilp_over_tcp_closes_the_connection_and_keeps_what_came_before(cluster):
    db = tp_with(cluster)
    c = connect(db.ilp_port)
    c.sendall((GOOD + "trade,sym=A\0B price=1.5 2\n" + GOOD).encode())
    c.settimeout(10)
    try:
        assert c.recv(1) == b""
    except ConnectionResetError:
        pass
    wait_until(lambda: "symbol 'sym' holds a control character" in log_text(db), 10, "the log line")
    assert db.status()["tp"]["rows"] == 1


def test_help_documents_every_new_limit():
    out = run(["tp", "--help"]).stdout
    for flag, default in [
        ("--sub-memory-bytes-max", "1073741824"),
        ("--sub-connections-max", "256"),
        ("--sub-handshake-timeout-s", "10"),
        ("--publisher-idle-timeout-s", "600"),
        ("--ilp-idle-timeout-s", "600"),
        ("--ilp-partial-line-timeout-s", "30"),
        ("--ilp-connections-max", "1024"),
    ]:
        assert flag in out, flag
        section = out[out.index(flag):]
        section = section[: section.index("[default:") + 40]
        assert f"[default: {default}]" in section, section
