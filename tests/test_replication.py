"""Replication: a standby follows its primary's journal byte for byte, as
real processes on loopback (and, with root, across a veth link that the
test cuts). Every acknowledged row must reach the standby; semi-sync must
never acknowledge what no standby holds; divergence and strangers are
refused with reasons; nothing is lost on either side.

`TICKDB_LONG=1` runs the semi-sync kill loop for thousands of rounds."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
import requests

from harness import BIN, run

SECRET = "replication-test-secret-0123456789"
T0 = 1_700_000_000_000_000_000
LONG = os.environ.get("TICKDB_LONG") == "1"


@pytest.fixture(autouse=True)
def shared_secret(monkeypatch):
    monkeypatch.setenv("TICKDB_REPL_SECRET", SECRET)


def primary(cluster, name: str, extra: list[str] = (), start: bool = True):
    return cluster.up(data_dir=cluster.tmp / name, extra=list(extra), start=start)


def standby(cluster, of, name: str, extra: list[str] = (), start: bool = True):
    return cluster.up(data_dir=cluster.tmp / name,
                      extra=["--standby-of", f"127.0.0.1:{of.repl_port}", *extra], start=start)


class Writer:
    """Writes rows whose `size` is a unique id, one request per update,
    recording every acknowledged id (outside the database)."""

    def __init__(self, node, rows_per_update: int = 10):
        self.node = node
        self.rows = rows_per_update
        self.next_id = 1
        self.acked: list[int] = []
        self.ack_times: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def write_one(self, session=None) -> bool:
        ids = list(range(self.next_id, self.next_id + self.rows))
        self.next_id += self.rows
        body = "".join(f"trade,sym=R price=1.5,size={i}i {T0 + i}\n" for i in ids)
        try:
            r = (session or requests).post(self.node.url + "/write", data=body, timeout=30)
        except requests.RequestException as e:
            self.errors.append(type(e).__name__)
            return False
        if r.status_code == 204:
            self.acked.extend(ids)
            self.ack_times.append(time.monotonic())
            return True
        self.errors.append(r.text)
        return False

    def write(self, n: int) -> None:
        s = requests.Session()
        for _ in range(n):
            assert self.write_one(s), self.errors[-1:]

    def start(self, pause: float = 0.0) -> "Writer":
        def loop():
            s = requests.Session()
            while not self.stop.is_set():
                self.write_one(s)
                if pause:
                    time.sleep(pause)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=60)


def repl_status(node) -> dict:
    return node.status()["replication"]


def wait_caught_up(primary, standby, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = primary.status()["tp"]["seq"]
        s = standby.status()
        if s["tp"]["seq"] == p and s["seq"] == p:
            return
        time.sleep(0.05)
    raise AssertionError(f"standby not caught up: primary {primary.status()['tp']['seq']}, "
                         f"standby {standby.status()['tp']['seq']}\n{standby.log_tail()}")


def journal_ids(data_dir) -> list[int]:
    """The trade ids in a journal, in journal order."""
    r = subprocess.run([BIN, "journal", "dump", str(data_dir), "--limit", "100000000", "--rows"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ids = []
    table = None
    for line in r.stdout.splitlines():
        if line.startswith("  table "):
            table = line.split()[1]
        elif line.startswith("    ") and table == "trade":
            ids.append(int(line.split()[-1]))
    return ids


def compare(a, b, exact: bool = True) -> subprocess.CompletedProcess:
    return run(["journal", "compare", str(a), str(b), *(["--exact"] if exact else [])])


def count(node, table: str = "trade") -> int:
    return node.scalar(f"select count(*) from {table}")


def test_standbys_started_empty_and_mid_stream_hold_the_primarys_journal(cluster):
    p = primary(cluster, "p")
    w = Writer(p)
    w.write(50)
    a = standby(cluster, p, "a")
    w.write(50)
    b = standby(cluster, p, "b")
    w.write(50)
    for s in (a, b):
        wait_caught_up(p, s)
        r = compare(p.data_dir, s.data_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "identical" in r.stdout
        assert count(s) == count(p) == len(w.acked)
    st = repl_status(p)
    assert st["role"] == "primary" and len(st["standbys"]) == 2
    for s in st["standbys"]:
        assert s["state"] == "streaming" and s["lag_records"] == 0, s
    sa = repl_status(a)
    assert sa["role"] == "standby" and sa["primary"]["state"] == "streaming", sa
    # The standby answers queries over PostgreSQL too.
    import psycopg
    with psycopg.connect(host="127.0.0.1", port=a.pg_port, user="tickdb", password="tickdb",
                         dbname="tickdb", autocommit=True) as c:
        assert c.execute("select count(*) from trade").fetchone()[0] == len(w.acked)


def test_a_standby_refuses_writes_naming_its_primary(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s")
    r = requests.post(s.url + "/write", data="trade,sym=A price=1.0,size=1i 1\n", timeout=10)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["code"] == "standby" and body["primary"] == f"127.0.0.1:{p.repl_port}", body
    # ILP over TCP: the line is refused, logged, and the connection closed.
    with socket.create_connection(("127.0.0.1", s.ilp_port), timeout=10) as c:
        c.sendall(b"trade,sym=A price=1.0,size=1i 1\n")
        c.settimeout(10)
        assert c.recv(100) == b""
    s.wait_log("standby")
    assert count(s) == 0


def test_chained_standbys(cluster):
    p = primary(cluster, "p")
    a = standby(cluster, p, "a")
    b = standby(cluster, a, "b")
    w = Writer(p)
    w.write(100)
    wait_caught_up(p, a)
    wait_caught_up(a, b)
    assert compare(p.data_dir, b.data_dir).returncode == 0
    assert count(b) == len(w.acked)
    assert repl_status(a)["standbys"][0]["state"] == "streaming"


def test_a_restarted_standby_resumes_from_its_own_journal(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s", extra=["--hot-restart", str(cluster.tmp / "s-hot"), "--checkpoint-interval-s", "1"])
    w = Writer(p)
    w.write(100)
    wait_caught_up(p, s)
    time.sleep(1.5)  # a checkpoint on the standby
    s.kill9()
    w.write(100)
    s2 = standby(cluster, p, "s", extra=["--hot-restart", str(cluster.tmp / "s-hot")])
    wait_caught_up(p, s2)
    assert compare(p.data_dir, s2.data_dir).returncode == 0
    assert count(s2) == len(w.acked)
    assert "hot restart: reloaded" in s2.log_tail(200) or "restored" in s2.log_tail(200)


def test_semi_sync_acknowledges_only_what_a_standby_holds(cluster):
    p = primary(cluster, "p", ["--replication", "semi-sync", "--sync-timeout-ms", "300"])
    w = Writer(p)
    t = time.monotonic()
    assert not w.write_one()
    assert time.monotonic() - t < 5
    assert "not acknowledged" in w.errors[-1] and "--sync-standbys" in w.errors[-1], w.errors
    st = repl_status(p)["semi_sync"]
    assert st["refused_total"] == 1 and not st["degraded"], st
    s = standby(cluster, p, "s")
    w.write(20)
    wait_caught_up(p, s)
    # Every acknowledged id is on the standby; the refused update is there
    # too (it was journaled on the primary and shipped later).
    assert set(w.acked) <= set(journal_ids(s.data_dir))
    # A stopped standby: writes are refused again within the timeout.
    os.killpg(s.proc.pid, signal.SIGSTOP)
    try:
        t = time.monotonic()
        assert not w.write_one()
        assert time.monotonic() - t < 5
    finally:
        os.killpg(s.proc.pid, signal.SIGCONT)
    w.write(5)
    wait_caught_up(p, s)
    assert compare(p.data_dir, s.data_dir).returncode == 0


def test_semi_sync_degrades_only_when_asked(cluster):
    p = primary(cluster, "p", ["--replication", "semi-sync", "--sync-timeout-ms", "300", "--sync-degrade"])
    w = Writer(p)
    t = time.monotonic()
    assert w.write_one(), w.errors
    assert time.monotonic() - t >= 0.25
    st = repl_status(p)["semi_sync"]
    assert st["degraded"] and st["degradations_total"] == 1, st
    assert "tickdb_repl_semi_sync_degraded 1" in requests.get(p.url + "/metrics", timeout=10).text
    p.wait_log("degraded to async")
    s = standby(cluster, p, "s")
    w.write(5)
    wait_caught_up(p, s)
    deadline = time.monotonic() + 10
    while repl_status(p)["semi_sync"]["degraded"] and time.monotonic() < deadline:
        w.write_one()
        time.sleep(0.05)
    assert not repl_status(p)["semi_sync"]["degraded"]
    p.wait_log("semi-sync restored")


def test_semi_sync_kill_loop_loses_no_acknowledged_row(cluster, rng):
    rounds = 2000 if LONG else 100
    lost_machine = 0
    for n in range(rounds):
        pdir = cluster.tmp / f"p{n}"
        p = primary(cluster, f"p{n}", ["--replication", "semi-sync", "--sync-timeout-ms", "2000", "--fsync", "always"])
        s = standby(cluster, p, f"s{n}")
        w = Writer(p, rows_per_update=rng.choice([1, 5, 20])).start()
        time.sleep(rng.uniform(0.05, 0.6))
        p.kill9()
        w.halt()
        if rng.random() < 0.3:
            shutil.rmtree(pdir)  # the primary's machine is lost
            lost_machine += 1
        time.sleep(0.3)  # let the standby append what it received
        s.terminate()
        ids = journal_ids(s.data_dir)
        acked = set(w.acked)
        missing = acked - set(ids)
        assert not missing, f"round {n}: {len(missing)} acknowledged rows not on the standby, e.g. {sorted(missing)[:5]}"
        assert len(ids) == len(set(ids)), f"round {n}: a row twice on the standby"
        assert ids == sorted(ids), f"round {n}: the standby's rows are out of order"
        shutil.rmtree(s.data_dir, ignore_errors=True)
        shutil.rmtree(pdir, ignore_errors=True)
        cluster.procs.clear()
    print(f"{rounds} rounds, {lost_machine} with the primary's journal deleted")


def test_async_loss_is_bounded_by_the_reported_lag(cluster, rng):
    for n in range(5):
        p = primary(cluster, f"p{n}")
        s = standby(cluster, p, f"s{n}")
        w = Writer(p, rows_per_update=5).start()
        time.sleep(rng.uniform(0.3, 1.0))
        lag = repl_status(p)["standbys"][0]["lag_records"]
        t_status = time.monotonic()
        p.kill9()
        w.halt()
        shutil.rmtree(p.data_dir)
        time.sleep(0.3)
        s.terminate()
        on_standby = set(journal_ids(s.data_dir))
        lost_updates = len({(i - 1) // 5 for i in set(w.acked) - on_standby})
        after_status = sum(1 for t in w.ack_times if t > t_status)
        print(f"round {n}: lag reported {lag} records, {after_status} updates acknowledged after that report, "
              f"{lost_updates} acknowledged updates lost")
        assert lost_updates <= lag + after_status
        cluster.procs.clear()


def test_faults_stopped_and_killed_standby_converge(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s")
    w = Writer(p).start(pause=0.01)
    time.sleep(0.5)
    os.killpg(s.proc.pid, signal.SIGSTOP)
    acked_before = len(w.acked)
    time.sleep(1.0)
    assert len(w.acked) > acked_before, "the primary must keep acknowledging (async) while the standby is stopped"
    os.killpg(s.proc.pid, signal.SIGCONT)
    time.sleep(0.5)
    s.kill9()
    time.sleep(0.5)
    s = standby(cluster, p, "s")
    w.halt()
    wait_caught_up(p, s)
    assert compare(p.data_dir, s.data_dir).returncode == 0
    assert set(w.acked) <= set(journal_ids(s.data_dir))


def test_divergence_and_a_primary_behind_its_standby_are_refused(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s")
    w = Writer(p)
    w.write(10)
    wait_caught_up(p, s)
    s.terminate()
    w.write(1)
    # The standby's journal gets a different record at the same seq: its
    # data run once as a primary of its own.
    alone = primary(cluster, "s")
    requests.post(alone.url + "/write", data="trade,sym=X price=9.0,size=999i 1\n", timeout=10)
    alone.terminate()
    seq = p.status()["tp"]["seq"]
    again = standby(cluster, p, "s", start=False)
    again.start(wait_ready=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "diverged" not in again.log_tail(50):
        time.sleep(0.1)
    assert f"diverged at seq {seq}" in again.log_tail(50), again.log_tail(50)
    again.wait_ready()
    st = repl_status(again)["primary"]
    assert st["state"] == "stopped" and "diverged" in st["reason"], st
    again.terminate()
    # Nothing changed on either side.
    assert compare(p.data_dir, again.data_dir, exact=False).returncode == 1
    # The primary loses its journal (a new machine at the same address):
    # the standby, ahead of it, is refused and keeps what it has.
    s2 = standby(cluster, p, "s2")
    wait_caught_up(p, s2)
    held = s2.status()["tp"]["seq"]
    port = p.repl_port
    p.kill9()
    shutil.rmtree(p.data_dir)
    p2 = cluster.up(data_dir=p.data_dir, repl=port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "ends at seq" not in s2.log_tail(50):
        time.sleep(0.1)
    assert f"holds records up to seq {held}" in s2.log_tail(50), s2.log_tail(50)
    assert s2.status()["tp"]["seq"] == held
    assert p2.status()["tp"]["seq"] == 0


def test_strangers_bad_versions_and_wrong_secrets_are_refused(cluster, monkeypatch):
    p = primary(cluster, "p")
    # A stranger speaking HTTP is dropped; the primary goes on.
    with socket.create_connection(("127.0.0.1", p.repl_port), timeout=10) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.settimeout(15)
        try:
            while c.recv(4096):
                pass
        except ConnectionResetError:
            pass  # dropped with our bytes unread: a reset, as it should be
    p.wait_log("not a tickdb replication peer")
    # A client of another protocol version gets a Refuse naming both.
    with socket.create_connection(("127.0.0.1", p.repl_port), timeout=10) as c:
        c.settimeout(10)
        head = c.recv(5, socket.MSG_WAITALL)
        n, ty = struct.unpack("<IB", head)
        assert ty == 1
        c.recv(n, socket.MSG_WAITALL)
        name = b"old"
        body = struct.pack("<H", 99) + bytes(32) + bytes(32) + struct.pack("<QQI", 1, 0, 0) + struct.pack("<H", len(name)) + name
        c.sendall(struct.pack("<IB", len(body), 2) + body)
        head = c.recv(5, socket.MSG_WAITALL)
        n, ty = struct.unpack("<IB", head)
        reason = c.recv(n, socket.MSG_WAITALL).decode()
        assert ty == 4 and "version 2" in reason and "99" in reason, reason
    # A standby with the wrong secret: stopped, with the reason, nothing taken.
    monkeypatch.setenv("TICKDB_REPL_SECRET", "another-secret-entirely-000000")
    Writer(p).write(3)
    bad = standby(cluster, p, "bad", start=False)
    bad.start(wait_ready=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "authentication failed" not in bad.log_tail(50):
        time.sleep(0.1)
    assert "authentication failed" in bad.log_tail(50), bad.log_tail(50)
    p.wait_log("failed authentication")
    assert requests.get(p.url + "/health", timeout=10).status_code == 200


def test_journal_compare_reports_the_first_difference(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s")
    Writer(p).write(5)
    wait_caught_up(p, s)
    p.terminate()
    s.terminate()
    seg = sorted((s.data_dir / "journal").glob("journal-*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF
    seg.write_bytes(bytes(data))
    r = compare(p.data_dir, s.data_dir)
    assert r.returncode in (1, 2), r.stdout
    assert "seq" in r.stdout + r.stderr


def test_a_standby_reseeds_when_the_primary_trimmed_its_journal(cluster):
    hot = ["--hot-restart", str(cluster.tmp / "p-hot"), "--segment-bytes-max", "20000"]
    p = primary(cluster, "p", hot)
    w = Writer(p, rows_per_update=100)
    w.write(12)
    r = requests.post(p.url + "/checkpoint", timeout=30)
    assert r.status_code == 200, r.text
    r = requests.post(p.url + "/journal/trim", timeout=30)
    assert r.status_code == 200 and r.json()["segments_removed"] > 0, r.text
    w.write(3)
    # A new standby needs seq 1, which the primary no longer holds.
    s = standby(cluster, p, "s", ["--hot-restart", str(cluster.tmp / "s-hot")])
    w.write(3)
    wait_caught_up(p, s)
    log = s.log_tail(100)
    assert "reseeding from the primary's tables" in log and "reseed: " in log, log
    assert count(s) == count(p) == len(w.acked)
    assert s.scalar("select sum(size) from trade") == p.scalar("select sum(size) from trade")
    # Its journal is the primary's from its own first record on.
    r = compare(p.data_dir, s.data_dir, exact=False)
    assert r.returncode == 0 and "identical over seq" in r.stdout, r.stdout
    # A restart of the reseeded standby needs no second reseed.
    s.terminate()
    w.write(2)
    s2 = standby(cluster, p, "s", ["--hot-restart", str(cluster.tmp / "s-hot")])
    wait_caught_up(p, s2)
    assert count(s2) == len(w.acked)
    assert "reseeding" not in s2.log_tail(200).split("tickdb up:")[-1]


@pytest.fixture
def netns():
    """A network namespace joined to this one by a veth pair: the standby
    lives there, and the test cuts the link by taking the veth down."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a network namespace and a veth pair to cut the link")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's ip for a network namespace")
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    ns, host_if, ns_if = f"tdb{tag}", f"tdbh{tag}", f"tdbn{tag}"
    sub = 200 + random.randrange(50)
    host_ip, ns_ip = f"10.{sub}.{int(tag) % 250}.1", f"10.{sub}.{int(tag) % 250}.2"

    def ip(*args, ns_exec=False):
        cmd = (["ip", "netns", "exec", ns, "ip"] if ns_exec else ["ip"]) + list(args)
        subprocess.run(cmd, check=True, capture_output=True, timeout=10)

    ip("netns", "add", ns)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{host_ip}/24", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("addr", "add", f"{ns_ip}/24", "dev", ns_if, ns_exec=True)
        ip("link", "set", ns_if, "up", ns_exec=True)
        ip("link", "set", "lo", "up", ns_exec=True)

        class Net:
            pass

        n = Net()
        n.ns, n.host_ip, n.ns_ip, n.host_if = ns, host_ip, ns_ip, host_if
        n.cut = lambda: ip("link", "set", host_if, "down")
        n.heal = lambda: ip("link", "set", host_if, "up")
        yield n
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def node_in(cluster, net, name: str, host: str, extra: list[str], in_ns: bool):
    """`tickdb up` bound to `host` (in the namespace when `in_ns`)."""
    def prepare(p):
        p.host = host
        if in_ns:
            p.prefix = ["ip", "netns", "exec", net.ns]
    return cluster.up(data_dir=cluster.tmp / name, extra=["--bind", host, "--no-protected-mode", *extra],
                      prepare=prepare)


@pytest.mark.parametrize("mode", ["async", "semi-sync"])
def test_a_cut_link_heals_and_the_standby_converges(cluster, netns, mode):
    extra = ["--replication", mode, "--sync-timeout-ms", "500"] if mode == "semi-sync" else []
    p = node_in(cluster, netns, "p", netns.host_ip, extra, in_ns=False)
    s = node_in(cluster, netns, "s", netns.ns_ip, ["--standby-of", f"{netns.host_ip}:{p.repl_port}"], in_ns=True)
    w = Writer(p)
    w.write(20)
    wait_caught_up(p, s)
    netns.cut()
    try:
        time.sleep(0.5)
        if mode == "async":
            # The primary keeps acknowledging while the standby is cut off.
            w.write(30)
        else:
            # Without --sync-degrade, writes are refused with the reason.
            assert not w.write_one()
            assert "not acknowledged" in w.errors[-1], w.errors[-1]
        time.sleep(3.5)  # past the link-silence timeouts on both sides
    finally:
        netns.heal()
    # The standby reconnects (its back-off grew while the link was down).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(x["state"] == "streaming" for x in repl_status(p)["standbys"]):
            break
        time.sleep(0.1)
    w.write(20)
    wait_caught_up(p, s, timeout=60)
    assert compare(p.data_dir, s.data_dir).returncode == 0
    assert set(w.acked) <= set(journal_ids(s.data_dir))
    assert "link is down" in p.log_tail(100) + s.log_tail(100)
