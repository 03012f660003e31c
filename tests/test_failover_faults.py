"""The fault-injection harness for automatic failover, in the spirit of
Jepsen: two `tickdb up` nodes and a three-member etcd cluster as real
processes, each in its own network namespace joined by veth pairs (with
root; without it, on loopback, where only the process nemeses run), a
client that logs every acknowledged row outside the database, and one
nemesis per round: kill -9 of the primary, of the standby or of an etcd
member, SIGSTOP of the primary past its lease, partitions (primary from
standby, from etcd, from both), a torn journal tail at a kill, a crash
during promotion.

After each round heals, the checker asserts: every acknowledged row is
present exactly once, in order, in both journals and both rdbs; the
journals are identical; epochs only grow; no node acknowledged a write in
an epoch after a newer epoch's first acknowledgement; in semi-sync nothing
acknowledged is lost. Every round prints its seed; `TICKDB_FAULT_SEED=S`
reruns from it. CI runs FAULT_ROUNDS rounds; `TICKDB_LONG=1` runs
thousands."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
import requests

from checker import AckLog, check, journal_records
from faultnet import (Etcd, FaultNet, NemesisPlan, have_etcd, have_netns, pause, resume,
                      tear_tail)
from test_replication import SECRET, journal_ids

LONG = os.environ.get("TICKDB_LONG") == "1"
FAULT_ROUNDS = int(os.environ.get("TICKDB_FAULT_ROUNDS", "2000" if LONG else "50"))
# Async rounds: fewer, each checking the loss against the lag reported.
ASYNC_ROUNDS = max(FAULT_ROUNDS // 3, 5)
# The lag is sampled every LAG_POLL_S; rows acknowledged between the last
# sample and the failure are not in it. The client writes a row about every
# 3 ms plus its round trip: at most this many rows fall between samples.
LAG_POLL_S = 0.02
LAG_SAMPLE_SLACK_ROWS = 10
LEASE_TTL_S = 1
FENCE_MARGIN_MS = 300
T0 = 1_700_000_000_000_000_000
# Nemeses that need per-link cuts (namespaces).
NEEDS_NETNS = {"partition_primary_from_standby", "partition_primary_from_etcd",
               "partition_primary_from_both"}


@pytest.fixture(autouse=True)
def shared_secret(monkeypatch):
    monkeypatch.setenv("TICKDB_REPL_SECRET", SECRET)


class Client:
    """Writes one row per request, each with a unique id, to whichever node
    is the primary; logs every acknowledgement (with the node, the epoch
    and sequence it reports) and every failure, outside the database."""

    def __init__(self, nodes: dict, log: AckLog):
        self.nodes = nodes
        self.log = log
        self.next_id = 1
        self.target = next(iter(nodes))
        self.stop = threading.Event()
        self.thread = None
        self.lock = threading.Lock()

    def write_one(self, session: requests.Session) -> None:
        rid = self.next_id
        self.next_id += 1
        node = self.nodes[self.target]
        body = f"trade,sym=F price=1.5,size={rid}i {T0 + rid}\n"
        try:
            r = session.post(node.url + "/write", data=body, timeout=3)
        except requests.RequestException as e:
            self.log.fail(rid, self.target, type(e).__name__)
            self._switch()
            return
        if r.status_code == 204:
            self.log.ack(rid, self.target, epoch=int(r.headers["x-tickdb-epoch"]),
                         seq=int(r.headers["x-tickdb-seq"]))
        else:
            self.log.fail(rid, self.target, r.text[:200])
            self._switch()

    def _switch(self) -> None:
        names = list(self.nodes)
        self.target = names[(names.index(self.target) + 1) % len(names)]
        time.sleep(0.02)

    def start(self) -> None:
        self.stop.clear()

        def loop():
            s = requests.Session()
            while not self.stop.is_set():
                self.write_one(s)
                time.sleep(0.003)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=30)


def status(node) -> dict | None:
    try:
        r = requests.get(node.url + "/status", timeout=2)
        return r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def roles(nodes: dict) -> dict:
    out = {}
    for name, n in nodes.items():
        st = status(n)
        out[name] = st["replication"]["role"] if st and "replication" in st and st.get("ready") else None
    return out


def wait_stable(nodes: dict, timeout: float = 120) -> tuple[str, str]:
    """One primary, the other a standby streaming from it and caught up."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        r = roles(nodes)
        last = r
        prim = [k for k, v in r.items() if v == "primary"]
        stby = [k for k, v in r.items() if v == "standby"]
        if len(prim) == 1 and len(stby) == 1:
            p, s = nodes[prim[0]], nodes[stby[0]]
            ps, ss = status(p), status(s)
            if ps and ss and ss["replication"].get("primary", {}).get("state") == "streaming" \
                    and ss["tp"]["seq"] == ps["tp"]["seq"] and ss["seq"] == ss["tp"]["seq"] \
                    and ps["seq"] == ps["tp"]["seq"]:
                return prim[0], stby[0]
        time.sleep(0.05)
    logs = "\n".join(f"--- {k} ---\nstatus: {status(n)}\n{n.log_tail(60)}" for k, n in nodes.items())
    raise AssertionError(f"no stable primary/standby within {timeout}s: {last}\n{logs}")


def rdb_ids(node) -> list[int]:
    """The rdb's rows. A scan without ORDER BY has no defined order (the
    journal's order is checked on the journal itself): ordered by their
    timestamps, which follow the ids."""
    r = requests.get(node.url + "/exec", params={"query": "select size from trade order by time"},
                     timeout=30)
    assert r.status_code == 200, r.text
    return [row[0] for row in r.json()["dataset"]]


class LagWatch:
    """Polls the primary's /status for its standby's lag (records; one row
    per record here) while a round runs: the loss an async failover may
    cause is bounded by the lag last reported before it."""

    def __init__(self, nodes: dict):
        self.nodes = nodes
        self.max_lag = 0
        self.stop = threading.Event()
        self.thread = None

    def start(self, primary: str) -> None:
        self.max_lag = 0
        self.stop.clear()

        def loop():
            while not self.stop.is_set():
                st = status(self.nodes[primary])
                if st and st.get("replication", {}).get("role") == "primary":
                    for sb in st["replication"].get("standbys", []):
                        self.max_lag = max(self.max_lag, sb.get("lag_records", 0))
                time.sleep(LAG_POLL_S)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def halt(self) -> int:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=10)
        return self.max_lag


@pytest.mark.parametrize("mode", ["semi-sync", "async"])
def test_failover_under_faults(cluster, tmp_path, mode):
    ok, why = have_etcd()
    if not ok:
        pytest.skip(why)
    netns, why_not = have_netns()
    if not netns:
        print(f"no network namespaces ({why_not}): loopback, process nemeses only")
    with FaultNet(mode="netns" if netns else "proxy") as net:
        a_n, b_n = net.add_node("a"), net.add_node("b")
        e_nodes = [net.add_node(f"e{i}") for i in range(3)] if netns else None
        (tmp_path / "etcd").mkdir()
        etcd = Etcd(tmp_path / "etcd", nodes=e_nodes, n=3, net=net if netns else None)
        etcd.start()
        try:
            nodes = {}
            for name, where in (("a", a_n), ("b", b_n)):
                urls = ",".join(etcd.endpoints_for(where) if not netns else etcd.client_urls)
                p = cluster.up(data_dir=tmp_path / name, start=False, extra=[
                    "--bind", where.ip, "--no-protected-mode", "--etcd", urls, "--node-name", name,
                    "--lease-ttl-s", str(LEASE_TTL_S), "--fence-margin-ms", str(FENCE_MARGIN_MS),
                    "--replication", mode, "--fsync", "always", "--sync-timeout-ms", "1000"])
                where.place(p)
                nodes[name] = p
            nodes["a"].start()
            nodes["b"].start()
            rounds(net, etcd, nodes, {"a": a_n, "b": b_n}, e_nodes, tmp_path, mode, netns)
        finally:
            etcd.stop()


def rounds(net, etcd, nodes, where, e_nodes, tmp_path, mode, netns) -> None:
    log = AckLog(tmp_path / "acks.jsonl")
    client = Client(nodes, log)
    plan = NemesisPlan()
    done = 0
    lag = LagWatch(nodes)
    lost_bound = 0
    for rnd in plan.rounds(FAULT_ROUNDS if mode == "semi-sync" else ASYNC_ROUNDS):
        if rnd.nemesis in NEEDS_NETNS and not netns:
            continue
        prim, stby = wait_stable(nodes)
        client.target = prim
        lag.start(prim)
        client.start()
        time.sleep(rnd.rng.uniform(0.1, 0.4))
        nemesis(rnd, net, etcd, nodes, where, e_nodes, prim, stby)
        time.sleep(0.3)
        client.halt()
        # Each round may lose up to the lag reported in it (async only),
        # and what was acknowledged after its last sample.
        lost_bound += lag.halt() + LAG_SAMPLE_SLACK_ROWS
        prim, stby = wait_stable(nodes)
        verify(log, nodes, mode, rnd, lost_bound)
        done += 1
    assert done >= min(FAULT_ROUNDS, 10), f"only {done} rounds ran"
    print(f"{done} rounds, {len(log.acks)} acknowledged rows, {len(log.fails)} failed attempts")


def restart(node) -> None:
    node.kill9()
    node.start()


def nemesis(rnd, net, etcd, nodes, where, e_nodes, prim, stby) -> None:
    p, s = nodes[prim], nodes[stby]
    beyond_lease = LEASE_TTL_S + 0.6
    n = rnd.nemesis
    if n == "kill9_primary":
        p.kill9()
        time.sleep(rnd.rng.uniform(0.5, 1.8))
        p.start()
    elif n == "kill9_standby":
        s.kill9()
        time.sleep(rnd.rng.uniform(0.2, 1.0))
        s.start()
    elif n == "kill9_etcd_member":
        m = rnd.rng.randrange(3)
        etcd.kill9(m)
        time.sleep(rnd.rng.uniform(0.3, 1.5))
        etcd.restart(m)
    elif n == "pause_primary_beyond_lease":
        pause(p)
        time.sleep(beyond_lease + rnd.rng.uniform(0, 0.8))
        resume(p)
    elif n == "partition_primary_from_standby":
        net.cut(where[prim], where[stby])
        time.sleep(rnd.rng.uniform(0.5, 2.0))
        net.heal()
    elif n == "partition_primary_from_etcd":
        for e in e_nodes:
            net.cut(where[prim], e)
        time.sleep(beyond_lease + rnd.rng.uniform(0, 1.0))
        net.heal()
    elif n == "partition_primary_from_both":
        net.isolate(where[prim])
        time.sleep(beyond_lease + rnd.rng.uniform(0, 1.0))
        net.heal()
    elif n == "torn_tail_on_kill":
        p.kill9()
        tear_tail(p.data_dir / "journal", rnd.rng.randint(1, 40))
        time.sleep(rnd.rng.uniform(0.3, 1.5))
        p.start()
    elif n == "crash_during_promotion":
        p.kill9()
        # About when the lease expires and the standby promotes itself.
        time.sleep(LEASE_TTL_S + rnd.rng.uniform(-0.2, 0.4))
        s.kill9()
        p.start()
        time.sleep(rnd.rng.uniform(0.1, 0.5))
        s.start()
    else:
        raise AssertionError(f"unknown nemesis {n}")


def verify(log: AckLog, nodes: dict, mode: str, rnd, lost_bound: int) -> None:
    rows = {}
    journals = {}
    for name, node in nodes.items():
        rows[f"{name}.journal"] = [i for i in journal_ids(node.data_dir)]
        rows[f"{name}.rdb"] = rdb_ids(node)
        journals[name] = journal_records(node.data_dir / "journal")
    report = check(log, rows, journals=journals, mode=mode,
                   reported_lag_rows=lost_bound if mode == "async" else None)
    assert report.ok, f"round {rnd.n} seed {rnd.seed} nemesis {rnd.nemesis}:\n{report}"
