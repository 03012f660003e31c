"""Self-tests of the fault-injection harness (faultnet.py) with real
processes: links cut and healed between network namespaces (root), the
proxy fallback (anyone), real etcd clusters that lose members, process
pauses, torn journal tails and the seeded nemesis plan. Each test checks
that what it built is gone afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import requests

import faultnet
from faultnet import (HARNESS, NEMESES, Etcd, ExtProc, FaultNet, FaultProxy, NemesisPlan, free_port,
                      have_etcd, have_netns, list_netns, pause, resume, tear_tail)

ECHO = r"""
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def need(ok_why: tuple[bool, str]) -> None:
    ok, why = ok_why
    if not ok:
        print(f"skipped: {why}")
        pytest.skip(why)


def leftovers(net: FaultNet) -> list[str]:
    """What of `net` is still on this machine."""
    left = [f"netns {ns}" for ns in list_netns() if ns == net.tag or ns.startswith(net.tag + "-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    if net.host_if + ":" in links or net.host_if + "@" in links:
        left.append(f"link {net.host_if}")
    if net.subnet:
        routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True).stdout
        left += [f"route {r}" for r in routes.splitlines() if f"{net.subnet}." in r]
    return left


@pytest.fixture
def net():
    need(have_netns())
    n = FaultNet(mode="netns").start()
    try:
        yield n
    finally:
        n.close()
        assert leftovers(n) == [], leftovers(n)


@pytest.fixture
def pnet():
    """The fallback, proxy mode (runs with or without root)."""
    n = FaultNet(mode="proxy").start()
    try:
        yield n
    finally:
        proxies = list(n._proxies.values())
        n.close()
        assert all(p._listener is None and not p._conns for p in proxies)


def echo_server(net: FaultNet, node, tmp_path, port: int | None = None) -> tuple[ExtProc, int]:
    """A Python TCP echo server on `node` (in its namespace in netns mode);
    returns it once the harness can reach it directly."""
    port = port or (7000 if net.mode == "netns" else free_port(node.ip))
    p = ExtProc([sys.executable, "-c", ECHO, node.ip, str(port)], tmp_path / f"echo-{node.name}.log")
    node.place(p).start()
    deadline = time.monotonic() + 10
    while not faultnet._probe_here(node.ip, port, 1.0, True).ok:
        assert p.alive(), p.log_tail()
        assert time.monotonic() < deadline, f"echo on {node} not up:\n{p.log_tail()}"
        time.sleep(0.05)
    return p, port


# --- network namespaces ----------------------------------------------------


def test_cut_fails_fast_and_heal_restores(net, tmp_path):
    a, b = net.add_node("a"), net.add_node("b")
    assert a.prefix == ["ip", "netns", "exec", a.ns] and a.ip != b.ip
    srv, port = echo_server(net, a, tmp_path)
    try:
        assert net.probe(b, a, port, echo=True).ok
        assert net.probe(HARNESS, a, port, echo=True).ok
        net.cut(a, b)
        assert net.partitions() == [("a", "b")] and net.is_cut("b", "a")
        r = net.probe(b, a, port, timeout=5)
        assert not r.ok and r.elapsed < 0.5, r  # fails fast, no connect timeout
        assert "Invalid argument" in r.error, r
        # Loopback inside a, and the harness, are not part of the cut.
        assert net.probe(HARNESS, a, port, echo=True).ok
        assert net.probe(a, a, port, echo=True).ok
        net.cut(a, b)  # twice is fine
        net.heal()
        assert net.partitions() == []
        assert net.probe(b, a, port, echo=True).ok
        assert net.probe(a, b, 1).error.startswith("ConnectionRefusedError")  # reachable, no listener
    finally:
        srv.kill9()


def test_an_open_connection_stalls_during_a_cut_and_resumes_after_heal(net, tmp_path):
    a, b = net.add_node("a"), net.add_node("b")
    srv, port = echo_server(net, a, tmp_path)
    client = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
c.sendall(b"one"); assert c.recv(3) == b"one"
print("connected", flush=True)
sys.stdin.readline()
c.settimeout(1.5)
try:
    c.sendall(b"two")
    print("got", c.recv(3), flush=True)
except socket.timeout:
    print("stalled", flush=True)
except OSError as e:
    print("error", e, flush=True)
sys.stdin.readline()
c.settimeout(20)
print("resumed", c.recv(3), flush=True)
"""
    p = subprocess.Popen([*b.prefix, sys.executable, "-c", client, a.ip, str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "connected"
        net.cut(a, b)
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "stalled"  # not reset: stuck
        net.heal()
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "resumed b'two'"  # retransmitted
    finally:
        p.kill()
        p.wait()
        srv.kill9()


def test_isolate_keeps_third_pairs_working(net, tmp_path):
    a, b, c = (net.add_node(x) for x in "abc")
    servers = {n.name: echo_server(net, n, tmp_path)[0] for n in (a, b, c)}
    try:
        net.isolate(a)
        for x, y in [(a, b), (b, a), (a, c), (c, a)]:
            assert not net.probe(x, y, 7000).ok, (x, y)
        for x, y in [(b, c), (c, b)]:
            assert net.probe(x, y, 7000, echo=True).ok, (x, y)
        assert net.probe(HARNESS, a, 7000, echo=True).ok  # the harness still reaches it
        # A node added while a is isolated is cut from it too.
        d = net.add_node("d")
        assert not net.probe(d, a, 7000).ok and net.probe(d, b, 7000).ok
        net.isolate(a, from_harness=True)
        r = net.probe(HARNESS, a, 7000)
        assert not r.ok and r.elapsed < 0.5, r
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{a.ip}:7000/", timeout=2)
        net.heal()
        for x in (a, b, c, d):
            for y in (a, b, c):
                if x is not y:
                    assert net.probe(x, y, 7000, echo=True).ok, (x, y)
        assert net.probe(HARNESS, a, 7000, echo=True).ok
    finally:
        for s in servers.values():
            s.kill9()


def test_unreachable_routes_say_so(tmp_path):
    need(have_netns())
    with FaultNet(mode="netns", route="unreachable") as n:
        a, b = n.add_node("a"), n.add_node("b")
        srv, port = echo_server(n, a, tmp_path)
        try:
            n.cut(a, b)
            r = n.probe(b, a, port)
            assert not r.ok and "No route to host" in r.error, r
        finally:
            srv.kill9()
    assert leftovers(n) == []


def test_a_three_member_etcd_survives_a_kill9(net, tmp_path):
    need(have_etcd())
    members = [net.add_node(f"e{i}") for i in range(3)]
    p = net.add_node("p")
    etcd = Etcd(tmp_path, members, net=net)
    try:
        urls = etcd.start()
        assert urls == [f"http://{m.ip}:2379" for m in members]
        assert etcd.endpoints_for(p) == urls
        etcd.put("k", "v0", member=0)
        assert etcd.get("k", member=2) == "v0"
        # Lose one member (leader or not): the other two keep a quorum and
        # take writes through the JSON gateway, after an election if needed.
        etcd.kill9(1)
        assert not etcd.members[1].alive()
        put_eventually(etcd, "k", "v1", member=0)
        put_eventually(etcd, "k", "v2", member=2)
        assert etcd.get("k", member=0) == "v2"
        # Back, it catches up from its data dir and the others.
        etcd.restart("e1")
        assert etcd.get("k", member=1) == "v2"
        # Cut one member from its peers: the other two still write; the
        # cut one can no longer serve a linearizable read.
        net.isolate(members[2])
        put_eventually(etcd, "k", "v3", member=0)
        with pytest.raises(AssertionError):
            etcd.get("k", member=2, timeout=1.5)
        # A tickdb node cut from every member cannot reach etcd at all.
        for m in members:
            net.cut(p, m)
        assert not any(net.probe(p, m, 2379).ok for m in members)
        net.heal()
        assert all(net.probe(p, m, 2379).ok for m in members)
        deadline = time.monotonic() + 15
        while True:
            try:
                assert etcd.get("k", member=2, timeout=1) == "v3"
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        etcd.stop()
    assert not any(m.alive() for m in etcd.members)


def put_eventually(etcd: Etcd, key: str, value: str, member, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            etcd.put(key, value, member=member, timeout=1)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- the proxy fallback ------------------------------------------------------


def test_fault_proxy_drops_and_refuses_while_blocked(pnet, tmp_path):
    a = pnet.add_node("a")
    srv, port = echo_server(pnet, a, tmp_path)
    px = FaultProxy("127.0.0.1", a.ip, port).start()
    try:
        c = socket.create_connection(("127.0.0.1", px.port), timeout=2)
        c.sendall(b"hi")
        assert c.recv(2) == b"hi"
        px.block()
        # The open connection is dropped (EOF or reset), new ones refused.
        try:
            assert c.recv(2) == b""
        except ConnectionResetError:
            pass
        c.close()
        r = faultnet._probe_here("127.0.0.1", px.port, 1.0, False)
        assert not r.ok and "ConnectionRefusedError" in r.error and r.elapsed < 0.5, r
        px.unblock()
        assert faultnet._probe_here("127.0.0.1", px.port, 1.0, True).ok
        assert px.accepted == 2
    finally:
        px.close()
        srv.kill9()


def test_proxy_mode_cut_isolate_heal(pnet, tmp_path):
    a, b, c = (pnet.add_node(x) for x in "abc")
    assert [n.ip for n in (a, b, c)] == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]
    assert a.prefix == []
    servers = {n.name: echo_server(pnet, n, tmp_path) for n in (a, b, c)}
    port = {k: v[1] for k, v in servers.items()}
    try:
        # a reaches b's port through a proxy of its own; b's address itself
        # is not what a must use.
        host, p = pnet.host_port(a, b, port["b"])
        assert host == a.ip and p != port["b"]
        assert pnet.addr(a, b, port["b"]) == f"{host}:{p}"
        assert pnet.addr(a, b, port["b"]) == pnet.addr("a", "b", port["b"])  # one proxy per link
        held = socket.create_connection((host, p), timeout=2)
        held.sendall(b"x")
        assert held.recv(1) == b"x"
        assert pnet.probe(a, b, port["b"], echo=True).ok
        pnet.cut(a, b)
        try:
            assert held.recv(1) == b""  # dropped
        except ConnectionResetError:
            pass
        held.close()
        assert not pnet.probe(a, b, port["b"]).ok and not pnet.probe(b, a, port["a"]).ok
        assert pnet.probe(a, c, port["c"], echo=True).ok and pnet.probe(c, b, port["b"], echo=True).ok
        pnet.heal()
        assert pnet.probe(a, b, port["b"], echo=True).ok and pnet.probe(b, a, port["a"], echo=True).ok
        pnet.isolate(a)
        assert not pnet.probe(b, a, port["a"]).ok and not pnet.probe(a, c, port["c"]).ok
        assert pnet.probe(b, c, port["c"], echo=True).ok
        assert pnet.probe(HARNESS, a, port["a"], echo=True).ok
        pnet.isolate(a, from_harness=True)
        assert not pnet.probe(HARNESS, a, port["a"]).ok
        pnet.heal()
        assert pnet.probe(HARNESS, a, port["a"], echo=True).ok and pnet.probe(c, a, port["a"], echo=True).ok
    finally:
        for s, _ in servers.values():
            s.kill9()


def test_etcd_on_loopback_restarts_and_is_cut_through_proxies(pnet, tmp_path):
    need(have_etcd())
    e, p = pnet.add_node("e"), pnet.add_node("p")
    etcd = Etcd(tmp_path, [e], net=pnet)
    try:
        assert etcd.start() == [f"http://{e.ip}:{etcd.members[0].client_port}"]
        etcd.put("k", "v")
        ep = etcd.endpoints_for(p)[0]
        assert ep != etcd.client_urls[0]
        r = requests.post(ep + "/v3/kv/range", json={"key": "aw=="}, timeout=2)  # "k"
        assert r.status_code == 200 and r.json()["count"] == "1", r.text
        pnet.cut(p, e)
        with pytest.raises(requests.ConnectionError):
            requests.post(ep + "/v3/kv/range", json={"key": "aw=="}, timeout=2)
        pnet.heal()
        assert requests.post(ep + "/v3/kv/range", json={"key": "aw=="}, timeout=2).status_code == 200
        etcd.kill9(0)
        with pytest.raises(AssertionError):
            etcd.get("k", timeout=0.5)
        etcd.restart(0)
        assert etcd.get("k") == "v"  # from its data dir
    finally:
        etcd.stop()


def test_etcd_without_a_net_on_free_ports(tmp_path):
    need(have_etcd())
    with Etcd(tmp_path, n=3) as etcd:
        assert len(set(etcd.client_urls)) == 3
        assert all(u.startswith("http://127.0.0.1:") for u in etcd.client_urls)
        etcd.put("a", "1", member=0)
        assert [etcd.get("a", member=i) for i in range(3)] == ["1"] * 3
        procs = [m.proc for m in etcd.members]
    assert all(p.proc.poll() is not None for p in procs)


# --- process nemeses ---------------------------------------------------------


def test_pause_and_resume_a_process_group(pnet, tmp_path):
    a = pnet.add_node("a")
    srv, port = echo_server(pnet, a, tmp_path)
    try:
        pause(srv)
        # The kernel still accepts the connection; nobody answers.
        r = faultnet._probe_here(a.ip, port, 0.5, True)
        assert not r.ok and "timed out" in r.error, r
        resume(srv)
        assert faultnet._probe_here(a.ip, port, 2.0, True).ok
    finally:
        srv.kill9()


def test_tear_tail_cuts_the_newest_segment_but_never_its_header(tmp_path):
    d = tmp_path / "journal"
    d.mkdir()
    with pytest.raises(FileNotFoundError):
        tear_tail(d, 3)
    old = d / "journal-00000000000000000001.log"
    new = d / "journal-00000000000000000100.log"
    old.write_bytes(b"H" * 32 + b"r" * 100)
    new.write_bytes(b"H" * 32 + b"r" * 10)
    (d / "journal-00000000000000000200.log.tmp").write_bytes(b"x" * 50)  # not a segment
    (d / "checkpoint").write_bytes(b"x" * 50)
    t = tear_tail(d, 3)
    assert (t.path, t.old_size, t.new_size, t.cut) == (new, 42, 39, 3)
    assert new.read_bytes() == b"H" * 32 + b"r" * 7
    assert old.stat().st_size == 132
    t = tear_tail(d, 100)  # only down to the header
    assert (t.new_size, t.cut) == (32, 7)
    assert tear_tail(d, 5).cut == 0
    assert new.read_bytes() == b"H" * 32


def test_the_nemesis_plan_is_reproducible_per_round(capsys, monkeypatch):
    monkeypatch.delenv("TICKDB_FAULT_SEED", raising=False)
    rounds = list(NemesisPlan(1234).rounds(40))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "nemesis plan seed 1234 (rerun with TICKDB_FAULT_SEED=1234)"
    assert out[1] == f"round 1 seed 1234 nemesis {rounds[0].nemesis}"
    assert out[1:] == [f"round {r.n} seed {r.seed} nemesis {r.nemesis}" for r in rounds]
    assert {r.nemesis for r in rounds} == set(NEMESES)  # 40 rounds see all 9
    # Same seed, same plan, same per-round randomness.
    again = list(NemesisPlan(1234, log=lambda s: None).rounds(40))
    assert [(r.seed, r.nemesis, r.rng.random()) for r in again] == \
        [(r.seed, r.nemesis, r.rng.random()) for r in rounds]
    # A round's seed replays that round (as round 1) and those after it.
    k = rounds[17]
    monkeypatch.setenv("TICKDB_FAULT_SEED", str(k.seed))
    replay = list(NemesisPlan(99, log=lambda s: None).rounds(5))  # the env var wins
    assert [(r.seed, r.nemesis) for r in replay] == [(r.seed, r.nemesis) for r in rounds[17:22]]
    assert replay[0].n == 1
    monkeypatch.delenv("TICKDB_FAULT_SEED")
    only = list(NemesisPlan(5, nemeses=["kill9_primary", "torn_tail_on_kill"], log=lambda s: None).rounds(20))
    assert {r.nemesis for r in only} == {"kill9_primary", "torn_tail_on_kill"}
    with pytest.raises(ValueError, match="unknown"):
        NemesisPlan(1, nemeses=["kill9_everyone"])


def test_nothing_of_this_run_is_left_behind():
    """After the tests above (run it last): no namespace of this process,
    no root-side veth of ours."""
    if not have_netns()[0]:
        print(f"skipped: {have_netns()[1]}")
        pytest.skip(have_netns()[1])
    mine = f"{faultnet.NS_PREFIX}{os.getpid()}-"
    assert [ns for ns in list_netns() if ns.startswith(mine)] == []
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    ours = [f"fnh{faultnet._b36(os.getpid())}{faultnet._b36(k)}" for k in range(1, faultnet._net_counter + 1)]
    assert [x for x in ours if x + ":" in links or x + "@" in links] == []
    assert faultnet._open_nets == []
