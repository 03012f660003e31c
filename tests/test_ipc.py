"""kdb+ IPC with real clients nobody here wrote: PyKX (unlicensed mode) for
sync and async `.u.upd`, the chaser and queries; aiokdb for byte-level
cross-checks of the serializer and of compression; raw sockets for bad
input. Every value written over IPC must read back exactly over SQL, and
every query answered over IPC must equal the same query over PostgreSQL
wire. javakdb and node-q are in test_ipc_clients.py."""

from __future__ import annotations

import math
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

os.environ.setdefault("PYKX_UNLICENSED", "true")
os.environ.setdefault("PYKX_SUPPRESS_WARNINGS", "true")
import pykx as kx  # noqa: E402
from aiokdb import MessageType, b9, d9  # noqa: E402
from aiokdb.compress import decompress  # noqa: E402

from harness import free_port  # noqa: E402

USER, PASSWORD = "tickdb", "tickdb"
# 2000.01.01 in Unix ns: q's temporal epoch.
Q_EPOCH_NS = 946_684_800_000_000_000
ROOT = Path(__file__).resolve().parent.parent


def ipc_node(cluster, extra=()):
    port = free_port()
    node = cluster.up(extra=["--ipc-port", str(port), *extra])
    node.ipc_port = port
    return node


def connect(node, user=USER, password=PASSWORD):
    return kx.SyncQConnection("127.0.0.1", node.ipc_port, username=user, password=password,
                              no_ctx=True)


def pg(node):
    return psycopg.connect(host="127.0.0.1", port=node.pg_port, user=USER, password=PASSWORD,
                           autocommit=True)


def sql_rows(node, q):
    with pg(node) as c:
        return c.execute(q).fetchall()


def wait_count(node, table, n, timeout=30):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = sql_rows(node, f"SELECT count(*) FROM {table}")[0][0]
        if got >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{table} has {got} rows, wanted {n}")


def timestamps(ns: list[int]):
    return kx.toq(np.array(ns, dtype="datetime64[ns]"))


# --- raw sockets ------------------------------------------------------------

def raw_login(node, creds=b"tickdb:tickdb", cap=3):
    s = socket.create_connection(("127.0.0.1", node.ipc_port), timeout=10)
    s.sendall(creds + bytes([cap, 0]))
    return s, s.recv(1)


def frame(body: bytes, msg_type=1, big=False, length=None) -> bytes:
    n = 8 + len(body) if length is None else length
    if big:
        return bytes([0, msg_type, 0, 0]) + struct.pack(">I", n) + body
    return bytes([1, msg_type, 0, 0]) + struct.pack("<I", n) + body


def read_frame(s) -> bytes:
    h = b""
    while len(h) < 8:
        chunk = s.recv(8 - len(h))
        if not chunk:
            raise ConnectionError("closed")
        h += chunk
    n = struct.unpack("<I" if h[0] == 1 else ">I", h[4:8])[0]
    body = b""
    while len(body) < n - 8:
        chunk = s.recv(n - 8 - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return h + body


def error_of(msg: bytes) -> str | None:
    """The text of an error response (type -128), else None."""
    if msg[8] == 0x80:
        return msg[9:msg.index(0, 9)].decode()
    return None


def sync_string(s, text: str) -> bytes:
    s.sendall(frame(bytes([10, 0]) + struct.pack("<i", len(text)) + text.encode()))
    return read_frame(s)


# --- tests ------------------------------------------------------------------

def test_handshake_answers_the_shared_capability_and_refuses_bad_credentials(cluster):
    node = ipc_node(cluster)
    s, got = raw_login(node, cap=6)
    assert got == b"\x03", got  # capped at what tickdb speaks
    s.close()
    s, got = raw_login(node, cap=1)
    assert got == b"\x01"
    s.close()
    # An old client: no capability byte at all.
    s = socket.create_connection(("127.0.0.1", node.ipc_port), timeout=10)
    s.sendall(b"tickdb:tickdb\x00")
    assert s.recv(1) == b"\x00"
    s.close()
    for creds in (b"tickdb:wrong", b"nobody:tickdb", b"\xff\xfe:tickdb"):
        s, got = raw_login(node, creds=creds)
        assert got == b"", f"{creds!r} was let in"
        s.close()
    with pytest.raises(Exception):
        connect(node, password="wrong")
    # The node still serves everyone else.
    with connect(node) as q:
        assert sorted(q("tables[]").py()) == ["daily", "quote", "quote_1m", "trade", "trade_1m"]


def test_anonymous_access_only_with_the_flag(cluster):
    node = ipc_node(cluster, ["--ipc-no-auth"])
    s, got = raw_login(node, creds=b"anyone:anything")
    assert got == b"\x03"
    s.close()


def test_sync_upd_in_every_shape_reads_back_exactly_over_sql(cluster):
    node = ipc_node(cluster)
    t0 = 1_700_000_000_123_456_789
    with connect(node) as q:
        # One row of atoms, with its time.
        q(".u.upd", "trade", kx.toq([kx.toq(np.datetime64(t0, "ns")), kx.SymbolAtom("AAA"), kx.FloatAtom(1.25),
                                     kx.LongAtom(7)]))
        # Column vectors.
        q(".u.upd", kx.SymbolAtom("trade"),
          [timestamps([t0 + 1, t0 + 2]), kx.SymbolVector(["BBB", "CCC"]), kx.FloatVector([2.5, np.nan]),
           kx.LongVector([8, -9223372036854775808])])
        # `t insert data, the function as a symbol.
        q("insert", kx.SymbolAtom("trade"),
          [timestamps([t0 + 3]), kx.SymbolVector(["DDD"]), kx.FloatVector([math.inf]),
           kx.LongVector([9223372036854775807])])
    rows = sql_rows(node, "SELECT CAST(time AS BIGINT) AS t, sym, price, size FROM trade ORDER BY t")
    assert rows == [
        (t0, "AAA", 1.25, 7),
        (t0 + 1, "BBB", 2.5, 8),
        # q's nulls are SQL nulls.
        (t0 + 2, "CCC", None, None),
        # Infinities are values.
        (t0 + 3, "DDD", math.inf, 9223372036854775807),
    ], rows


def test_a_missing_time_column_is_stamped_by_the_tp(cluster):
    node = ipc_node(cluster)
    with connect(node) as q:
        before = time.time_ns()
        q(".u.upd", "trade", [kx.SymbolVector(["A", "B"]), kx.FloatVector([1.5, 2.5]),
                              kx.LongVector([10, 20])])
        after = time.time_ns()
    rows = sql_rows(node, "SELECT sym, price, size, CAST(time AS BIGINT) AS t FROM trade ORDER BY sym")
    assert [r[:3] for r in rows] == [("A", 1.5, 10), ("B", 2.5, 20)]
    for r in rows:
        assert before <= r[3] <= after, (before, r[3], after)


def test_async_writes_and_the_chaser(cluster):
    node = ipc_node(cluster)
    n = 300
    with connect(node) as q:
        for i in range(n):
            q(".u.upd", "quote", [kx.SymbolVector([f"S{i % 5}"]), kx.FloatVector([100.0 + i]),
                                  kx.FloatVector([100.5 + i]), kx.LongVector([i]), kx.LongVector([i + 1])],
              wait=False)
        # The chaser answers only once every earlier message is acknowledged.
        assert q("").py() is None
        got = sql_rows(node, "SELECT count(*), sum(bsize) FROM quote")[0]
        assert got == (n, sum(range(n))), got
        # A bad async write: nothing of it is applied, and the next chaser says so.
        q(".u.upd", "quote", [kx.SymbolVector(["X"]), kx.SymbolVector(["notaprice"]),
                              kx.FloatVector([1.0]), kx.LongVector([1]), kx.LongVector([1])], wait=False)
        with pytest.raises(Exception) as e:
            q("")
        assert "type" in str(e.value) and "bid" in str(e.value), str(e.value)
        # The connection goes on.
        assert q("").py() is None
    assert sql_rows(node, "SELECT count(*) FROM quote")[0][0] == n


def test_bad_writes_get_q_errors_and_nothing_is_applied(cluster):
    node = ipc_node(cluster)
    with connect(node) as q:
        cases = [
            (("nosuch", [kx.SymbolVector(["A"])]), "nosuch"),
            (("trade", [kx.SymbolVector(["A"]), kx.FloatVector([1.0])]), "length"),
            (("trade", [kx.FloatVector([1.0]), kx.FloatVector([1.0]), kx.LongVector([1])]), "type"),
            (("trade", [kx.SymbolVector(["A", "B"]), kx.FloatVector([1.0]), kx.LongVector([1, 2])]),
             "length"),
        ]
        for (table, data), code in cases:
            with pytest.raises(Exception) as e:
                q(".u.upd", kx.SymbolAtom(table), data)
            assert str(e.value).startswith(code) or code in str(e.value), (code, str(e.value))
        with pytest.raises(Exception) as e:
            q("hopen 5000")
        assert "nyi" in str(e.value)
    assert sql_rows(node, "SELECT count(*) FROM trade")[0][0] == 0


def seed_trades(node, n=500, seed=1):
    rng = np.random.default_rng(seed)
    print(f"seed {seed}")
    t0 = 1_704_187_800_000_000_000
    syms = np.array(["AAPL", "MSFT", "IBM", "GOOG"])[rng.integers(0, 4, n)]
    price = np.round(rng.uniform(10, 500, n), 2)
    size = rng.integers(1, 1000, n)
    with connect(node) as q:
        q(".u.upd", "trade", [timestamps([t0 + i * 1_000_000 for i in range(n)]),
                              kx.SymbolVector(list(syms)), kx.FloatVector(price), kx.LongVector(size)])
        q(".u.upd", "quote", [timestamps([t0 + i * 1_000_000 - 500 for i in range(n)]),
                              kx.SymbolVector(list(syms)), kx.FloatVector(price - 0.01),
                              kx.FloatVector(price + 0.01), kx.LongVector(size), kx.LongVector(size)])
    wait_count(node, "trade", n)
    wait_count(node, "quote", n)


def norm(v):
    """One cell, comparable across PyKX and psycopg: times as µs since the
    Unix epoch (psycopg's datetimes hold µs), NaN as None, numpy scalars as
    Python ones."""
    import datetime as dt
    if v is None:
        return None
    if hasattr(v, "value") and hasattr(v, "tz_localize"):  # pandas Timestamp
        return v.value // 1000
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return int(v.timestamp()) * 1_000_000 + v.microsecond
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, bytes):
        return v.decode()
    return v


def q_table(t) -> list[tuple]:
    """A q table (or keyed table) from PyKX as rows of comparable values."""
    df = t.pd()
    if df.index.names != [None]:
        df = df.reset_index()
    return [tuple(norm(v) for v in row) for row in df.itertuples(index=False)]


@pytest.mark.parametrize("qtext,sql", [
    ("s)SELECT sym, count(*) AS n, max(price) AS mx FROM trade GROUP BY sym ORDER BY sym",
     "SELECT sym, count(*) AS n, max(price) AS mx FROM trade GROUP BY sym ORDER BY sym"),
    ('.s.e"SELECT sym, sum(size) AS s FROM trade WHERE price > 100 GROUP BY sym ORDER BY sym"',
     "SELECT sym, sum(size) AS s FROM trade WHERE price > 100 GROUP BY sym ORDER BY sym"),
    ("select max price, sum size by sym from trade where price > 50",
     "SELECT sym, max(price) AS price, sum(size) AS size FROM trade WHERE price > 50 GROUP BY sym ORDER BY sym"),
    ("select from trade where sym in `AAPL`IBM, size within (100;200)",
     "SELECT time, sym, price, size FROM trade WHERE sym IN ('AAPL','IBM') AND size BETWEEN 100 AND 200"),
])
def test_queries_answer_as_postgresql_wire_does(cluster, qtext, sql):
    node = ipc_node(cluster)
    seed_trades(node)
    with connect(node) as q:
        got = q_table(q(qtext))
    want = [tuple(norm(v) for v in r) for r in sql_rows(node, sql)]
    if "ORDER BY" not in sql:
        got, want = sorted(got, key=str), sorted(want, key=str)
    assert len(got) > 0
    assert got == want


def test_count_meta_and_aj(cluster):
    node = ipc_node(cluster)
    seed_trades(node, n=200)
    with connect(node) as q:
        assert q("count trade").py() == 200
        meta = q("meta trade").pd().reset_index()
        assert list(meta["c"]) == ["time", "sym", "price", "size"]
        assert "".join(meta["t"].astype(str)) == "psfj"
        aj = q("aj[`sym`time; trade; quote]").pd()
        assert list(aj.columns) == ["time", "sym", "price", "size", "bid", "ask", "bsize", "asize"]
        assert len(aj) == 200
        assert np.allclose(aj["bid"], aj["price"] - 0.01)
        with pytest.raises(Exception) as e:
            q("count nosuch")
        assert "nosuch" in str(e.value)


def test_aiokdb_reads_every_answer_and_its_messages_are_read(cluster):
    node = ipc_node(cluster)
    s, cap = raw_login(node)
    assert cap == b"\x03"
    # aiokdb's own serializer writes the write: a table.
    from aiokdb import TypeEnum, cv, kk, ks, ktn, xd, xt

    def vec(t, values, get):
        v = ktn(t)
        getattr(v, get)().extend(values)
        return v

    time_col = vec(TypeEnum.KP, [1_700_000_000_000_000_000 - Q_EPOCH_NS], "kJ")
    sym = vec(TypeEnum.KS, ["ZZZ"], "kS")
    price = vec(TypeEnum.KF, [3.5], "kF")
    size = vec(TypeEnum.KJ, [42], "kJ")
    names = vec(TypeEnum.KS, ["time", "sym", "price", "size"], "kS")
    table = xt(xd(names, kk(time_col, sym, price, size)))
    call = kk(cv(".u.upd"), ks("trade"), table)
    s.sendall(b9(call, msgtype=MessageType.SYNC))
    answer = read_frame(s)
    assert error_of(answer) is None, error_of(answer)
    assert d9(answer).t == 101  # ::
    assert sql_rows(node, "SELECT sym, price, size FROM trade") == [("ZZZ", 3.5, 42)]
    # aiokdb decodes a query's table.
    r = d9(sync_string(s, "select from trade"))
    assert r.t == 98
    s.close()


def test_bad_messages_get_errors_and_the_server_keeps_serving(cluster):
    node = ipc_node(cluster, ["--ipc-message-bytes-max", str(1 << 20), "--ipc-depth-max", "8"])
    s, _ = raw_login(node)
    # A truncated object: a long vector of 3 items holding 1.
    e = error_of(sync_frame(s, bytes([7, 0]) + struct.pack("<i", 3) + struct.pack("<q", 1)))
    assert e and "truncated" in e, e
    # A length far larger than the message.
    e = error_of(sync_frame(s, bytes([7, 0]) + struct.pack("<i", 2**31 - 1)))
    assert e and "truncated" in e, e
    # An unknown type.
    e = error_of(sync_frame(s, bytes([77, 0])))
    assert e and "unknown" in e and "77" in e, e
    # Deep nesting.
    deep = b"".join(bytes([0, 0]) + struct.pack("<i", 1) for _ in range(20)) + bytes([101, 0])
    e = error_of(sync_frame(s, deep))
    assert e and "nested" in e, e
    # The same connection still answers.
    assert error_of(sync_string(s, "")) is None
    # A message over the size bound: an error, then the connection closes.
    s.sendall(frame(b"", length=(1 << 20) + 1))
    e = error_of(read_frame(s))
    assert e and "bound" in e, e
    with pytest.raises((ConnectionError, OSError)):
        read_frame(s)
    s.close()
    # A header that lies about the byte order: error and close.
    s, _ = raw_login(node)
    s.sendall(bytes([7, 1, 0, 0, 9, 0, 0, 0, 0]))
    e = error_of(read_frame(s))
    assert e and "byte order" in e, e
    s.close()
    # A client that sends half a message and disconnects harms nobody.
    s, _ = raw_login(node)
    s.sendall(frame(bytes([7, 0]) + struct.pack("<i", 1), length=100))
    s.close()
    with connect(node) as q:
        assert q("").py() is None
    assert sql_rows(node, "SELECT count(*) FROM trade")[0][0] == 0


def sync_frame(s, body: bytes) -> bytes:
    s.sendall(frame(body))
    return read_frame(s)


def test_big_endian_messages_are_read(cluster):
    node = ipc_node(cluster)
    s, _ = raw_login(node)
    text = b"tables[]"
    body = bytes([10, 0]) + struct.pack(">i", len(text)) + text
    s.sendall(frame(body, big=True))
    r = read_frame(s)
    assert error_of(r) is None, error_of(r)
    assert d9(r).t == 11
    s.close()


def test_our_compressed_messages_decompress_with_aiokdb():
    """The compressor's output against an independent decompressor (aiokdb's),
    on tick-like tables. The example prints raw and compressed messages."""
    exe = ROOT / "target" / "debug" / "examples" / "qmsg"
    if not exe.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "tickdb-ipc", "--example", "qmsg"], cwd=ROOT,
                       check=True, timeout=600)
    for rows in (200, 2000, 20000):
        out = subprocess.run([str(exe), str(rows)], capture_output=True, check=True, timeout=60).stdout
        raw_len = struct.unpack("<I", out[:4])[0]
        raw, zipped = out[4:4 + raw_len], out[4 + raw_len:]
        assert zipped[2] == 1, "the example's message was not compressed"
        assert len(zipped) < len(raw) / 2
        # aiokdb's decompressor takes the stream after the header and gives
        # back the body after the header.
        assert bytes(decompress(zipped[8:])) == raw[8:]
        assert d9(zipped).t == 98


ALL_TYPES_SCHEMA = """
[[table]]
name = "wide"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "f", type = "f64" },
  { name = "j", type = "i64" },
  { name = "i", type = "i32" },
  { name = "b", type = "bool" },
  { name = "s", type = "string" },
  { name = "x", type = "bytes" },
]
"""


def test_every_column_type_round_trips_ipc_to_sql_and_back(cluster, tmp_path):
    schema = tmp_path / "wide.toml"
    schema.write_text(ALL_TYPES_SCHEMA)
    node = ipc_node(cluster, ["--schema", str(schema)])
    t0 = 1_700_000_000_000_000_001
    s, _ = raw_login(node)
    from aiokdb import TypeEnum, cv, kk, ks, ktn

    def vec(t, values, get):
        v = ktn(t)
        getattr(v, get)().extend(values)
        return v

    def bytes_vec(b):
        v = ktn(TypeEnum.KG)
        v.kG().extend(b)
        return v

    strings = kk(cv("héllo"), cv(""))
    blobs = kk(bytes_vec(b"\x00\x01"), bytes_vec(b""))
    cols = kk(vec(TypeEnum.KP, [t0 - Q_EPOCH_NS, -9223372036854775808], "kJ"),
              vec(TypeEnum.KS, ["A", ""], "kS"),
              vec(TypeEnum.KF, [-1.5, float("nan")], "kF"),
              vec(TypeEnum.KJ, [-(2**62), -9223372036854775808], "kJ"),
              # (aiokdb packs ints unsigned: its int null cannot be sent)
              vec(TypeEnum.KI, [2**31 - 1, 5], "kI"),
              vec(TypeEnum.KB, [1, 0], "kG"),
              strings, blobs)
    s.sendall(b9(kk(ks(".u.upd"), ks("wide"), cols), msgtype=MessageType.SYNC))
    r = read_frame(s)
    assert error_of(r) is None, error_of(r)
    rows = sql_rows(node, "SELECT CAST(time AS BIGINT) AS t, sym, f, j, i, b, s, x FROM wide ORDER BY j DESC NULLS LAST")
    assert rows == [
        (t0, "A", -1.5, -(2**62), 2**31 - 1, True, "héllo", b"\x00\x01"),
        # Every q null is a SQL null; a q boolean has none.
        (None, None, None, None, 5, False, "", b""),
    ], rows
    # And back over IPC with the q types and nulls.
    r = d9(sync_string(s, "s)SELECT f, j, i, b FROM wide ORDER BY j DESC NULLS LAST"))
    assert r.t == 98
    s.close()


def test_u_end_reaches_subscribers_at_end_of_day(cluster):
    node = ipc_node(cluster)
    s, _ = raw_login(node)
    from aiokdb import kk, ks
    s.sendall(b9(kk(ks(".u.sub"), ks("trade"), ks("")), msgtype=MessageType.SYNC))
    ans = d9(read_frame(s))
    assert ans.t == 0  # (`trade; empty table)
    import requests
    r = requests.post(node.url + "/write", data="trade,sym=A price=1.5,size=1i 1700000000000000000\n",
                      timeout=10)
    assert r.status_code == 204
    upd = d9(read_frame(s))
    assert upd.kK()[0].aS() == "upd" and upd.kK()[1].aS() == "trade"
    assert upd.kK()[2].t == 98
    # Clearing the tables is not an end of day: no .u.end for it.
    r = requests.post(node.url + "/clear", params={"tables": "*"}, timeout=10)
    assert r.status_code == 200, r.text
    r = requests.post(node.url + "/admin/eod", params={"date": "2026-11-20"}, timeout=10)
    assert r.status_code == 200, r.text
    end = d9(read_frame(s))  # the first message after the update
    assert end.kK()[0].aS() == ".u.end", end
    # The day that ended, as a kdb+ date: days since 2000.01.01.
    assert end.kK()[1].aI() == 9820, end

    def ipc_subscribers():
        st = requests.get(node.url + "/status", timeout=10).json()
        return [x for x in st["tp"]["subscribers"] if x["name"].startswith("ipc ")]

    assert len(ipc_subscribers()) == 1
    s.close()
    # The subscriber is dropped when its socket closes.
    deadline = time.monotonic() + 10
    while ipc_subscribers():
        assert time.monotonic() < deadline, ipc_subscribers()
        time.sleep(0.05)


def test_functional_select_and_the_roles_that_serve_what(cluster, tmp_path):
    node = ipc_node(cluster)
    seed_trades(node, n=100, seed=3)
    with connect(node) as q:
        got = q_table(q("?[trade;enlist(in;`sym;`AAPL`IBM);(enlist`sym)!enlist`sym;`mx`n!((max;`price);(count;`i))]"))
    want = [tuple(norm(v) for v in r) for r in sql_rows(
        node, "SELECT sym, max(price), count(*) FROM trade WHERE sym IN ('AAPL','IBM') GROUP BY sym ORDER BY sym")]
    assert got == want
    # A tp takes writes and subscriptions but answers no query; an rdb
    # answers queries but takes no write.
    tp_ipc = free_port()
    tp = cluster.tp(data_dir=tmp_path / "tp", extra=["--ipc-port", str(tp_ipc)])
    tp.ipc_port = tp_ipc
    with connect(tp) as q:
        q(".u.upd", "trade", [kx.SymbolVector(["A"]), kx.FloatVector([1.0]), kx.LongVector([1])])
        with pytest.raises(Exception) as e:
            q("select from trade")
        assert "nyi" in str(e.value) and "rdb" in str(e.value), str(e.value)
    rdb_ipc = free_port()
    rdb = cluster.rdb(tp.tp_port, extra=["--ipc-port", str(rdb_ipc)])
    rdb.ipc_port = rdb_ipc
    deadline = time.monotonic() + 30
    while True:
        with connect(rdb) as q:
            try:
                if q("count trade").py() == 1:
                    break
            except Exception:
                pass
        assert time.monotonic() < deadline, "the rdb never answered over IPC"
        time.sleep(0.1)
    with connect(rdb) as q:
        with pytest.raises(Exception) as e:
            q(".u.upd", "trade", [kx.SymbolVector(["A"]), kx.FloatVector([1.0]), kx.LongVector([1])])
        assert "no writes" in str(e.value), str(e.value)


def test_the_feed_publishes_over_ipc(cluster, tmp_path):
    from harness import run
    node = ipc_node(cluster)
    summary = tmp_path / "feed.json"
    r = run(["feed", "--ipc", f"127.0.0.1:{node.ipc_port}", "--rate", "5000", "--duration", "1",
             "--seed", "7", "--summary", str(summary)], timeout=60)
    assert r.returncode == 0, r.stderr
    import json
    s = json.loads(summary.read_text())
    assert s["rows"] > 1000
    # The chaser came back: every row is journaled and applied.
    got = sql_rows(node, "SELECT (SELECT count(*) FROM trade) + (SELECT count(*) FROM quote)")[0][0]
    assert got == s["rows"] == s["trades"] + s["quotes"], (got, s)


def test_answers_to_a_client_off_loopback_are_compressed_as_kdb_does(cluster):
    """The node in its own network namespace, the client in the root one:
    the client is not on loopback, so an answer over 2000 bytes that
    compresses to under half goes compressed (and a small one does not)."""
    from faultnet import FaultNet, have_netns
    ok, why = have_netns()
    if not ok:
        pytest.skip(f"needs network namespaces: {why}")
    with FaultNet(mode="netns") as net:
        where = net.add_node("ipc")
        port = free_port()
        node = cluster.up(start=False, extra=["--bind", where.ip, "--no-protected-mode", "--ipc-port", str(port)])
        where.place(node)
        node.start()
        s = socket.create_connection((where.ip, port), timeout=10)
        s.sendall(b"tickdb:tickdb\x03\x00")
        assert s.recv(1) == b"\x03"
        n = 5000
        lines = "".join(f"trade,sym=S{i % 4} price=100.5,size=100i {1_700_000_000_000_000_000 + i}\n"
                        for i in range(n))
        import requests
        assert requests.post(node.url + "/write", data=lines, timeout=30).status_code == 204
        big = sync_string(s, "select from trade")
        assert big[2] == 1, "a large, repetitive answer off loopback must be compressed"
        plain_len = struct.unpack("<I", big[8:12])[0]
        assert len(big) < plain_len / 2
        t = d9(big)
        assert t.t == 98
        small = sync_string(s, "count trade")
        assert small[2] == 0 and d9(small).aJ() == n
        s.close()
        node.kill9()
