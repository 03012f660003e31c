"""Start the real tickdb binary on free loopback ports and talk to it.

Every process runs in its own process group and is killed (the whole group)
when the test ends, also when it fails or is interrupted; an atexit hook
catches whatever a crashed test left behind. On failure the test prints the
tail of each server's log.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests

BIN = os.environ.get(
    "TICKDB_BIN", str(Path(__file__).resolve().parent.parent / "target" / "debug" / "tickdb")
)
READY_TIMEOUT_S = 60.0
# Start-ups retried on fresh ports when a port found free was taken before
# the server bound it (another process's client or server got it first).
PORT_RACE_RETRIES = 5

_live: list["Proc"] = []


def _kill_all() -> None:
    for p in list(_live):
        p.kill9()


atexit.register(_kill_all)


class PortRace(AssertionError):
    """The server exited because a port it was given was already in use."""


# Ports handed to servers come from just below the kernel's ephemeral range,
# never from it: a port picked there and released can be taken as the local
# port of any outgoing connection before the server binds it (CI saw a node in
# a namespace lose its PostgreSQL port to its own etcd client that way). Below
# the range only listeners this suite starts can hold a port, and the cursor
# walks the range so one run does not hand the same port out twice.
PORT_POOL_SIZE = 12_000


def _port_pool() -> range:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(1024, low - PORT_POOL_SIZE), low)


_POOL = _port_pool()
_cursor = os.getpid() * 7919 % max(1, len(_POOL))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now, outside the ephemeral range."""
    global _cursor
    for _ in range(len(_POOL)):
        port = _POOL[_cursor % len(_POOL)]
        _cursor += 1
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # pool exhausted (or empty): the kernel's pick
        s.bind((host, 0))
        return s.getsockname()[1]


class Proc:
    """One tickdb process (any role)."""

    def __init__(self, args: list[str], log: Path, http_port: int | None = None):
        self.args = args
        self.log = log
        self.http_port = http_port
        self.proc: subprocess.Popen | None = None
        # Where its ports are reached, and a command it runs under (e.g.
        # `ip netns exec NS` for a node in a network namespace).
        self.host = "127.0.0.1"
        self.prefix: list[str] = []

    def start(self, wait_ready: bool = True) -> "Proc":
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, BIN, *self.args],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logf.close()
        _live.append(self)
        if wait_ready and self.http_port is not None:
            self.wait_ready()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                if "address already in use" in self.log_tail(5):
                    _live.remove(self)
                    raise PortRace(self.log_tail(5))
                raise AssertionError(
                    f"tickdb exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}"
                )
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.02)
        raise AssertionError(f"tickdb not ready after {timeout}s:\n{self.log_tail()}")

    def wait_log(self, text: str, timeout: float = 10, lines: int = 200) -> str:
        """The log's tail once it contains `text`. A node writes a log line
        after it has acted (closed the socket, answered), so a client that
        saw the action may look before the line is there."""
        deadline = time.monotonic() + timeout
        while True:
            tail = self.log_tail(lines)
            if text in tail:
                return tail
            if time.monotonic() >= deadline:
                raise AssertionError(f"{text!r} not logged within {timeout}s:\n{tail}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill9(self) -> None:
        """SIGKILL to the whole group: no flush, no final sync."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self.proc.wait()
        if self in _live:
            _live.remove(self)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.kill9()
        return rc

    def wait_exit(self, timeout: float = 30) -> int:
        assert self.proc is not None
        rc = self.proc.wait(timeout=timeout)
        if self in _live:
            _live.remove(self)
        return rc

    # --- queries -------------------------------------------------------

    def exec(self, sql: str) -> list[list]:
        r = requests.get(self.url + "/exec", params={"query": sql}, timeout=30)
        assert r.status_code == 200, f"/exec {sql!r}: {r.status_code} {r.text}"
        return r.json()["dataset"]

    def scalar(self, sql: str):
        rows = self.exec(sql)
        assert len(rows) == 1 and len(rows[0]) == 1, rows
        return rows[0][0]

    def status(self) -> dict:
        return requests.get(self.url + "/status", timeout=10).json()

    def wait_rows(self, table: str, n: int, timeout: float = 30) -> int:
        """Polls until `table` has at least n rows; returns the count."""
        deadline = time.monotonic() + timeout
        got = -1
        while time.monotonic() < deadline:
            r = requests.get(self.url + "/exec", params={"query": f"select count(*) from {table}"}, timeout=30)
            # A node still loading (or, behind a shared rp, port, one member
            # of several) says so with 503: not yet, try again.
            if r.status_code == 503 and r.json().get("code") == "not_ready":
                time.sleep(0.05)
                continue
            assert r.status_code == 200, f"/exec count({table}): {r.status_code} {r.text}"
            got = r.json()["dataset"][0][0]
            if got >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{table}: {got} rows after {timeout}s, want {n}\n{self.log_tail()}")


class Cluster:
    """Factory for processes of one test; tears them all down at the end."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[Proc] = []
        self.n = 0

    def _log(self, role: str) -> Path:
        self.n += 1
        return self.tmp / f"{self.n:02d}-{role}.log"

    def _retrying(self, make, ports: dict, start: bool) -> Proc:
        """make() builds a Proc; started here, on fresh ports again when
        one it picked was taken meanwhile (never when the caller chose)."""
        for attempt in range(PORT_RACE_RETRIES):
            p = make()
            if not start:
                return p
            try:
                return p.start()
            except PortRace:
                if ports or attempt == PORT_RACE_RETRIES - 1:
                    raise

    def up(self, data_dir: Path | None = None, extra: list[str] = (), start: bool = True,
           prepare=None, **ports) -> Proc:
        """`tickdb up` on free ports; ports may be given (http, ilp, tp, pg).
        prepare(proc), if given, adjusts each Proc before it starts (a
        namespace prefix, say), so that a port-race retry gets it too."""
        def make() -> Proc:
            p = self._up(data_dir, extra, **ports)
            if prepare is not None:
                prepare(p)
            return p
        return self._retrying(make, ports, start)

    def _up(self, data_dir: Path | None = None, extra: list[str] = (), **ports) -> Proc:
        http = ports.get("http", free_port())
        ilp = ports.get("ilp", free_port())
        tp = ports.get("tp", free_port())
        pg = ports.get("pg", free_port())
        repl = ports.get("repl", free_port())
        data_dir = data_dir or self.tmp / "data"
        p = Proc(
            ["up", "--http-port", str(http), "--ilp-port", str(ilp), "--tp-port", str(tp),
             "--repl-port", str(repl),
             "--pg-port", str(pg), "--data-dir", str(data_dir), *extra],
            self._log("up"),
            http_port=int(str(http).split(",")[-1]),
        )
        p.ilp_port, p.tp_port, p.data_dir = ilp, tp, data_dir
        p.pg_port = int(str(pg).split(",")[-1])
        p.repl_port = int(str(repl).split(",")[-1])
        self.procs.append(p)
        return p

    def tp(self, data_dir: Path | None = None, extra: list[str] = (), **ports) -> Proc:
        return self._retrying(lambda: self._tp(data_dir, extra, **ports), ports, True)

    def _tp(self, data_dir: Path | None = None, extra: list[str] = (), **ports) -> Proc:
        http = ports.get("http", free_port())
        ilp = ports.get("ilp", free_port())
        tp = ports.get("tp", free_port())
        repl = ports.get("repl", free_port())
        data_dir = data_dir or self.tmp / "data"
        p = Proc(
            ["tp", "--http-port", str(http), "--ilp-port", str(ilp), "--tp-port", str(tp),
             "--repl-port", str(repl),
             "--data-dir", str(data_dir), *extra],
            self._log("tp"),
            http_port=http,
        )
        p.ilp_port, p.tp_port, p.data_dir = ilp, tp, data_dir
        p.repl_port = int(str(repl).split(",")[-1])
        self.procs.append(p)
        return p

    def rdb(self, tp_port: int, http: str | int | None = None, extra: list[str] = (), start: bool = True) -> Proc:
        chosen = {"http": http} if http is not None else {}
        return self._retrying(lambda: self._rdb(tp_port, http, extra), chosen, start)

    def _rdb(self, tp_port: int, http: str | int | None, extra: list[str]) -> Proc:
        http = http if http is not None else free_port()
        pg = free_port()
        p = Proc(
            ["rdb", "--tp", f"127.0.0.1:{tp_port}", "--http-port", str(http), "--pg-port", str(pg), *extra],
            self._log("rdb"),
            http_port=int(str(http).split(",")[-1]),
        )
        p.pg_port = pg
        self.procs.append(p)
        return p

    def raw(self, args: list[str], role: str = "cmd") -> Proc:
        p = Proc(args, self._log(role))
        self.procs.append(p)
        return p.start(wait_ready=False)

    def teardown(self) -> None:
        for p in self.procs:
            p.kill9()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log.name} ---\n{p.log_tail()}" for p in self.procs)


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs a short tickdb command to completion."""
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


# --- query groups (socket sharding) ------------------------------------------

def shared(port: int) -> str:
    """A port flag's value that shares the port (SO_REUSEPORT): rp,PORT."""
    return f"rp,{port}"


def member(cluster: Cluster, tp_port: int, http: int, pg: int, ipc: int | None = None,
           extra: list[str] = (), start: bool = True) -> Proc:
    """An rdb in a query group: its HTTP, PostgreSQL (and IPC) ports are the
    group's shared ones (rp,PORT) and it has an --admin-port of its own. The
    harness checks readiness there, since the shared port may be answered by
    another member. proc.shared_url is the group's HTTP address."""
    admin = free_port()
    args = ["rdb", "--tp", f"127.0.0.1:{tp_port}", "--http-port", shared(http), "--pg-port", shared(pg),
            "--admin-port", str(admin)]
    if ipc is not None:
        args += ["--ipc-port", shared(ipc)]
    p = Proc([*args, *extra], cluster._log("member"), http_port=admin)
    p.admin_port, p.pg_port, p.ipc_port, p.shared_http = admin, pg, ipc, http
    p.shared_url = f"http://127.0.0.1:{http}"
    cluster.procs.append(p)
    return p.start() if start else p
