"""Failover by hand: promotion, planned switchover, and an old primary
rejoining as a standby, as real processes on loopback. Epochs must only
grow, nothing acknowledged may be lost in a switchover (in any mode), an
old primary must cut exactly what the new primary never had (keeping a
copy) and then hold the new primary's journal byte for byte."""

from __future__ import annotations

import json
import time

import pytest
import requests

from harness import run
from test_replication import (SECRET, Writer, compare, count, journal_ids, primary,
                              repl_status, standby, wait_caught_up)


@pytest.fixture(autouse=True)
def shared_secret(monkeypatch):
    monkeypatch.setenv("TICKDB_REPL_SECRET", SECRET)


def http_addr(node) -> str:
    return f"127.0.0.1:{node.http_port}"


def wait_role(node, role: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = repl_status(node)
            if last["role"] == role and node.status()["ready"]:
                return last
        except (requests.RequestException, KeyError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"not {role} within {timeout}s: {last}\n{node.log_tail()}")


def wait_streaming(node, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = repl_status(node)
            if r["role"] == "standby" and r.get("primary", {}).get("state") == "streaming":
                return
        except (requests.RequestException, KeyError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"not streaming within {timeout}s:\n{node.log_tail()}")


def events(node, kind: str) -> list[dict]:
    return [e for e in repl_status(node)["failover_events"] if e["event"] == kind]


@pytest.mark.parametrize("mode", ["async", "semi-sync"])
def test_a_switchover_loses_nothing_and_the_old_primary_follows(cluster, mode):
    extra = ["--replication", mode, "--fsync", "always"]
    p = primary(cluster, "p", extra)
    s = standby(cluster, p, "s", extra)
    wait_streaming(s)
    w = Writer(p)
    w.write(50)
    # Writes keep coming while the roles change; whatever is acknowledged
    # must survive on both.
    w.start()
    time.sleep(0.3)
    r = run(["switchover", "--node", http_addr(p)])
    assert r.returncode == 0, r.stderr + p.log_tail()
    answer = json.loads(r.stdout)
    assert answer["epoch"] >= 1, answer
    w.halt()
    st = wait_role(s, "primary")
    assert st["epoch"] == answer["epoch"]
    # The old primary restarted itself as the new one's standby.
    wait_role(p, "standby")
    wait_streaming(p)
    assert repl_status(p)["primary_address"] == f"127.0.0.1:{s.repl_port}"
    # Writes go to the new primary now, and the old one refuses, naming it.
    w2 = Writer(s)
    w2.next_id = w.next_id
    w2.write(20)
    refused = requests.post(p.url + "/write", data="trade,sym=R price=1.0,size=1i 1\n", timeout=10)
    assert refused.status_code == 503 and refused.json()["code"] == "standby", refused.text
    wait_caught_up(s, p)
    assert compare(s.data_dir, p.data_dir).returncode == 0
    acked = w.acked + w2.acked
    for node in (s, p):
        ids = journal_ids(node.data_dir)
        assert len(ids) == len(set(ids)), "a row journaled twice"
        missing = set(acked) - set(ids)
        assert not missing, f"{len(missing)} acknowledged rows lost on {node.data_dir}"
    assert count(s) == count(p) >= len(acked)
    assert events(s, "promote") and events(p, "cut") == []
    m = requests.get(s.url + "/metrics", timeout=10).text
    assert "tickdb_failover_promotions_total 1" in m, m
    assert f"tickdb_epoch {answer['epoch']}" in m


def test_promotion_after_the_primary_dies_and_the_old_primary_rejoins_cutting_its_suffix(cluster):
    # Async: the primary acknowledges what its standby has not received.
    p = primary(cluster, "p", ["--replication", "async"])
    s = standby(cluster, p, "s")
    wait_streaming(s)
    w = Writer(p)
    w.write(30)
    wait_caught_up(p, s)
    kept = list(w.acked)
    # The standby dies; the primary goes on alone, then dies too. The
    # standby comes back without its primary (it starts from its own
    # journal) and is promoted.
    s.kill9()
    w.write(12)
    lost = [i for i in w.acked if i not in kept]
    p.kill9()
    s = cluster.up(data_dir=s.data_dir, extra=["--standby-of", f"127.0.0.1:{p.repl_port}"])
    r = run(["promote", "--node", http_addr(s)])
    assert r.returncode == 0, r.stderr
    epoch = json.loads(r.stdout)["epoch"]
    assert epoch >= 1
    # Promoted: it takes writes in the new epoch, and says so.
    r = requests.post(s.url + "/write", data="trade,sym=E price=1.0,size=0i 1\n", timeout=10)
    assert r.status_code == 204 and r.headers["x-tickdb-epoch"] == str(epoch), r.headers
    assert int(r.headers["x-tickdb-seq"]) == 31, r.headers
    w2 = Writer(s)
    w2.next_id = w.next_id
    w2.write(7)
    # The old primary comes back as a standby of the new one: it cuts the
    # 12 updates the new primary never had, keeps a copy, and follows.
    p2 = cluster.up(data_dir=p.data_dir, extra=["--standby-of", f"127.0.0.1:{s.repl_port}"])
    wait_streaming(p2)
    wait_caught_up(s, p2)
    cuts = events(p2, "cut")
    assert len(cuts) == 1, repl_status(p2)
    cut = cuts[0]
    assert cut["records"] == 12 and cut["rows"] == 12 * 10, cut
    assert cut["kept_through"] == 30 and cut["from_seq"] == 31, cut
    assert cut["files"], cut
    copy = p.data_dir / cut["copy"].split("/")[-1]
    assert copy.is_dir() and any(copy.iterdir())
    assert compare(s.data_dir, p2.data_dir).returncode == 0
    ids = journal_ids(p2.data_dir)
    assert not set(lost) & set(ids), "the cut rows are still in the rejoined journal"
    assert set(kept + w2.acked) <= set(ids)
    assert count(p2) == count(s) == len(kept) + len(w2.acked) + 1  # and the epoch probe row
    # Epochs only grow, and both nodes agree on them.
    assert repl_status(p2)["epochs"] == repl_status(s)["epochs"]
    assert [e["epoch"] for e in repl_status(s)["epochs"]] == [epoch]
    # `journal dump` shows each record's epoch: the old primary's records
    # are epoch 0, the new primary's from seq 31 on its epoch.
    r = run(["journal", "dump", str(p2.data_dir), "--from", "30", "--limit", "2"])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("seq ")]
    assert lines[0].startswith("seq 30 epoch 0 "), lines
    assert lines[1].startswith(f"seq 31 epoch {epoch} "), lines


def test_an_old_primary_started_while_the_new_one_was_down_cuts_and_rejoins_once_it_answers(cluster):
    # As above, but the old primary comes back while the new primary is
    # unreachable: it starts from its own journal, and only its running
    # follower hears `Diverged`. It must still cut and follow, by itself.
    p = primary(cluster, "p", ["--replication", "async"])
    s = standby(cluster, p, "s")
    wait_streaming(s)
    w = Writer(p)
    w.write(20)
    wait_caught_up(p, s)
    kept = list(w.acked)
    s.kill9()
    w.write(9)
    lost = [i for i in w.acked if i not in kept]
    p.kill9()
    s = cluster.up(data_dir=s.data_dir, extra=["--standby-of", f"127.0.0.1:{p.repl_port}"])
    assert run(["promote", "--node", http_addr(s)]).returncode == 0
    w2 = Writer(s)
    w2.next_id = w.next_id
    w2.write(5)
    s.kill9()
    p2 = cluster.up(data_dir=p.data_dir, extra=["--standby-of", f"127.0.0.1:{s.repl_port}"])
    p2.wait_log("starting from this journal")
    # The new primary restarts (as a primary: without --standby-of).
    i = s.args.index("--standby-of")
    del s.args[i:i + 2]
    s.start()
    p2.wait_log("restarting to cut and rejoin", timeout=30)
    wait_streaming(p2, timeout=60)
    wait_caught_up(s, p2)
    cuts = events(p2, "cut")
    assert len(cuts) == 1 and cuts[0]["records"] == 9 and cuts[0]["kept_through"] == 20, cuts
    assert compare(s.data_dir, p2.data_dir).returncode == 0
    ids = journal_ids(p2.data_dir)
    assert not set(lost) & set(ids), "the cut rows are still in the rejoined journal"
    assert set(kept + w2.acked) <= set(ids)


def test_promote_refuses_a_primary_and_a_standby_behind_min_seq(cluster):
    p = primary(cluster, "p")
    s = standby(cluster, p, "s")
    wait_streaming(s)
    r = run(["promote", "--node", http_addr(p)])
    assert r.returncode == 1 and "already the primary" in r.stderr, r.stderr
    r = run(["promote", "--node", http_addr(s), "--min-seq", "999999"])
    assert r.returncode == 1 and "seq 999999" in r.stderr, r.stderr
    assert repl_status(s)["role"] == "standby"
    r = run(["promote", "--node", "127.0.0.1:1"])
    assert r.returncode == 2, r.stderr


def etcd_node(cluster, name: str, urls: str, extra: list[str] = (), start: bool = True):
    return cluster.up(data_dir=cluster.tmp / name,
                      extra=["--etcd", urls, "--node-name", name, "--lease-ttl-s", "1",
                             "--fence-margin-ms", "300", *extra], start=start)


@pytest.fixture
def etcd(tmp_path):
    from faultnet import Etcd, have_etcd
    if not have_etcd():
        pytest.skip("etcd is not installed (Debian's etcd-server)")
    (tmp_path / "etcd").mkdir()
    e = Etcd(tmp_path / "etcd", n=1)
    e.start()
    try:
        yield e
    finally:
        e.stop()


def test_etcd_elects_one_primary_and_fails_over_when_it_dies(cluster, etcd):
    urls = ",".join(etcd.client_urls)
    a = etcd_node(cluster, "a", urls)
    wait_role(a, "primary")
    b = etcd_node(cluster, "b", urls)
    wait_role(b, "standby")
    wait_streaming(b)
    w = Writer(a)
    w.write(20)
    wait_caught_up(a, b)
    epoch_a = repl_status(a)["epoch"]
    t0 = time.monotonic()
    a.kill9()
    st = wait_role(b, "primary", timeout=20)
    rto = time.monotonic() - t0
    assert st["epoch"] > epoch_a, st
    print(f"etcd failover: {rto:.2f} s")
    assert rto < 10, rto
    w2 = Writer(b)
    w2.next_id = w.next_id
    w2.write(10)
    # The old primary comes back: etcd names b, so it follows b.
    a2 = etcd_node(cluster, "a", urls)
    wait_role(a2, "standby")
    wait_streaming(a2)
    wait_caught_up(b, a2)
    assert compare(b.data_dir, a2.data_dir).returncode == 0
    assert count(a2) == count(b) == len(w.acked) + len(w2.acked)


def test_a_standby_that_loses_its_primary_publishes_what_it_holds_at_once(cluster, etcd):
    """Without a leader, members rank by the (epoch, seq) in their etcd
    member keys, which a linked standby rewrites only once a second. A
    standby whose primary died publishes its sequence at once: otherwise an
    old primary restarted with a torn tail (fewer records) could win the
    election against a key a second old and cut a record the standby held
    (in semi-sync, an acknowledged one)."""
    urls = ",".join(etcd.client_urls)
    a = etcd_node(cluster, "a", urls)
    wait_role(a, "primary")
    b = etcd_node(cluster, "b", urls)
    wait_streaming(b)
    # Writing up to the kill, so the standby holds records its key, last
    # rewritten up to a second ago, does not show.
    w = Writer(a).start()
    time.sleep(1.5)
    a.kill9()
    w.halt()
    held = b.status()["tp"]["seq"]
    # Well inside the lease (no election yet), and within a fraction of
    # the once-a-second rewrite.
    time.sleep(0.3)
    key = json.loads(etcd.get("/tickdb/tickdb/members/b"))
    assert key["seq"] == held, (key, held)


def test_clients_follow_the_primary_through_an_etcd_failover(cluster, etcd):
    """A remote rdb given both nodes resumes on the new primary with no gap
    and no duplicate; third-party clients get a standby's error naming the
    primary's addresses (the questdb client), or reach any node for
    queries with several hosts (libpq's multi-host conninfo, psycopg)."""
    from questdb import QuestDBError, Sender, TimestampNanos
    import psycopg

    urls = ",".join(etcd.client_urls)
    a = etcd_node(cluster, "a", urls)
    wait_role(a, "primary")
    b = etcd_node(cluster, "b", urls)
    wait_streaming(b)
    rdb = cluster.rdb(f"{a.tp_port},127.0.0.1:{b.tp_port}")
    w = Writer(a)
    w.write(15)
    rdb.wait_rows("trade", len(w.acked))
    # The questdb client, pointed at the standby: the error names where to
    # write instead.
    with pytest.raises(QuestDBError) as e:
        with Sender.from_conf(f"http::addr=127.0.0.1:{b.http_port};retry_timeout=0;") as s:
            s.row("trade", symbols={"sym": "Q"}, columns={"price": 1.0, "size": 1},
                  at=TimestampNanos(1))
            s.flush()
    assert f"127.0.0.1:{a.http_port}" in str(e.value), str(e.value)
    a.kill9()
    wait_role(b, "primary", timeout=20)
    w2 = Writer(b)
    w2.next_id = w.next_id
    w2.write(15)
    got = rdb.wait_rows("trade", len(w.acked) + len(w2.acked))
    assert got == len(w.acked) + len(w2.acked), "a gap or a duplicate after the failover"
    ids = [r[0] for r in rdb.exec("select size from trade")]
    assert len(ids) == len(set(ids)) and set(ids) == set(w.acked + w2.acked)
    # Queries: libpq tries each host in turn (the first is dead).
    dsn = (f"host=127.0.0.1,127.0.0.1 port={a.pg_port},{b.pg_port} "
           f"user=tickdb password=tickdb dbname=tickdb connect_timeout=3")
    with psycopg.connect(dsn) as conn:
        n = conn.execute("select count(*) from trade").fetchone()[0]
    assert n == len(w.acked) + len(w2.acked)
