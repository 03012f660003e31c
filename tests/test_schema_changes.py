"""Schema changes at run time: CREATE TABLE and ALTER TABLE ... ADD COLUMN
over HTTP /exec and PostgreSQL wire (psycopg), by an admin, journaled in
order with the data. Checked: DDL during ingest; a replay after kill -9
gives the same schema and rows; a remote rdb (live, and one that replays
from scratch) sees the change where it happened (rows before it have a
null in the new column, rows after it their values); a non-admin's DDL is
refused and nothing is applied; a bad DDL gets an error naming what was
wrong; --ilp-auto-create makes tables and columns from ILP lines with
QuestDB's types, and without the flag an unknown name is still refused."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import psycopg
import pytest
import requests

from harness import BIN
from test_ipc import read_frame

T0 = 1_700_000_000_000_000_000
SYMS = ["AAA", "BBB", "CCC"]


def ddl(node, sql: str, auth=None) -> requests.Response:
    return requests.post(node.url + "/exec", data=sql, auth=auth, timeout=30)


def ok_ddl(node, sql: str, auth=None) -> int | None:
    r = ddl(node, sql, auth)
    assert r.status_code == 200, f"{sql}: {r.status_code} {r.text}"
    body = r.json()
    assert body["ddl"] == "OK", body
    return body["seq"]


def write(node, lines: list[str], auth=None) -> requests.Response:
    return requests.post(node.url + "/write", data="\n".join(lines) + "\n", auth=auth, timeout=30)


def columns(node, table: str) -> list[tuple[str, str]]:
    return [tuple(r) for r in node.exec(
        "select column_name, data_type from information_schema.columns "
        f"where table_name = '{table}' order by ordinal_position")]


class Writer:
    """Writes numbered trades (size = a unique id) over HTTP in a thread;
    after `with_venue` is set, each row also names a venue. Counts what the
    tp acknowledged."""

    def __init__(self, node, rng):
        self.node, self.rng = node, rng
        self.next_id = 0
        self.acked = 0
        self.acked_with_venue = 0
        self.size_sum = 0
        self.with_venue = threading.Event()
        self.stop = threading.Event()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write_once(self, session=requests) -> None:
        venue = self.with_venue.is_set()
        lines, ids = [], []
        for _ in range(50):
            self.next_id += 1
            sym = self.rng.choice(SYMS)
            tags = f"trade,sym={sym}" + (",venue=XNYS" if venue else "")
            lines.append(f"{tags} price=1.5,size={self.next_id}i {T0 + self.next_id}")
            ids.append(self.next_id)
        r = session.post(self.node.url + "/write", data="\n".join(lines) + "\n", timeout=30)
        assert r.status_code == 204, r.text
        self.acked += len(ids)
        self.size_sum += sum(ids)
        if venue:
            self.acked_with_venue += len(ids)

    def _run(self) -> None:
        s = requests.Session()
        try:
            while not self.stop.is_set():
                self.write_once(s)
        except Exception as e:  # surfaced by finish()
            self.error = e

    def start(self) -> "Writer":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        if self.error:
            raise self.error


def wait_for(node, sql: str, want, timeout: float = 30):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        r = requests.get(node.url + "/exec", params={"query": sql}, timeout=30)
        if r.status_code == 200:
            got = r.json()["dataset"]
            if got == want:
                return got
        time.sleep(0.05)
    raise AssertionError(f"{sql}: {got}, want {want}\n{node.log_tail()}")


def snapshot(node) -> dict:
    """What a replay must reproduce: the schema and the rows."""
    return {
        "trade_columns": columns(node, "trade"),
        "news_columns": columns(node, "news"),
        "trade": node.exec("select count(*), sum(size), count(venue) from trade"),
        "venue_by_id": node.exec(
            "select min(size), max(size) from trade where venue is not null"),
        "null_venue_max_id": node.exec("select max(size) from trade where venue is null"),
        "news": node.exec("select sym, headline from news order by time"),
    }


def test_ddl_during_ingest_and_replay_after_kill9_gives_the_same_schema_and_rows(cluster, rng):
    node = cluster.up()
    w = Writer(node, rng)
    w.write_once()
    w.start()
    time.sleep(0.3)
    alter_seq = ok_ddl(node, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    assert alter_seq is not None
    # A query right after the statement sees the column.
    assert [c for c, _ in columns(node, "trade")] == ["time", "sym", "price", "size", "venue"]
    w.with_venue.set()
    ok_ddl(node, "CREATE TABLE news (time TIMESTAMP, sym SYMBOL, headline VARCHAR)")
    r = write(node, [f"news,sym=AAA headline=\"up\" {T0 + 1}", f"news,sym=BBB headline=\"down\" {T0 + 2}"])
    assert r.status_code == 204, r.text
    time.sleep(0.3)
    w.finish()
    n = wait_for(node, "select count(*) from trade", [[w.acked]])
    assert n == [[w.acked]]
    n, s, v = node.exec("select count(*), sum(size), count(venue) from trade")[0]
    assert (n, s) == (w.acked, w.size_sum)
    # Every row written with a venue has it; rows written before the ALTER
    # (and any checked before it and journaled after) read as null.
    assert v == w.acked_with_venue
    lo, _ = node.exec("select min(size), max(size) from trade where venue is not null")[0]
    assert node.scalar(f"select count(*) from trade where size < {lo} and venue is not null") == 0
    before = snapshot(node)
    assert [c for c, _ in before["news_columns"]] == ["time", "sym", "headline"]

    node.kill9()
    again = cluster.up(data_dir=node.data_dir)
    wait_for(again, "select count(*) from trade", [[w.acked]])
    assert snapshot(again) == before
    # The journal tools decode every record under its own schema.
    v = subprocess.run([BIN, "journal", "verify", str(node.data_dir / "journal")],
                       capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_remote_rdb_sees_the_change_where_it_happened(cluster):
    node = cluster.up()
    live = cluster.rdb(node.tp_port)
    before = [f"trade,sym=AAA price=1.5,size={i}i {T0 + i}" for i in range(1, 11)]
    assert write(node, before).status_code == 204
    wait_for(live, "select count(*) from trade", [[10]])
    seq = ok_ddl(node, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    after = [f"trade,sym=AAA,venue=XLON price=2.5,size={i}i {T0 + i}" for i in range(11, 21)]
    assert write(node, after).status_code == 204
    # One that replays the whole journal from the tp, marker included.
    replay = cluster.rdb(node.tp_port)
    want = [[10, 10, 0, 10]]
    sql = ("select count(*) filter (where size <= 10), count(*) filter (where size > 10), "
           "count(venue) filter (where size <= 10), count(venue) filter (where size > 10) from trade")
    for rdb in (live, replay):
        wait_for(rdb, sql, want)
        assert rdb.exec("select distinct venue from trade where size > 10") == [["XLON"]]
        assert rdb.status()["seq"] >= seq
    # An rdb has no tp to change the schema with: it says where to.
    r = ddl(live, "ALTER TABLE trade ADD COLUMN x DOUBLE")
    assert r.status_code == 400 and "no tickerplant" in r.json()["message"], r.text


@pytest.fixture
def users(tmp_path):
    entries = []
    for name, roles in [("reader", ["read"]), ("writer", ["write"]), ("ops", ["admin"])]:
        p = subprocess.run([BIN, "user", "add", name, *sum((["--role", r] for r in roles), [])],
                           input=f"{name}-pw-1\n", capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        entries.append(p.stdout)
    f = tmp_path / "users.toml"
    f.write_text("\n".join(entries))
    return f


def auth(name: str) -> tuple[str, str]:
    return (name, f"{name}-pw-1")


def pg(node, user: str):
    return psycopg.connect(host="127.0.0.1", port=node.pg_port, user=user, password=f"{user}-pw-1",
                           dbname="tickdb", sslmode="disable", autocommit=True, connect_timeout=10)


def test_only_an_admin_changes_the_schema_and_a_refusal_applies_nothing(cluster, users):
    node = cluster.up(extra=["--users", str(users)])
    seq0 = requests.get(node.url + "/status", auth=auth("ops"), timeout=10).json()["tp"]["seq"]
    alter = "ALTER TABLE trade ADD COLUMN venue SYMBOL"
    r = ddl(node, alter)
    assert r.status_code == 401, r.text
    r = ddl(node, alter, auth("writer"))
    assert r.status_code == 403, r.text
    r = ddl(node, alter, auth("reader"))
    assert r.status_code == 403 and "need admin" in r.json()["message"], r.text
    with pg(node, "reader") as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute("CREATE TABLE news (time TIMESTAMP, headline VARCHAR)")
        assert e.value.sqlstate == "42501", e.value
    status = requests.get(node.url + "/status", auth=auth("ops"), timeout=10).json()
    assert status["tp"]["seq"] == seq0, "a refused DDL journals nothing"
    r = requests.get(node.url + "/exec", params={"query": "select venue from trade"},
                     auth=auth("reader"), timeout=10)
    assert r.status_code == 400, r.text
    # The admin may, over both fronts.
    assert ok_ddl(node, alter, auth("ops")) == seq0 + 1
    with pg(node, "ops") as c:
        c.execute("CREATE TABLE news (time TIMESTAMP, headline VARCHAR)")
        c.execute("ALTER TABLE news ADD COLUMN score DOUBLE")
    with pg(node, "reader") as c:
        assert c.execute("select count(*) from news").fetchone() == (0,)
        cols = [r[0] for r in c.execute(
            "select column_name from information_schema.columns where table_name = 'news' "
            "order by ordinal_position").fetchall()]
        assert cols == ["time", "headline", "score"]


def test_a_bad_ddl_says_what_was_wrong_and_changes_nothing(cluster):
    node = cluster.up()
    cases = [
        ("CREATE TABLE t (time TIMESTAMP, x DECIMAL(10,2))", "column 'x': unknown column type DECIMAL(10,2)"),
        ("ALTER TABLE trade ADD COLUMN price DOUBLE", "table 'trade' already has a column 'price'"),
        ("CREATE TABLE trade (time TIMESTAMP, x DOUBLE)", "table 'trade' already exists"),
        ("ALTER TABLE nosuch ADD COLUMN x DOUBLE", "no table 'nosuch'"),
        ("CREATE TABLE t (x DOUBLE)", "needs a timestamp column"),
        ("ALTER TABLE trade DROP COLUMN size", "only ADD COLUMN"),
        ("CREATE TABLE t (time TIMESTAMP, time DOUBLE)", "column 'time' is given twice"),
    ]
    seq0 = node.status()["tp"]["seq"]
    for sql, want in cases:
        r = ddl(node, sql)
        assert r.status_code == 400, f"{sql}: {r.status_code} {r.text}"
        assert want in r.json()["message"], f"{sql}: {r.text}"
    assert node.status()["tp"]["seq"] == seq0
    assert [c for c, _ in columns(node, "trade")] == ["time", "sym", "price", "size"]
    # IF NOT EXISTS of what exists is fine and journals nothing.
    assert ok_ddl(node, "ALTER TABLE trade ADD COLUMN IF NOT EXISTS price DOUBLE") is None
    assert node.status()["tp"]["seq"] == seq0


def test_ilp_auto_create_makes_tables_and_columns_with_questdbs_types(cluster):
    plain = cluster.up()
    r = write(plain, [f"weather,city=London temp=12.5 {T0}"])
    assert r.status_code == 400 and "unknown table 'weather'" in r.text, r.text
    plain.kill9()

    node = cluster.up(extra=["--ilp-auto-create"])
    r = write(node, [
        f'weather,city=London,station=a1 temp=12.5,hum=80i,ok=t,note="dry",seen=1700000000000000t {T0 + 1}',
        f"trade,sym=AAA price=1.5,size=1i,exch=\"Q\" {T0 + 2}",
    ])
    assert r.status_code == 204, r.text
    # The acknowledgement means journaled; the rdb applies the change (and
    # the query engine sees the new table) just after, as it does rows.
    deadline = time.monotonic() + 10
    while not (cols := dict(columns(node, "weather"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(cols) == ["city", "station", "temp", "hum", "ok", "note", "seen", "timestamp"]
    assert cols["temp"] == "Float64" and cols["hum"] == "Int64" and cols["ok"] == "Boolean"
    assert cols["note"] == "Utf8" and cols["seen"].startswith("Timestamp")
    assert cols["timestamp"].startswith("Timestamp") and "Dictionary" in cols["city"]
    assert node.exec("select city, temp, hum, ok, note from weather") == [["London", 12.5, 80, True, "dry"]]
    # The line's trailing timestamp fills the designated `timestamp`.
    assert node.scalar('select cast("timestamp" as bigint) from weather') == T0 + 1
    assert [c for c, _ in columns(node, "trade")][-1] == "exch"
    # Over ILP TCP too, a column and a table at once.
    with socket.create_connection(("127.0.0.1", node.ilp_port), timeout=10) as s:
        s.sendall(f"weather,city=Paris temp=9.5,wind=3.5 {T0 + 3}\nsensor,id=s1 v=1i {T0 + 4}\n".encode())
    wait_for(node, "select count(*) from sensor", [[1]])
    wait_for(node, "select city, wind from weather where wind is not null", [["Paris", 3.5]])


def test_a_standby_sees_the_change_and_catches_up_on_one_it_missed(cluster, monkeypatch):
    monkeypatch.setenv("TICKDB_REPL_SECRET", "schema-change-test-secret-0123456789")
    p = cluster.up(data_dir=cluster.tmp / "p")
    s = cluster.up(data_dir=cluster.tmp / "s", extra=["--standby-of", f"127.0.0.1:{p.repl_port}"])
    assert write(p, [f"trade,sym=AAA price=1.5,size={i}i {T0 + i}" for i in range(1, 6)]).status_code == 204
    ok_ddl(p, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    assert write(p, [f"trade,sym=AAA,venue=XNYS price=1.5,size={i}i {T0 + i}"
                     for i in range(6, 11)]).status_code == 204
    wait_for(s, "select count(*), count(venue) from trade", [[10, 5]])
    # The standby refuses DDL as it refuses writes.
    r = ddl(s, "ALTER TABLE trade ADD COLUMN fee DOUBLE")
    assert r.status_code == 400 and "standby" in r.json()["message"], r.text
    # Away while the primary adds another column: it catches up through it.
    s.kill9()
    ok_ddl(p, "ALTER TABLE trade ADD COLUMN fee DOUBLE")
    assert write(p, [f"trade,sym=AAA,venue=XLON price=1.5,size={i}i,fee=0.5 {T0 + i}"
                     for i in range(11, 16)]).status_code == 204
    s2 = cluster.up(data_dir=cluster.tmp / "s", extra=["--standby-of", f"127.0.0.1:{p.repl_port}"])
    sql = "select count(*), count(venue), count(fee), sum(size) from trade"
    assert wait_for(s2, sql, p.exec(sql)) == [[15, 10, 5, 120]]
    c = subprocess.run([BIN, "journal", "compare", str(p.data_dir / "journal"), str(s2.data_dir / "journal"),
                        "--exact"], capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stdout + c.stderr
    # The standby recorded each change as its primary did, byte for byte.
    assert (p.data_dir / "journal" / "SCHEMA").read_bytes() == (s2.data_dir / "journal" / "SCHEMA").read_bytes()


def test_hot_restart_checkpoints_before_and_after_the_change_restore(cluster):
    hot = cluster.tmp / "hot"
    extra = ["--hot-restart", str(hot), "--checkpoint-interval-s", "1"]
    node = cluster.up(extra=extra)
    assert write(node, [f"trade,sym=AAA price=1.5,size={i}i {T0 + i}" for i in range(1, 11)]).status_code == 204
    time.sleep(1.6)  # a checkpoint under the old schema
    ok_ddl(node, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    node.kill9()
    # Restored under the checkpoint's schema, then the journal's change.
    node = cluster.up(data_dir=node.data_dir, extra=extra)
    wait_for(node, "select count(*), count(venue) from trade", [[10, 0]])
    assert write(node, [f"trade,sym=AAA,venue=XNYS price=1.5,size={i}i {T0 + i}"
                        for i in range(11, 21)]).status_code == 204
    time.sleep(1.6)  # a checkpoint holding rows of both layouts
    assert write(node, [f"trade,sym=AAA,venue=XLON price=1.5,size={i}i {T0 + i}"
                        for i in range(21, 26)]).status_code == 204
    sql = "select count(*), count(venue), sum(size) from trade"
    want = node.exec(sql)
    assert want == [[25, 15, 325]]
    node.kill9()
    node = cluster.up(data_dir=node.data_dir, extra=extra)
    wait_for(node, sql, want)
    assert "restored" in node.log_tail(200)


def test_a_kdb_subscriber_gets_the_new_column_from_the_change_on(cluster):
    from aiokdb import MessageType, b9, d9, kk, ks
    from harness import free_port

    port = free_port()
    node = cluster.up(extra=["--ipc-port", str(port)])
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"tickdb:tickdb" + bytes([3, 0]))
    assert s.recv(1)
    s.sendall(b9(kk(ks(".u.sub"), ks("trade"), ks("")), msgtype=MessageType.SYNC))
    d9(read_frame(s))
    assert write(node, [f"trade,sym=AAA price=1.5,size=1i {T0 + 1}"]).status_code == 204
    upd = d9(read_frame(s))
    assert list(upd.kK()[2].kS()) == ["time", "sym", "price", "size"]
    ok_ddl(node, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    assert write(node, [f"trade,sym=AAA,venue=XNYS price=1.5,size=2i {T0 + 2}"]).status_code == 204
    upd = d9(read_frame(s))
    table = upd.kK()[2]
    assert list(table.kS()) == ["time", "sym", "price", "size", "venue"]
    assert list(table.kK()[4].kS()) == ["XNYS"]
    s.close()


def test_history_written_before_a_column_was_added_reads_null_in_it(cluster, tmp_path):
    from test_history import end_of_day

    node = cluster.up(extra=["--hdb", str(tmp_path / "hdb")])
    d1 = 1_763_596_800_000_000_000  # 2025-11-20T00:00:00Z
    assert write(node, [f"trade,sym=AAA price=1.5,size={i}i {d1 + i}" for i in range(1, 6)]).status_code == 204
    end_of_day(node, "2025-11-20")
    ok_ddl(node, "ALTER TABLE trade ADD COLUMN venue SYMBOL")
    assert write(node, [f"trade,sym=AAA,venue=XNYS price=1.5,size={i}i {d1 + 86_400_000_000_000 + i}"
                        for i in range(6, 9)]).status_code == 204
    sql = "select date, count(*), count(venue) from trade group by date order by date"
    got = wait_for(node, "select count(*) from trade", [[8]])
    assert got == [[8]]
    rows = node.exec(sql)
    assert [r[1:] for r in rows] == [[5, 0], [3, 3]], rows
    end_of_day(node, "2025-11-21")
    rows = node.exec(sql)
    assert [r[1:] for r in rows] == [[5, 0], [3, 3]], rows


def test_a_tp_without_tables_takes_ddl_on_exec_and_its_rdb_follows(cluster):
    tp = cluster.tp()
    rdb = cluster.rdb(tp.tp_port)
    assert write(tp, [f"trade,sym=AAA price=1.5,size=1i {T0 + 1}"]).status_code == 204
    seq = ok_ddl(tp, "CREATE TABLE news (time TIMESTAMP, sym SYMBOL, headline VARCHAR)")
    assert seq == 2
    assert write(tp, [f'news,sym=AAA headline="up" {T0 + 2}']).status_code == 204
    wait_for(rdb, "select sym, headline from news", [["AAA", "up"]])
    # A query is for an rdb.
    r = requests.get(tp.url + "/exec", params={"query": "select 1"}, timeout=10)
    assert r.status_code == 400 and "send queries to an rdb" in r.json()["message"], r.text
