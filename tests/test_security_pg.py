"""PostgreSQL wire and kdb+ IPC with a users file (--users), with clients
nobody here wrote: psql and psycopg (libpq's SCRAM-SHA-256 and MD5), PyKX
for kdb+ IPC; plus a small SCRAM client on a raw socket for what libpq
does not show (SQLSTATEs, the server-first a name gets, channel binding),
and protected mode's list of open doors."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import time

import psycopg
import requests
import pytest

os.environ.setdefault("PYKX_UNLICENSED", "true")
os.environ.setdefault("PYKX_SUPPRESS_WARNINGS", "true")
import pykx as kx  # noqa: E402

from harness import BIN, free_port, run  # noqa: E402

PORT_LOG = "PostgreSQL: failed login from 127.0.0.1 as"


def pw(name: str) -> str:
    return f"{name}-pw-1"


def user_entry(name: str, roles: list[str], md5: bool = False) -> str:
    args = [BIN, "user", "add", name]
    for r in roles:
        args += ["--role", r]
    if md5:
        args.append("--md5")
    p = subprocess.run(args, input=pw(name) + "\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert pw(name) not in p.stdout
    return p.stdout


def pg_md5(name: str, password: str) -> str:
    """PostgreSQL's md5 password hash, computed here independently."""
    return "md5" + hashlib.md5((password + name).encode()).hexdigest()


@pytest.fixture
def users(tmp_path):
    entries = [user_entry(n, r) for n, r in [("reader", ["read"]), ("writer", ["write"]),
                                             ("ops", ["admin"])]]
    entries.append(user_entry("both", ["read"], md5=True))
    # An entry with only an MD5 hash, as migrated from an old PostgreSQL.
    entries.append(f'[[user]]\nname = "legacy"\nroles = ["read"]\npg_md5 = "{pg_md5("legacy", pw("legacy"))}"\n')
    f = tmp_path / "users.toml"
    f.write_text("\n".join(entries))
    assert 'pg_md5 = "' + pg_md5("both", pw("both")) + '"' in f.read_text(), "--md5 writes PostgreSQL's hash"
    return f


def psql(node, user: str, password: str, extra: str = "") -> subprocess.CompletedProcess:
    conn = f"host=127.0.0.1 port={node.pg_port} user={user} dbname=tickdb sslmode=disable {extra}"
    env = dict(os.environ, PGPASSWORD=password)
    return subprocess.run(["psql", "-X", "-A", "-t", conn, "-c", "select 1"], capture_output=True,
                          text=True, timeout=30, env=env)


def pg_connect(node, user: str, password: str):
    return psycopg.connect(host="127.0.0.1", port=node.pg_port, user=user, password=password,
                           dbname="tickdb", sslmode="disable", autocommit=True, connect_timeout=10)


# --- a raw SCRAM client ---------------------------------------------------------

def _recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError(f"closed after {len(b)} of {n} bytes")
        b += chunk
    return b


def _recv_msg(s: socket.socket) -> tuple[bytes, bytes]:
    head = _recv_exact(s, 5)
    (n,) = struct.unpack("!i", head[1:])
    return head[:1], _recv_exact(s, n - 4)


def _error_fields(body: bytes) -> dict[str, str]:
    out = {}
    for part in body.split(b"\x00"):
        if part:
            out[chr(part[0])] = part[1:].decode()
    return out


def _startup(node, user: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", node.pg_port), timeout=10)
    params = b"user\x00" + user.encode() + b"\x00database\x00tickdb\x00\x00"
    s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
    return s


def _auth(s: socket.socket) -> tuple[int, bytes] | dict[str, str]:
    kind, body = _recv_msg(s)
    if kind == b"E":
        return _error_fields(body)
    assert kind == b"R", (kind, body)
    return struct.unpack("!i", body[:4])[0], body[4:]


def scram_login(node, user: str, password: str, client_first: str | None = None):
    """A SCRAM-SHA-256 login by hand: (what the server answered at each step,
    and the final error's fields or None when it let us in)."""
    s = _startup(node, user)
    steps = []
    try:
        got = _auth(s)
        if isinstance(got, dict):
            return steps, got
        code, body = got
        assert code == 10, code  # AuthenticationSASL
        steps.append(("mechanisms", [m for m in body.decode().split("\x00") if m]))
        nonce = base64.b64encode(os.urandom(18)).decode()
        first = client_first or f"n,,n=,r={nonce}"
        data = first.encode()
        msg = b"SCRAM-SHA-256\x00" + struct.pack("!i", len(data)) + data
        s.sendall(b"p" + struct.pack("!i", 4 + len(msg)) + msg)
        got = _auth(s)
        if isinstance(got, dict):
            return steps, got
        code, server_first = got
        assert code == 11, code  # SASLContinue
        server_first = server_first.decode()
        steps.append(("server-first", server_first))
        attrs = dict(a.split("=", 1) for a in server_first.split(","))
        salt, iters, rnonce = base64.b64decode(attrs["s"]), int(attrs["i"]), attrs["r"]
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iters)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={rnonce}"
        auth_msg = f"{first[3:]},{server_first},{without_proof}".encode()
        sig = hmac.new(stored, auth_msg, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
        final = f"{without_proof},p={proof}".encode()
        s.sendall(b"p" + struct.pack("!i", 4 + len(final)) + final)
        got = _auth(s)
        if isinstance(got, dict):
            return steps, got
        code, server_final = got
        assert code == 12, code  # SASLFinal
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        want = base64.b64encode(hmac.new(server_key, auth_msg, "sha256").digest()).decode()
        assert server_final.decode() == f"v={want}", "the server proves it holds the verifier"
        assert _auth(s) == (0, b"")  # AuthenticationOk
        return steps, None
    finally:
        s.close()


# --- PostgreSQL wire -------------------------------------------------------------

def test_psql_and_psycopg_log_in_with_scram_and_everything_else_is_refused(cluster, users):
    node = cluster.up(extra=["--users", str(users)])
    # Real clients, as a read user and as an admin.
    r = psql(node, "reader", pw("reader"))
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    with pg_connect(node, "ops", pw("ops")) as c:
        assert c.execute("select 41 + 1").fetchone() == (42,)
    with pg_connect(node, "reader", pw("reader")) as c:
        assert c.execute("select count(*) from trade").fetchone() == (0,)
    # The server offers SCRAM-SHA-256 only, and proves it holds the verifier.
    steps, err = scram_login(node, "reader", pw("reader"))
    assert err is None and steps[0] == ("mechanisms", ["SCRAM-SHA-256"]), (steps, err)

    # Wrong password, unknown user: the same answer.
    r = psql(node, "reader", "wrong")
    assert r.returncode != 0 and 'password authentication failed for user "reader"' in r.stderr, r.stderr
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "nobody"'):
        pg_connect(node, "nobody", "whatever")
    _, err = scram_login(node, "reader", "wrong")
    assert err["C"] == "28P01" and err["S"] == "FATAL" and "D" not in err, err
    # An unknown name costs the same round trips, with a salt of its own
    # that stays the same, so names cannot be probed.
    steps1, err1 = scram_login(node, "nobody", "x")
    steps2, _ = scram_login(node, "nobody", "y")
    steps3, _ = scram_login(node, "nobody2", "x")
    assert [s[0] for s in steps1] == ["mechanisms", "server-first"] and err1["C"] == "28P01", (steps1, err1)
    salt = lambda steps: dict(a.split("=", 1) for a in steps[1][1].split(","))["s"]  # noqa: E731
    assert salt(steps1) == salt(steps2) != salt(steps3)
    assert len(base64.b64decode(salt(steps1))) == 16 and ",i=4096" in steps1[1][1]
    # An MD5-only entry has no SCRAM verifier: refused without --pg-auth md5.
    r = psql(node, "legacy", pw("legacy"))
    assert r.returncode != 0 and 'password authentication failed for user "legacy"' in r.stderr, r.stderr

    # Right password, wrong role: a write-only user may not connect.
    r = psql(node, "writer", pw("writer"))
    assert r.returncode != 0 and "needs the read role" in r.stderr and "write" in r.stderr, r.stderr
    _, err = scram_login(node, "writer", pw("writer"))
    assert err["C"] == "28000" and 'user "writer"' in err["M"], err

    # Every failure is logged with the address and the name tried.
    log = node.wait_log(f"{PORT_LOG} `nobody`: unknown user")
    assert f"{PORT_LOG} `reader`: wrong password" in log
    assert f"{PORT_LOG} `legacy`" in log and f"{PORT_LOG} `writer`: the user lacks the read role" in log
    assert pw("reader") not in node.log.read_text()


def test_an_address_that_keeps_failing_is_refused_before_any_check(cluster, users):
    node = cluster.up(extra=["--users", str(users)])
    # Channel binding is refused, saying so (a failure like any other).
    _, err = scram_login(node, "reader", pw("reader"), client_first="p=tls-server-end-point,,n=,r=abcdef")
    assert err["C"] == "28P01" and "channel binding" in err.get("D", ""), err
    for _ in range(10):
        _, err = scram_login(node, "reader", "guess")
        assert err["C"] == "28P01", err
    # Refused at the startup packet, even with the right password.
    steps, err = scram_login(node, "reader", pw("reader"))
    assert steps == [] and err["C"] == "28000" and "too many failed logins" in err["M"], (steps, err)
    node.wait_log("the address is refused for")


def test_md5_for_old_clients_with_pg_auth_md5(cluster, users):
    node = cluster.up(extra=["--users", str(users), "--pg-auth", "md5"])
    # libpq's require_auth (PostgreSQL 16+) names the method the server asked for.
    libpq16 = psycopg.pq.version() >= 160000
    for user in ("legacy", "both"):
        with pg_connect(node, user, pw(user)) as c:
            assert c.execute("select 1").fetchone() == (1,)
        if libpq16:
            with psycopg.connect(host="127.0.0.1", port=node.pg_port, user=user, password=pw(user),
                                 dbname="tickdb", sslmode="disable", require_auth="md5"):
                pass
        r = psql(node, user, pw(user))
        assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    # Users without pg_md5 still log in with SCRAM.
    steps, err = scram_login(node, "reader", pw("reader"))
    assert err is None and steps[0] == ("mechanisms", ["SCRAM-SHA-256"]), (steps, err)
    r = psql(node, "legacy", "wrong")
    assert r.returncode != 0 and 'password authentication failed for user "legacy"' in r.stderr, r.stderr
    node.wait_log(f"{PORT_LOG} `legacy`: wrong password (md5)")


def test_without_a_users_file_pg_wire_is_unchanged(cluster):
    node = cluster.up()
    with pg_connect(node, "tickdb", "tickdb") as c:
        assert c.execute("select 1").fetchone() == (1,)
    r = psql(node, "tickdb", "wrong")
    assert r.returncode != 0 and "password authentication failed" in r.stderr.lower(), r.stderr


# --- kdb+ IPC ------------------------------------------------------------------

def ipc_login(node, creds: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", node.ipc_port), timeout=10) as s:
        s.sendall(creds + b"\x03\x00")
        return s.recv(1)


def q_connect(node, user: str, password: str):
    return kx.SyncQConnection("127.0.0.1", node.ipc_port, username=user, password=password, no_ctx=True)


def wait_count(q, want: int, timeout: float = 10) -> None:
    """Waits until the trade table holds `want` rows: .u.upd's answer means journaled, and the rdb
    applies the row just after."""
    deadline = time.monotonic() + timeout
    while (n := q('.s.e"SELECT count(*) AS n FROM trade"').pd()["n"].tolist()) != [want]:
        assert time.monotonic() < deadline, f"trade holds {n} rows, not {want}"
        time.sleep(0.05)


def test_kdb_ipc_checks_the_users_file_and_the_roles(cluster, users):
    port = free_port()
    node = cluster.up(extra=["--users", str(users), "--ipc-port", str(port)])
    node.ipc_port = port
    row = [kx.SymbolVector(["AAA"]), kx.FloatVector([1.5]), kx.LongVector([10])]

    # Right password: in; wrong password or unknown user: the handshake is closed ('access).
    assert ipc_login(node, f"reader:{pw('reader')}".encode()) == b"\x03"
    for creds in (b"reader:wrong", b"nobody:whatever", b"tickdb:tickdb", b"legacy:" + pw("legacy").encode()):
        assert ipc_login(node, creds) == b"", f"{creds!r} was let in"
    with pytest.raises(Exception):
        q_connect(node, "reader", "wrong")
    node.wait_log("kdb+ IPC: failed login from 127.0.0.1 as `nobody`: wrong user or password")

    # A writer writes but may not read or subscribe.
    with q_connect(node, "writer", pw("writer")) as q:
        q(".u.upd", "trade", row)
        with pytest.raises(kx.QError, match="access.*needs the read role"):
            q("select from trade")
        with pytest.raises(kx.QError, match="access"):
            q(".u.sub", "trade", kx.SymbolAtom(""))
    # A reader reads but may not write.
    with q_connect(node, "reader", pw("reader")) as q:
        wait_count(q, 1)
        with pytest.raises(kx.QError, match="access.*needs the write role"):
            q(".u.upd", "trade", row)
        with pytest.raises(kx.QError, match="access"):
            q("insert", kx.SymbolAtom("trade"), row)
    # An admin does both.
    with q_connect(node, "ops", pw("ops")) as q:
        q(".u.upd", "trade", row)
        wait_count(q, 2)
    node.wait_log("user `reader` may not make writes")


# --- protected mode ------------------------------------------------------------

def test_with_a_users_file_pg_and_ipc_are_no_open_doors(tmp_path, users):
    base = ["up", "--bind", "0.0.0.0", "--http-port", str(free_port()), "--ilp-port", str(free_port()),
            "--tp-port", str(free_port()), "--repl-port", str(free_port()), "--pg-port", str(free_port()),
            "--ipc-port", str(free_port()), "--data-dir", str(tmp_path / "d")]
    r = run([*base], timeout=30)
    assert r.returncode != 0 and "PostgreSQL wire with the default --pg-password" in r.stderr, r.stderr
    assert "kdb+ IPC with the default password" in r.stderr
    # With a users file PostgreSQL and IPC are no open doors: the node starts
    # (or, while another port still lacks authentication, its refusal does not
    # name them).
    http = free_port()
    args = [*base, "--users", str(users)]
    args[args.index("--http-port") + 1] = str(http)
    p = subprocess.Popen([BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{http}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        started = p.poll() is None
    finally:
        if p.poll() is None:
            p.kill()
        out = p.communicate(timeout=30)[0]
    assert started or "protected mode" in out, out
    assert "PostgreSQL wire with" not in out and "kdb+ IPC with" not in out, out
    r = run([*base, "--users", str(users), "--pg-no-auth", "--ipc-no-auth"], timeout=30)
    assert r.returncode != 0, r.stderr
    assert "PostgreSQL wire (--pg-no-auth)" in r.stderr and "kdb+ IPC (--ipc-no-auth)" in r.stderr, r.stderr
