"""Fault injection for Jepsen-style tests: a network whose links can be cut,
real etcd clusters, process nemeses and a seeded nemesis scheduler.

Two network modes, one API (`FaultNet`):

* ``netns`` (needs root and iproute2): a Linux bridge in a namespace of its
  own, one namespace per node joined to it by a veth pair, each node with
  its own address in a private /24 (10.231.X.0/24, X picked free). The test
  process (the "harness") has an address on the bridge too, so it reaches
  every node directly. Links are cut with routes, not iptables:
  ``ip route add blackhole PEER/32`` inside each namespace of the pair.

    - new connections fail fast: connect() gets EINVAL ("Invalid argument")
      at once, no SYN leaves the node;
    - existing TCP connections are NOT reset: they stall. Writes sit in the
      send buffer and reads block until the application's own timeout (or
      TCP's retransmission limit, ~15 min) gives up; a heal() before that
      lets them resume, retransmitted data and all;
    - every other pair keeps working, and so does loopback inside a node.

* ``proxy`` (fallback without root): nodes get distinct loopback addresses
  (127.0.0.10, .11, ...) and every directed link A->B:port that should be
  cuttable goes through a `FaultProxy`, a Python TCP relay thread. A node
  must be told the address to use for a peer with ``net.addr(a, b, port)``.
  Cutting blocks the proxies both ways: existing proxied connections are
  dropped (FIN/RST, not a stall as in netns mode) and new ones are refused
  (ECONNREFUSED, fast). Limits of this mode, which the namespace mode does
  not have: a connection to an address that did not come from addr() (e.g.
  an address a node advertises itself, in etcd or in a redirect) bypasses
  the proxy and is never cut; etcd members talk to each other directly, so
  etcd's own peer links cannot be cut (the links from a node to etcd can,
  when the node is given ``etcd.endpoints_for(node)``).

Everything a FaultNet creates (namespaces, veths, bridge, routes, proxies) is
removed by ``close()`` / ``__exit__``, by an atexit hook if a test crashed,
and namespaces left behind by a killed test run (a dead pid in the name) are
swept by the next FaultNet.

Nemeses on processes (`pause`, `resume`, `tear_tail`), an `Etcd` cluster
helper, and `NemesisPlan`, the seeded choice of one nemesis per round.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

import harness
from harness import Proc, free_port

NS_PREFIX = "fnet-"
HARNESS = "harness"
SUBNET_BASE = os.environ.get("TICKDB_FAULTNET_BASE", "10.231")
# Routes a cut installs carry this protocol number, so that a sweep can
# tell ours from anyone else's.
ROUTE_PROTO = 231
SEGMENT_HEADER_BYTES = 32
_SEGMENT_RE = re.compile(r"^journal-(\d{20})\.log$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,16}$")

_open_nets: list["FaultNet"] = []
_net_counter = 0


def _close_all() -> None:
    # Processes first (they may live in our namespaces), then the networks.
    harness._kill_all()
    for n in list(_open_nets):
        n.close()


atexit.register(_close_all)


def have_netns() -> tuple[bool, str]:
    """(True, "") when the namespace mode can work here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "needs root for network namespaces (netns mode)"
    if shutil.which("ip") is None:
        return False, "needs iproute2's `ip` for network namespaces"
    return True, ""


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        n, d = divmod(n, 36)
        s = digits[d] + s
        if n == 0:
            return s


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_netns() -> list[str]:
    """Names in `ip netns list` (without the "(id: N)" suffix)."""
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def sweep_stale() -> list[str]:
    """Deletes namespaces named by a FaultNet of a process that is gone (a
    test run killed before its atexit hook could run); returns their names.
    Their veths and bridge go with them, the root-side veth is deleted
    explicitly, and so are root-namespace routes of a cut with the harness
    (tagged `proto ROUTE_PROTO`) whose /24 no live net holds."""
    gone = []
    for ns in list_netns():
        if not ns.startswith(NS_PREFIX):
            continue
        try:
            parts = ns.split("-")
            pid, k = int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            continue
        ours = pid == os.getpid() and any(ns == n.tag or ns.startswith(n.tag + "-") for n in _open_nets)
        # A namespace with our pid that no open net of ours owns was left by
        # an earlier process that had the same pid.
        if not ours and (pid == os.getpid() or not _pid_alive(pid)):
            if len(parts) == 3:  # the bridge namespace: its root-side veth
                _ip("link", "del", f"fnh{_b36(pid)}{_b36(k)}", check=False)
            _ip("netns", "del", ns, check=False)
            gone.append(ns)
    # Root-namespace routes of a cut with the harness, whose /24 no live
    # net holds any more (a live one has its connected route on fnh*).
    routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
    owned = {line.split()[0].rsplit(".", 1)[0] for line in routes.splitlines()
             if line.startswith(SUBNET_BASE + ".") and "/24 dev fnh" in line}
    for line in _ip("-4", "route", "show", "proto", str(ROUTE_PROTO), check=False).stdout.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].startswith(SUBNET_BASE + ".") and f[1].split("/")[0].rsplit(".", 1)[0] not in owned:
            _ip("route", "del", f[0], f[1], check=False)
            gone.append(f"route {f[0]} {f[1]}")
    return gone


# --- processes that are not tickdb -------------------------------------


class ExtProc(Proc):
    """A harness `Proc` running any command (etcd, a Python helper) instead
    of the tickdb binary: same process group handling, log file, kill9 and
    atexit clean-up; `prefix` (e.g. a node's `ip netns exec NS`) applies."""

    def __init__(self, cmd: list[str], log: Path, http_port: int | None = None,
                 env: dict[str, str] | None = None):
        super().__init__(list(cmd[1:]), log, http_port)
        self.cmd = list(cmd)
        self.env = env

    def start(self, wait_ready: bool = False) -> "ExtProc":
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, *self.cmd],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        logf.close()
        harness._live.append(self)
        if wait_ready and self.http_port is not None:
            self.wait_ready()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# --- the network --------------------------------------------------------


@dataclass(eq=False)
class Node:
    """One host of the fault network. `prefix` runs a command there
    (`["ip", "netns", "exec", ns]`, or [] in proxy mode / for the harness)."""

    name: str
    ip: str
    ns: str | None
    index: int

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns] if self.ns else []

    def place(self, proc: Proc) -> Proc:
        """Makes a not yet started harness Proc run on this node (its
        `prefix`) and be reached at this node's address (`host`). The
        process must bind this node's ip (tickdb: `--bind node.ip`)."""
        proc.prefix = self.prefix
        proc.host = self.ip
        return proc

    def run(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 30)
        return subprocess.run([*self.prefix, *args], **kw)

    def __repr__(self) -> str:
        return f"Node({self.name} {self.ip}{' ns ' + self.ns if self.ns else ''})"


@dataclass
class ProbeResult:
    ok: bool
    error: str | None
    elapsed: float


_PROBE = r"""
import json, socket, sys, time
host, port, timeout, echo = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
t0 = time.monotonic()
try:
    with socket.create_connection((host, port), timeout=timeout) as c:
        if echo:
            c.sendall(b"ping")
            got = b""
            while len(got) < 4:
                d = c.recv(4 - len(got))
                if not d:
                    raise ConnectionError("closed before the echo came back")
                got += d
            if got != b"ping":
                raise ConnectionError(f"echo returned {got!r}")
    print(json.dumps({"ok": True, "error": None, "elapsed": time.monotonic() - t0}))
except Exception as e:
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}", "elapsed": time.monotonic() - t0}))
"""


def _probe_here(host: str, port: int, timeout: float, echo: bool) -> ProbeResult:
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as c:
            if echo:
                c.sendall(b"ping")
                got = b""
                while len(got) < 4:
                    d = c.recv(4 - len(got))
                    if not d:
                        raise ConnectionError("closed before the echo came back")
                    got += d
                if got != b"ping":
                    raise ConnectionError(f"echo returned {got!r}")
        return ProbeResult(True, None, time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        return ProbeResult(False, f"{type(e).__name__}: {e}", time.monotonic() - t0)


class FaultNet:
    """A network of nodes whose links can be cut (see the module docstring
    for the two modes and what a cut does in each).

        with FaultNet() as net:
            p, s = net.add_node("p"), net.add_node("s")
            net.cut(p, s)        # p <-/-> s, everything else untouched
            net.isolate(p)       # p cut from every node (not the harness)
            net.heal()           # all links back

    `mode`: "auto" (netns when root, else proxy), "netns" or "proxy".
    `route`: the route type a cut installs in netns mode: "blackhole"
    (connect() fails with EINVAL), "unreachable" (EHOSTUNREACH) or
    "prohibit" (EACCES); all three drop silently what is already in flight.
    Nodes may be passed by name or as `Node` everywhere; the test process
    itself is the node `HARNESS` ("harness", `net.harness`).
    """

    def __init__(self, mode: str = "auto", route: str = "blackhole"):
        global _net_counter
        if mode == "auto":
            mode = "netns" if have_netns()[0] else "proxy"
        if mode == "netns":
            ok, why = have_netns()
            if not ok:
                raise RuntimeError(why)
        elif mode != "proxy":
            raise ValueError(f"mode must be auto, netns or proxy, not {mode!r}")
        if route not in ("blackhole", "unreachable", "prohibit"):
            raise ValueError(f"route must be blackhole, unreachable or prohibit, not {route!r}")
        self.mode = mode
        self.route = route
        _net_counter += 1
        self.k = _net_counter
        # Namespace names: fnet-<pid>-<k>[-<node>]; the root-side veth (the
        # only interface named in the root namespace): fnh<pid36><k36>.
        self.tag = f"{NS_PREFIX}{os.getpid()}-{self.k}"
        self.bridge_ns = self.tag
        self.host_if = f"fnh{_b36(os.getpid())}{_b36(self.k)}"
        assert len(self.host_if) <= 15
        self.subnet: str | None = None  # "10.231.X"
        self.nodes: dict[str, Node] = {}
        self.harness: Node | None = None
        self._namespaces: list[str] = []
        self._routes: set[tuple[str | None, str]] = set()  # (ns or None=root, ip)
        self._cuts: set[frozenset[str]] = set()
        self._isolated: dict[str, bool] = {}  # name -> from_harness
        self._proxies: dict[tuple[str, str, int], FaultProxy] = {}
        self._lock = threading.RLock()
        self._started = False
        self._closed = False

    # --- life cycle --------------------------------------------------

    def __enter__(self) -> "FaultNet":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "FaultNet":
        if self._started:
            return self
        self._started = True
        _open_nets.append(self)
        if self.mode == "proxy":
            self.harness = Node(HARNESS, "127.0.0.1", None, -1)
            return self
        sweep_stale()
        try:
            # Pick a /24 no interface or route of the root namespace uses and
            # claim it (address on our root veth) under a lock, so two test
            # runs started together do not pick the same one.
            lockf = open(os.path.join(tempfile.gettempdir(), "faultnet-subnet.lock"), "w")
            try:
                fcntl.flock(lockf, fcntl.LOCK_EX)
                self.subnet = self._pick_subnet()
                self._create_bridge()
            finally:
                lockf.close()
        except BaseException:
            self.close()
            raise
        return self

    def _pick_subnet(self) -> str:
        used = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
        start = os.getpid() % 200
        for i in range(250):
            x = (start + i) % 250 + 1
            sub = f"{SUBNET_BASE}.{x}"
            if f"{sub}." not in used:
                return sub
        raise RuntimeError(f"no free /24 left in {SUBNET_BASE}.0.0/16")

    def _create_bridge(self) -> None:
        ns = self.bridge_ns
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0", ns=ns)
        _ip("link", "set", "br0", "up", ns=ns)
        # The harness's leg: root side is host_if, bridge side "hv".
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", "hv", "netns", ns)
        _ip("link", "set", "hv", "master", "br0", ns=ns)
        _ip("link", "set", "hv", "up", ns=ns)
        hip = f"{self.subnet}.1"
        _ip("addr", "add", f"{hip}/24", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        self.harness = Node(HARNESS, hip, None, -1)

    def close(self) -> None:
        """Removes everything this net made; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for p in list(self._proxies.values()):
            p.close()
        self._proxies.clear()
        if self.mode == "netns":
            # Root routes first (they outlive the namespaces), then the
            # namespaces (their veths, the bridge and the root-side veth,
            # whose peer lives in the bridge namespace, go with them).
            for ns, ip in list(self._routes):
                if ns is None:
                    _ip("route", "del", self.route, f"{ip}/32", check=False)
            self._routes.clear()
            # The root-side veth explicitly: a deleted namespace is torn
            # down asynchronously by the kernel, and with it the veth.
            if self.subnet is not None:
                _ip("link", "del", self.host_if, check=False)
            for ns in reversed(self._namespaces):
                _ip("netns", "del", ns, check=False)
            self._namespaces.clear()
        if self in _open_nets:
            _open_nets.remove(self)

    # --- nodes -------------------------------------------------------

    def add_node(self, name: str) -> Node:
        """A new node: in netns mode a namespace `fnet-<pid>-<k>-<name>`
        with eth0 on the bridge and lo up; in proxy mode a loopback
        address of its own."""
        self.start()
        if not _NAME_RE.match(name) or name == HARNESS:
            raise ValueError(f"bad node name {name!r}: 1-16 of [A-Za-z0-9_], not {HARNESS!r}")
        with self._lock:
            if name in self.nodes:
                raise ValueError(f"node {name!r} exists")
            i = len(self.nodes)
            if i >= 240:
                raise ValueError("at most 240 nodes")
            if self.mode == "proxy":
                node = Node(name, f"127.0.0.{10 + i}", None, i)
            else:
                ns = f"{self.tag}-{name}"
                _ip("netns", "add", ns)
                self._namespaces.append(ns)
                ip = f"{self.subnet}.{10 + i}"
                _ip("link", "add", "eth0", "netns", ns, "type", "veth",
                    "peer", "name", f"v{i}", "netns", self.bridge_ns)
                _ip("link", "set", f"v{i}", "master", "br0", ns=self.bridge_ns)
                _ip("link", "set", f"v{i}", "up", ns=self.bridge_ns)
                _ip("addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                _ip("link", "set", "lo", "up", ns=ns)
                node = Node(name, ip, ns, i)
            self.nodes[name] = node
            for other, from_harness in self._isolated.items():
                self._cut(self.nodes[other], node)
            return node

    def node(self, n: "Node | str") -> Node:
        if isinstance(n, Node):
            return n
        if n == HARNESS:
            assert self.harness is not None, "start() the net first"
            return self.harness
        return self.nodes[n]

    # --- addresses ---------------------------------------------------

    def addr(self, a: "Node | str", b: "Node | str", port: int) -> str:
        """"host:port" that node `a` (or HARNESS) must use to reach node
        `b`'s `port` so that cuts between a and b apply. netns mode: b's own
        address. Proxy mode: a FaultProxy for the directed link a->b:port,
        made on first use (blocked at once if a and b are cut)."""
        h, p = self.host_port(a, b, port)
        return f"{h}:{p}"

    def host_port(self, a: "Node | str", b: "Node | str", port: int) -> tuple[str, int]:
        a, b = self.node(a), self.node(b)
        if self.mode == "netns" or a.name == b.name:
            return b.ip, port
        with self._lock:
            key = (a.name, b.name, port)
            px = self._proxies.get(key)
            if px is None:
                px = FaultProxy(a.ip, b.ip, port, name=f"{a.name}->{b.name}:{port}").start()
                if frozenset((a.name, b.name)) in self._cuts:
                    px.block()
                self._proxies[key] = px
            return px.listen_host, px.port

    # --- faults ------------------------------------------------------

    def cut(self, a: "Node | str", b: "Node | str") -> None:
        """Cuts a <-> b both ways; all other pairs keep working."""
        with self._lock:
            self._cut(self.node(a), self.node(b))

    def _cut(self, a: Node, b: Node) -> None:
        if a.name == b.name:
            return
        self._cuts.add(frozenset((a.name, b.name)))
        if self.mode == "netns":
            self._add_route(a.ns, b.ip)
            self._add_route(b.ns, a.ip)
        else:
            for (x, y, _), px in self._proxies.items():
                if {x, y} == {a.name, b.name}:
                    px.block()

    def _add_route(self, ns: str | None, ip: str) -> None:
        if (ns, ip) in self._routes:
            return
        _ip("route", "add", self.route, f"{ip}/32", "proto", str(ROUTE_PROTO), ns=ns)
        self._routes.add((ns, ip))

    def isolate(self, a: "Node | str", from_harness: bool = False) -> None:
        """Cuts `a` from every other node (and from nodes added later while
        it stays isolated). The harness keeps reaching it unless
        `from_harness` (then the test's own HTTP to `a` fails too)."""
        with self._lock:
            a = self.node(a)
            self._isolated[a.name] = from_harness
            for b in self.nodes.values():
                self._cut(a, b)
            if from_harness:
                self._cut(a, self.node(HARNESS))

    def heal(self) -> None:
        """Every cut and isolation undone."""
        with self._lock:
            if self.mode == "netns":
                for ns, ip in list(self._routes):
                    _ip("route", "del", self.route, f"{ip}/32", ns=ns, check=False)
                    self._routes.discard((ns, ip))
            else:
                for px in self._proxies.values():
                    px.unblock()
            self._cuts.clear()
            self._isolated.clear()

    def partitions(self) -> list[tuple[str, str]]:
        """The pairs cut now, sorted (for logs)."""
        return sorted(tuple(sorted(p)) for p in self._cuts)

    def is_cut(self, a: "Node | str", b: "Node | str") -> bool:
        return frozenset((self.node(a).name, self.node(b).name)) in self._cuts

    # --- checks ------------------------------------------------------

    def probe(self, a: "Node | str", b: "Node | str", port: int, timeout: float = 1.0,
              echo: bool = False) -> ProbeResult:
        """A TCP connect from node `a` to `b`'s `port` (then, with `echo`,
        b"ping" sent and expected back). From inside a's namespace in netns
        mode (a short Python subprocess); from here in proxy mode, through
        the a->b proxy."""
        a, b = self.node(a), self.node(b)
        host, p = self.host_port(a, b, port)
        if self.mode == "proxy" or a.ns is None:
            return _probe_here(host, p, timeout, echo)
        r = a.run([sys.executable, "-c", _PROBE, host, str(p), str(timeout), "1" if echo else "0"],
                  timeout=timeout + 30)
        try:
            return ProbeResult(**json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError) as e:
            raise RuntimeError(f"probe from {a.name} failed to run: {r.stdout} {r.stderr}") from e

    def can_reach(self, a: "Node | str", b: "Node | str", port: int, timeout: float = 1.0) -> bool:
        return self.probe(a, b, port, timeout).ok

    def __repr__(self) -> str:
        return f"FaultNet({self.mode} {self.tag} nodes={list(self.nodes)} cuts={self.partitions()})"


# --- the proxy of the fallback mode ---------------------------------------


def _abort(s: socket.socket) -> None:
    """Drops a connection now: wakes threads blocked on it, RST on close."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


class FaultProxy:
    """A TCP relay listen_host:port -> target_host:target_port, one thread to
    accept and two per connection. `block()` drops every relayed connection
    and stops listening (new connects are refused, ECONNREFUSED);
    `unblock()` listens again on the same port."""

    def __init__(self, listen_host: str, target_host: str, target_port: int, name: str = "",
                 listen_port: int = 0, connect_timeout: float = 5.0):
        self.listen_host = listen_host
        self.target = (target_host, target_port)
        self.name = name or f"{listen_host}->{target_host}:{target_port}"
        self.port = listen_port
        self.connect_timeout = connect_timeout
        self.blocked = False
        self.accepted = 0
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._closed = False

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def start(self) -> "FaultProxy":
        self._listen()
        return self

    def _listen(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.listen_host, self.port))
                break
            except OSError:
                s.close()
                if self.port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # our old port, briefly taken by another socket
        s.listen(128)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept_loop, args=(s,), name=f"proxy {self.name}",
                         daemon=True).start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return  # closed by block()/close()
            with self._lock:
                if self.blocked or self._closed:
                    _abort(c)
                    continue
                self.accepted += 1
            threading.Thread(target=self._relay, args=(c,), daemon=True).start()

    def _relay(self, c: socket.socket) -> None:
        try:
            u = socket.create_connection(self.target, timeout=self.connect_timeout)
            u.settimeout(None)
        except OSError:
            _abort(c)
            return
        with self._lock:
            if self.blocked or self._closed:
                _abort(c)
                _abort(u)
                return
            self._conns.update((c, u))
        left = [2]  # pumps still running; the last one closes both sockets

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    d = src.recv(65536)
                    if not d:
                        break
                    dst.sendall(d)
                dst.shutdown(socket.SHUT_WR)  # pass the half-close on
            except OSError:
                _abort(src)
                _abort(dst)
            with self._lock:
                left[0] -= 1
                last = left[0] == 0
                if last:
                    self._conns.discard(c)
                    self._conns.discard(u)
            if last:
                c.close()
                u.close()

        threading.Thread(target=pump, args=(u, c), daemon=True).start()
        pump(c, u)

    def block(self) -> None:
        with self._lock:
            if self.blocked:
                return
            self.blocked = True
            conns, self._conns = self._conns, set()
            listener, self._listener = self._listener, None
        if listener is not None:
            _abort(listener)
        for s in conns:
            _abort(s)

    def unblock(self) -> None:
        with self._lock:
            if not self.blocked or self._closed:
                return
            self.blocked = False
        self._listen()

    def close(self) -> None:
        self.block()
        self._closed = True


# --- etcd ---------------------------------------------------------------

ETCD = os.environ.get("TICKDB_TEST_ETCD_BIN", shutil.which("etcd") or "/usr/bin/etcd")


def have_etcd() -> tuple[bool, str]:
    if not os.path.exists(ETCD):
        return False, f"needs etcd (not found at {ETCD}; set TICKDB_TEST_ETCD_BIN)"
    return True, ""


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


@dataclass(eq=False)
class EtcdMember:
    name: str
    host: str
    client_port: int
    peer_port: int
    data_dir: Path
    node: Node | None
    proc: ExtProc | None = None
    args: list[str] = field(default_factory=list)

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()


class Etcd:
    """A real etcd cluster of 1 or 3 (any n) members, one process each in
    its own process group, data under `tmp/etcd-<name>`, log in
    `tmp/etcd-<name>.log`.

    Members live on `nodes` (one each: in their namespaces in netns mode,
    on their loopback addresses in proxy mode; ports 2379/2380 in a
    namespace, free ones otherwise) or, without nodes, on 127.0.0.1 with
    `n` members on free ports.

    Raft timing is `--heartbeat-interval 50 --election-timeout 500` (ms;
    etcd's defaults are 100/1000): a killed or cut leader is replaced in
    about half a second instead of one to two, which keeps every nemesis
    round short, while 500 ms stays ten heartbeats and far above any RTT
    on a veth or loopback, so an idle but healthy cluster does not hold
    spurious elections. A tickdb lease on top should be several election
    timeouts long.
    """

    def __init__(self, tmp: Path, nodes: list[Node] | None = None, n: int = 1,
                 net: FaultNet | None = None, ready_timeout: float = 30.0):
        self.tmp = Path(tmp)
        self.net = net
        self.ready_timeout = ready_timeout
        self.token = f"fnet-{os.getpid()}-{random.randrange(1 << 30)}"
        self.members: list[EtcdMember] = []
        specs = nodes if nodes is not None else [None] * n
        for i, node in enumerate(specs):
            name = node.name if node is not None else f"etcd{i}"
            if node is not None and node.ns:
                host, cport, pport = node.ip, 2379, 2380
            else:
                host = node.ip if node is not None else "127.0.0.1"
                cport, pport = free_port(host), free_port(host)
                while pport == cport:
                    pport = free_port(host)
            self.members.append(EtcdMember(name, host, cport, pport, self.tmp / f"etcd-{name}", node))
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.args = [
                ETCD, "--name", m.name, "--data-dir", str(m.data_dir),
                "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
                "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", initial, "--initial-cluster-token", self.token,
                "--initial-cluster-state", "new",
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--logger", "zap", "--log-outputs", "stderr",
            ]

    def __enter__(self) -> "Etcd":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def client_urls(self) -> list[str]:
        """The members' client URLs as the harness reaches them directly."""
        return [m.client_url for m in self.members]

    def endpoints_for(self, node: "Node | str") -> list[str]:
        """Client URLs for `node` to use, through the net (so that cutting
        node from a member applies in proxy mode too)."""
        if self.net is None:
            return self.client_urls
        return [f"http://{self.net.addr(node, m.node, m.client_port)}" if m.node else m.client_url
                for m in self.members]

    def member(self, m: "EtcdMember | int | str") -> EtcdMember:
        if isinstance(m, EtcdMember):
            return m
        if isinstance(m, int):
            return self.members[m]
        if isinstance(m, Node):
            m = m.name
        for x in self.members:
            if x.name == m:
                return x
        raise KeyError(m)

    def _spawn(self, m: EtcdMember) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        p = ExtProc(m.args, self.tmp / f"etcd-{m.name}.log", http_port=m.client_port, env=env)
        p.host = m.host
        if m.node is not None:
            p.prefix = m.node.prefix
        m.proc = p.start()

    def start(self) -> list[str]:
        """Starts every member, waits until each answers a read; returns
        the client URLs."""
        for m in self.members:
            self._spawn(m)
        for m in self.members:
            self.wait_ready(m)
        return self.client_urls

    def wait_ready(self, m: "EtcdMember | int | str", timeout: float | None = None) -> None:
        """Until the member answers a linearizable range (so it has a
        leader and a quorum behind it)."""
        m = self.member(m)
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        err = ""
        while time.monotonic() < deadline:
            if m.proc is not None and m.proc.proc.poll() is not None:
                raise AssertionError(f"etcd {m.name} exited with {m.proc.proc.returncode}:\n{m.proc.log_tail()}")
            try:
                r = requests.post(m.client_url + "/v3/kv/range", json={"key": "Zm9v"}, timeout=1)
                if r.status_code == 200:
                    return
                err = f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as e:
                err = str(e)
            time.sleep(0.05)
        tail = m.proc.log_tail() if m.proc else "(not started)"
        raise AssertionError(f"etcd {m.name} not ready after {timeout or self.ready_timeout}s: {err}\n{tail}")

    def kill9(self, m: "EtcdMember | int | str") -> EtcdMember:
        m = self.member(m)
        if m.proc is not None:
            m.proc.kill9()
        return m

    def restart(self, m: "EtcdMember | int | str", wait: bool = True) -> EtcdMember:
        """Starts the member again on its data dir (killing it first if it
        still runs); with `wait`, until it answers (needs a quorum)."""
        m = self.member(m)
        if m.alive():
            m.proc.kill9()
        self._spawn(m)
        if wait:
            self.wait_ready(m)
        return m

    def stop(self) -> None:
        """kill -9 every member (etcd's state here is throwaway)."""
        for m in self.members:
            if m.proc is not None:
                m.proc.kill9()

    # --- a minimal client over the JSON gateway -------------------------

    def _post(self, path: str, body: dict, member, timeout: float) -> dict:
        urls = [self.member(member).client_url] if member is not None else \
            [m.client_url for m in self.members if m.alive()]
        last: Exception | None = None
        for u in urls:
            try:
                r = requests.post(u + path, json=body, timeout=timeout)
                if r.status_code == 200:
                    return r.json()
                last = AssertionError(f"{u}{path}: {r.status_code} {r.text[:300]}")
            except requests.RequestException as e:
                last = e
        raise AssertionError(f"etcd {path} failed on {urls}: {last}")

    def put(self, key: str, value: str, member=None, timeout: float = 3.0) -> dict:
        """PUT via the gRPC-JSON gateway (first live member that answers,
        or the one given)."""
        return self._post("/v3/kv/put", {"key": _b64(key), "value": _b64(value)}, member, timeout)

    def get(self, key: str, member=None, timeout: float = 3.0) -> str | None:
        """Linearizable GET via the gateway; None when absent."""
        r = self._post("/v3/kv/range", {"key": _b64(key)}, member, timeout)
        kvs = r.get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None


# --- process nemeses ------------------------------------------------------


def pause(proc: Proc) -> None:
    """SIGSTOP to the process's whole group: it stops dead (timers, lease
    renewals, sockets unanswered; the kernel still ACKs TCP)."""
    proc._signal_group(signal.SIGSTOP)


def resume(proc: Proc) -> None:
    """SIGCONT to the group paused by `pause`."""
    proc._signal_group(signal.SIGCONT)


@dataclass
class TornTail:
    path: Path
    old_size: int
    new_size: int

    @property
    def cut(self) -> int:
        return self.old_size - self.new_size


def newest_segment(journal_dir: Path) -> Path | None:
    """The journal-<20-digit first seq>.log with the highest first seq."""
    segs = sorted((int(m.group(1)), p) for p in Path(journal_dir).iterdir()
                  if (m := _SEGMENT_RE.match(p.name)) and p.is_file())
    return segs[-1][1] if segs else None


def tear_tail(journal_dir: Path, nbytes: int) -> TornTail:
    """Truncates the newest segment by up to `nbytes`, as a kill -9 in the
    middle of a write leaves it; never into the 32-byte segment header (a
    segment holding only its header is left alone: cut 0). For a process
    that is dead. Raises FileNotFoundError when there is no segment."""
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    seg = newest_segment(Path(journal_dir))
    if seg is None:
        raise FileNotFoundError(f"no journal-*.log segment in {journal_dir}")
    old = seg.stat().st_size
    new = max(min(old, SEGMENT_HEADER_BYTES), old - nbytes)
    if new != old:
        with open(seg, "r+b") as f:
            f.truncate(new)
            os.fsync(f.fileno())
    return TornTail(seg, old, new)


# --- the nemesis scheduler -------------------------------------------------

NEMESES = (
    "kill9_primary",
    "kill9_standby",
    "kill9_etcd_member",
    "pause_primary_beyond_lease",
    "partition_primary_from_standby",
    "partition_primary_from_etcd",
    "partition_primary_from_both",
    "torn_tail_on_kill",
    "crash_during_promotion",
)


@dataclass
class Round:
    """One round: its number, its seed, the nemesis chosen, and `rng` for
    every other random choice of the round (durations, which member, how
    many bytes), seeded by the round's seed only."""

    n: int
    seed: int
    nemesis: str
    rng: random.Random


class NemesisPlan:
    """Chooses one nemesis per round, reproducibly.

    Round 1's seed is the plan's seed; each later round's seed is derived
    from the previous round's. A round's nemesis and its `rng` depend on
    its seed (and the `nemeses` list) only, so `TICKDB_FAULT_SEED=S` replays
    the round that printed `seed S` as round 1, and the rounds after it.
    The environment variable overrides the seed passed in.
    """

    def __init__(self, seed: int | None = None, nemeses: tuple[str, ...] | list[str] = NEMESES,
                 log=print):
        env = os.environ.get("TICKDB_FAULT_SEED")
        if env:
            seed = int(env)
        elif seed is None:
            seed = time.time_ns() % (1 << 32)
        unknown = set(nemeses) - set(NEMESES)
        if unknown or not nemeses:
            raise ValueError(f"unknown nemeses {sorted(unknown)} (known: {NEMESES})" if unknown
                             else "no nemeses")
        self.seed = int(seed)
        self.nemeses = tuple(nemeses)
        self.log = log
        self._next_seed = self.seed
        self.n = 0
        self.log(f"nemesis plan seed {self.seed} (rerun with TICKDB_FAULT_SEED={self.seed})")

    @staticmethod
    def derive(seed: int) -> int:
        return random.Random(seed ^ 0x9E3779B97F4A7C15).getrandbits(32)

    def next(self) -> Round:
        self.n += 1
        seed = self._next_seed
        self._next_seed = self.derive(seed)
        rng = random.Random(seed)
        nemesis = self.nemeses[rng.randrange(len(self.nemeses))]
        self.log(f"round {self.n} seed {seed} nemesis {nemesis}")
        return Round(self.n, seed, nemesis, rng)

    def rounds(self, count: int):
        for _ in range(count):
            yield self.next()
