"""Bad input gets a clear error naming what and where; nothing of a rejected
request is applied; the server keeps serving everyone else."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import requests

from harness import free_port, run

GOOD = "trade,sym=OK price=1.5,size=10i 1700000000000000000\n"


def post(db, body: str | bytes, path: str = "/write"):
    return requests.post(db.url + path, data=body, timeout=30)


def still_serving(db) -> None:
    before = db.scalar("select count(*) from trade")
    r = post(db, GOOD)
    assert r.status_code == 204, r.text
    # The ack means journaled; the rdb applies it just after (asynchronously).
    assert db.wait_rows("trade", before + 1, timeout=10) == before + 1


@pytest.fixture
def db(cluster):
    return cluster.up(extra=["--line-bytes-max", "1024", "--request-bytes-max", "100000"])


@pytest.mark.parametrize(
    "bad_line, words",
    [
        ("trade,sym=A price=1.5,size=", ["line 3"]),
        ("nosuchtable,sym=A price=1.5 1", ["line 3", "nosuchtable"]),
        ("trade,sym=A price=1.5,size=1i,colour=3i 1", ["line 3", "colour"]),
        ('trade,sym=A price="high",size=1i 1', ["line 3", "price"]),
        ("trade,sym=A price=1.5,size=1.5 1", ["line 3", "size"]),
        ("trade,sym=A price=1.5,size=1i notatime", ["line 3"]),
    ],
)
def test_bad_line_over_http_rejects_the_whole_request(db, bad_line, words):
    body = GOOD + GOOD + bad_line + "\n" + GOOD
    r = post(db, body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["line"] == 3
    for w in words:
        assert w in err["message"], err
    # All or nothing: not even the two good lines before it were applied.
    assert db.scalar("select count(*) from trade") == 0
    still_serving(db)


def test_api_v2_write_path_too(db):
    r = post(db, "trade,sym=A price=oops 1\n", path="/api/v2/write")
    assert r.status_code == 400 and r.json()["line"] == 1
    assert post(db, GOOD, path="/api/v2/write").status_code == 204


def test_line_over_its_bound(db):
    long_sym = "X" * 2000
    r = post(db, GOOD + f"trade,sym={long_sym} price=1.5,size=1i 1\n")
    assert r.status_code == 400, r.text
    assert r.json()["line"] == 2
    assert "1024" in r.json()["message"]
    assert db.scalar("select count(*) from trade") == 0
    still_serving(db)


def test_request_over_its_bound(db):
    body = GOOD * (100_000 // len(GOOD) + 10)
    r = post(db, body)
    assert r.status_code == 413, r.text
    assert "100000" in r.json()["message"]
    assert db.scalar("select count(*) from trade") == 0
    still_serving(db)


def test_bad_line_over_tcp_closes_only_that_connection(db):
    good = socket.create_connection(("127.0.0.1", db.ilp_port))
    bad = socket.create_connection(("127.0.0.1", db.ilp_port))
    try:
        bad.sendall((GOOD + "trade,sym=B price=notanumber 1\n").encode())
        bad.settimeout(10)
        # The server closes the connection after the bad line (ILP convention).
        assert bad.recv(1) == b""
        good.sendall(GOOD.encode())
        # The good line before the bad one is kept; the other connection works.
        deadline = time.monotonic() + 10
        while db.scalar("select count(*) from trade") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.scalar("select count(*) from trade") == 2
    finally:
        good.close()
        bad.close()
    log = db.log.read_text()
    assert "line 2" in log and "price" in log, log[-2000:]
    still_serving(db)


def test_bad_queries_get_clear_errors_and_the_server_goes_on(db):
    r = requests.get(db.url + "/exec", params={"query": "select nosuchcol from trade"}, timeout=10)
    assert r.status_code == 400 and "nosuchcol" in r.text
    r = requests.get(db.url + "/exec", params={"query": "select * from nosuchtable"}, timeout=10)
    assert r.status_code == 400 and "nosuchtable" in r.text
    r = requests.get(db.url + "/exec", params={"query": "selec 1"}, timeout=10)
    assert r.status_code == 400
    still_serving(db)


def test_port_in_use_fails_start_with_one_clear_line(cluster):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        p = cluster.up(http=busy, start=False)
        p.start(wait_ready=False)
        rc = p.wait_exit(timeout=30)
        assert rc != 0
        err = [l for l in p.log.read_text().splitlines() if "tickdb:" in l]
        assert len(err) == 1 and str(busy) in err[0] and "in use" in err[0], p.log.read_text()


def test_rp_lets_two_rdbs_share_a_port(cluster):
    tp = cluster.tp()
    port = free_port()
    a = cluster.rdb(tp.tp_port, http=f"rp,{port}")
    b = cluster.rdb(tp.tp_port, http=f"rp,{port}")
    assert requests.post(tp.url + "/write", data=GOOD, timeout=10).status_code == 204
    for r in (a, b):
        r.wait_rows("trade", 1)
    # Without rp the same port is refused.
    c = cluster.rdb(tp.tp_port, http=port, start=False)
    c.start(wait_ready=False)
    assert c.wait_exit(timeout=30) != 0
    assert str(port) in c.log.read_text()


def test_unwritable_data_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    r = run(["tp", "--data-dir", str(blocker / "data"), "--http-port", str(free_port()),
             "--ilp-port", str(free_port()), "--tp-port", str(free_port()), "--repl-port", str(free_port())])
    assert r.returncode != 0
    assert "journal directory" in r.stderr and str(blocker) in r.stderr, r.stderr


def test_bad_schema_file_is_a_clear_error(tmp_path):
    schema = tmp_path / "schema.toml"
    schema.write_text("[tables.trade]\ncolumns = [{ name = 'time', type = 'timestamp' }, { name = 'x', type = 'decimal' }]\n")
    r = run(["tp", "--schema", str(schema), "--data-dir", str(tmp_path / "d"), "--http-port", str(free_port()),
             "--ilp-port", str(free_port()), "--tp-port", str(free_port()), "--repl-port", str(free_port())])
    assert r.returncode != 0
    assert "schema.toml" in r.stderr, r.stderr


def test_help_answers(tmp_path):
    for args in (["--help"], ["up", "--help"], ["tp", "--help"], ["rdb", "--help"], ["journal", "--help"]):
        r = run(args)
        assert r.returncode == 0, (args, r.stderr)
    r = run(["up", "--help"])
    for flag in ("--fsync", "--data-dir", "--http-port", "--ilp-port", "--tp-port", "--demo-feed", "rp,PORT", "[rp,]PORT"):
        assert flag in r.stdout, flag


def test_harness_ports_stay_out_of_the_ephemeral_range_and_do_not_repeat():
    """A port the harness hands out cannot be taken as an outgoing
    connection's local port between its pick and the server's bind: it lies
    below the kernel's ephemeral range, and one run does not repeat one."""
    import harness

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picks = [harness.free_port() for _ in range(500)]
    assert all(p < low for p in picks), [p for p in picks if p >= low][:5]
    assert len(set(picks)) == len(picks)


def test_harness_retries_a_port_taken_after_it_was_picked(cluster, monkeypatch):
    """The harness picks free ports, then the server binds them; a port taken
    in between makes start-up fail cleanly, and the harness starts again on
    fresh ports (the server itself must not fall back silently)."""
    import harness

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        real = harness.free_port
        picks = iter([taken])
        monkeypatch.setattr(harness, "free_port", lambda: next(picks, None) or real())
        db = cluster.up()
        assert db.http_port != taken
        still_serving(db)
    assert any("address already in use" in p.log.read_text() for p in cluster.procs)
