"""Users, roles, cross-site refusal and protected mode on the HTTP port, the
config file's precedence (file < TICKDB_* environment < flag), and the
README's example config. Real clients: requests and the `questdb` client
(basic auth with username/password, bearer with token)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests
from questdb import Sender, TimestampNanos
from questdb import QuestDBError

from harness import BIN, free_port, run

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000_000_000


def user_entry(name: str, roles: list[str], password: str | None, token: bool = False) -> tuple[str, str | None]:
    """A [[user]] entry from `tickdb user add`, and the token it printed."""
    args = [BIN, "user", "add", name]
    for r in roles:
        args += ["--role", r]
    if token:
        args.append("--token")
    if password is None:
        args.append("--no-password")
    p = subprocess.run(args, input=(password or "") + "\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert password is None or password not in p.stdout, "the file must never hold the password"
    tok = p.stderr.strip().splitlines()[-1] if token else None
    return p.stdout, tok


@pytest.fixture
def users(tmp_path):
    entries, tokens = [], {}
    for name, roles in [("reader", ["read"]), ("writer", ["write"]), ("ops", ["admin"])]:
        e, t = user_entry(name, roles, f"{name}-pw-1", token=True)
        entries.append(e)
        tokens[name] = t
    f = tmp_path / "users.toml"
    f.write_text("\n".join(entries))
    return f, tokens


def basic(name: str) -> tuple[str, str]:
    return (name, f"{name}-pw-1")


def scram_verifier(password: str) -> str:
    """PostgreSQL's SCRAM-SHA-256 verifier, computed here independently."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda b: base64.b64encode(b).decode()
    return f"SCRAM-SHA-256$4096:{b64(salt)}${b64(stored)}:{b64(server)}"


def wait_count(node, auth, n: int, table="trade") -> int:
    deadline = time.monotonic() + 10
    got = count(node, auth, table)
    while got != n and time.monotonic() < deadline:
        time.sleep(0.05)
        got = count(node, auth, table)
    return got


def count(node, auth, table="trade") -> int:
    r = requests.get(node.url + "/exec", params={"query": f"select count(*) from {table}"}, auth=auth, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["dataset"][0][0]


def test_every_http_path_checks_the_user_and_role_and_applies_nothing_when_refused(cluster, users):
    f, tokens = users
    node = cluster.up(extra=["--users", str(f)])
    ilp = f"trade,sym=AAA price=1.5,size=10i {T0}\n"
    assert requests.get(node.url + "/health", timeout=5).status_code == 200
    ops = basic("ops")
    # Seed one row as the writer.
    r = requests.post(node.url + "/write", data=ilp, auth=basic("writer"), timeout=10)
    assert r.status_code == 204, r.text
    assert wait_count(node, ops, 1) == 1

    cases = [
        ("GET", "/exec?query=select%201", "read"),
        ("GET", "/status", "read"),
        ("GET", "/metrics", "read"),
        ("POST", "/write", "write"),
        ("POST", "/api/v2/write", "write"),
        ("POST", "/clear?tables=trade", "admin"),
        ("POST", "/checkpoint", "admin"),
    ]
    creds = {
        "none": {},
        "wrong": {"auth": ("ops", "nope")},
        "reader": {"auth": basic("reader")},
        "writer": {"auth": basic("writer")},
        "writer-token": {"headers": {"Authorization": f"Bearer {tokens['writer']}"}},
        "bad-token": {"headers": {"Authorization": "Bearer not-a-token"}},
    }
    holds = {"reader": "read", "writer": "write", "writer-token": "write"}
    for method, path, needs in cases:
        for who, kw in creds.items():
            body = ilp if "write" in path else None
            r = requests.request(method, node.url + path, data=body, timeout=10, **kw)
            if who in ("none", "wrong", "bad-token"):
                assert r.status_code == 401, (method, path, who, r.status_code, r.text)
                assert "www-authenticate" in {k.lower() for k in r.headers}
            elif holds[who] == needs:
                assert r.status_code in (200, 204), (method, path, who, r.status_code, r.text)
            else:
                assert r.status_code == 403, (method, path, who, r.status_code, r.text)
                assert f"needs {needs}" in r.json()["message"]
    # The writer's accepted writes added rows; every refused clear applied
    # nothing (the rows are all there).
    assert wait_count(node, ops, 5) == 5, "1 seed + 2 paths x 2 writer credentials; refused clears removed nothing"
    # The admin's clear works.
    r = requests.post(node.url + "/clear?tables=trade", auth=ops, timeout=10)
    assert r.status_code == 200, r.text
    assert wait_count(node, ops, 0) == 0
    assert "failed login" in node.log_tail(400)


def test_the_questdb_client_logs_in_with_password_and_with_token(cluster, users):
    f, tokens = users
    node = cluster.up(extra=["--users", str(f)])
    host = f"127.0.0.1:{node.http_port}"
    with Sender.from_conf(f"http::addr={host};username=writer;password=writer-pw-1;") as s:
        s.row("trade", symbols={"sym": "PW"}, columns={"price": 2.0, "size": 1}, at=TimestampNanos(T0))
    with Sender.from_conf(f"http::addr={host};token={tokens['writer']};") as s:
        s.row("trade", symbols={"sym": "TOK"}, columns={"price": 3.0, "size": 1}, at=TimestampNanos(T0 + 1))
    with pytest.raises(QuestDBError):
        with Sender.from_conf(f"http::addr={host};username=reader;password=reader-pw-1;retry_timeout=0;") as s:
            s.row("trade", symbols={"sym": "NO"}, columns={"price": 4.0, "size": 1}, at=TimestampNanos(T0 + 2))
    r = requests.get(node.url + "/exec", params={"query": "select sym from trade order by sym"}, auth=basic("reader"), timeout=10)
    assert r.status_code == 200, r.text
    assert [row[0] for row in r.json()["dataset"]] == ["PW", "TOK"]


def test_cross_site_requests_are_refused_with_or_without_users(cluster):
    node = cluster.up()
    r = requests.post(node.url + "/write", data=f"trade,sym=A price=1.0,size=1i {T0}\n", timeout=10)
    assert r.status_code == 204
    node.wait_rows("trade", 1)
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
        r = requests.post(node.url + "/clear?tables=trade", headers=headers, timeout=10)
        assert r.status_code == 403, (headers, r.text)
        assert r.json()["code"] == "cross_site_request"
    assert node.scalar("select count(*) from trade") == 1, "a refused clear deletes nothing"
    same = {"Origin": f"http://127.0.0.1:{node.http_port}"}
    r = requests.get(node.url + "/exec", params={"query": "select 1"}, headers=same, timeout=10)
    assert r.status_code == 200, r.text


def test_failed_logins_are_limited_per_address(cluster, users):
    f, _ = users
    node = cluster.up(extra=["--users", str(f)])
    codes = [requests.get(node.url + "/status", auth=("ops", f"guess{i}"), timeout=10).status_code for i in range(12)]
    assert codes[:10] == [401] * 10, codes
    assert 429 in codes[10:], codes
    r = requests.get(node.url + "/status", auth=basic("ops"), timeout=10)
    assert r.status_code == 429, "even the right password waits out the block"
    assert int(r.headers["Retry-After"]) >= 1
    node.wait_log("refused for")


def test_protected_mode_refuses_non_loopback_without_real_credentials(tmp_path, users):
    f, _ = users
    # A users file whose admin has the default password, written by hand
    # (`tickdb user add` refuses that password).
    weak = tmp_path / "weak.toml"
    weak.write_text(f'[[user]]\nname = "tickdb"\nroles = ["admin"]\npassword = "{scram_verifier("tickdb")}"\n')
    p = subprocess.run([BIN, "user", "add", "tickdb", "--role", "admin"], input="tickdb\n",
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "default" in p.stderr
    base = ["up", "--bind", "0.0.0.0", "--http-port", str(free_port()), "--ilp-port", str(free_port()),
            "--tp-port", str(free_port()), "--repl-port", str(free_port()), "--pg-port", str(free_port()),
            "--data-dir", str(tmp_path / "d")]
    for extra, want in [
        ([], "no --users file"),
        (["--users", str(f), "--pg-no-auth"], "--pg-no-auth"),
        (["--users", str(weak)], "default password or their own name as password: tickdb"),
    ]:
        r = run([*base, *extra], timeout=30)
        assert r.returncode != 0, r.stderr
        assert "protected mode" in r.stderr and want in r.stderr, r.stderr
        assert "--no-protected-mode" in r.stderr
    assert not (tmp_path / "d").exists(), "a refused start touches no data"


def test_config_file_then_environment_then_flag(tmp_path):
    cfg = tmp_path / "tickdb.toml"
    cfg.write_text(
        'fsync = "interval"\n'
        "query_timeout_ms = 1111\n"
        "http_port = 9001\n"
        "[rdb]\n"
        "http_port = 9002\n"
        'pg_password = "from-file"\n'
        "hot_restart_parallelism = 3\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKDB_")}
    env["TICKDB_BIN"] = BIN

    def show(args, extra_env=None):
        e = dict(env, **(extra_env or {}))
        p = subprocess.run([BIN, "config", "print", "--config", str(cfg), *args], capture_output=True,
                           text=True, timeout=30, env=e)
        assert p.returncode == 0, p.stderr
        return {k: v for k, v, _ in re.findall(r"^(\w+) = (.+?)  # (.+)$", p.stdout, re.M)}, p.stdout

    s, text = show(["rdb", "--tp", "127.0.0.1:1"])
    assert s["http_port"] == '"9002"' or s["http_port"] == "9002", text
    assert "config file" in text
    assert s["query_timeout_ms"].startswith("1111"), text
    assert s["pg_password"] == '"********"', text
    assert "from-file" not in text
    s, text = show(["rdb", "--tp", "127.0.0.1:1"], {"TICKDB_HTTP_PORT": "9003", "TICKDB_QUERY_TIMEOUT_MS": "2222"})
    assert s["http_port"].strip('"') == "9003" and "environment TICKDB_HTTP_PORT" in text, text
    assert s["query_timeout_ms"] == "2222", text
    s, text = show(["rdb", "--tp", "127.0.0.1:1", "--http-port", "9004"], {"TICKDB_HTTP_PORT": "9003"})
    assert s["http_port"].strip('"') == "9004", text
    # The tp has fsync from the top level, not the rdb's table.
    s, text = show(["tp"])
    assert s["fsync"] == '"interval"' and s["http_port"].strip('"') == "9001", text

    # Mistakes name the file and the key.
    bad = tmp_path / "bad.toml"
    bad.write_text("[rdb]\nhttp_prot = 1\n")
    r = run(["config", "print", "--config", str(bad), "rdb", "--tp", "x:1"])
    assert r.returncode != 0 and "rdb.http_prot" in r.stderr and str(bad) in r.stderr, r.stderr


def test_a_node_runs_with_what_its_config_file_says(cluster, tmp_path):
    http = free_port()
    cfg = tmp_path / "node.toml"
    cfg.write_text(f"[up]\nhttp_port = {http}\nquery_timeout_ms = 5000\n")
    node = cluster.raw(["--config", str(cfg), "up", "--ilp-port", str(free_port()), "--tp-port", str(free_port()),
                        "--repl-port", str(free_port()), "--pg-port", str(free_port()),
                        "--data-dir", str(tmp_path / "data")], role="up")
    node.http_port = http
    node.wait_ready()
    assert node.scalar("select 41 + 1") == 42


def readme_config() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- example-config -->\s*```toml\n(.*?)```", text, re.S)
    assert m, "README.md has an example config (```toml after <!-- example-config -->)"
    return m.group(1)


def test_the_readme_example_config_is_what_tickdb_reads(tmp_path):
    cfg = tmp_path / "tickdb.toml"
    cfg.write_text(readme_config())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKDB_")}
    for role in (["up"], ["tp"], ["rdb", "--tp", "127.0.0.1:8710"]):
        p = subprocess.run([BIN, "config", "print", "--config", str(cfg), *role], capture_output=True, text=True,
                           timeout=30, env=env)
        assert p.returncode == 0, (role, p.stderr)
        assert "config file" in p.stdout, p.stdout


def ilp_user(name: str, roles: list[str]) -> tuple[str, str]:
    """A [[user]] entry with an ILP TCP key, and the questdb client's
    auth parameters (`username=…;token=…;token_x=…;token_y=…;`)."""
    args = [BIN, "user", "add", name, "--ilp-key", "--no-password"]
    for r in roles:
        args += ["--role", r]
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    conf = p.stderr.strip().splitlines()[-1]
    assert conf.startswith("tcp::addr=HOST:PORT;"), conf
    d = re.search(r"token=([^;]+);", conf).group(1)
    assert d not in p.stdout, "the file must never hold the private key"
    return p.stdout, conf.removeprefix("tcp::addr=HOST:PORT;")


def test_ilp_tcp_takes_questdbs_key_challenge(cluster, tmp_path):
    feed, feed_auth = ilp_user("feed", ["write"])
    dash, dash_auth = ilp_user("dash", ["read"])
    _, stranger_auth = ilp_user("feed", ["write"])  # the same name, another key
    f = tmp_path / "users.toml"
    f.write_text(feed + "\n" + dash + "\n" + user_entry("ops", ["admin"], "ops-pw-1")[0])
    node = cluster.up(extra=["--users", str(f)])
    ops = ("ops", "ops-pw-1")

    def send(auth: str, sym: str) -> None:
        try:
            with Sender.from_conf(f"tcp::addr=127.0.0.1:{node.ilp_port};{auth}") as s:
                s.row("trade", symbols={"sym": sym}, columns={"price": 1.0, "size": 1}, at=TimestampNanos(T0))
        except QuestDBError:
            pass  # a refused client may see the close as an error

    send(feed_auth, "OK")
    assert wait_count(node, ops, 1) == 1
    send(stranger_auth, "STRANGER")
    send(dash_auth, "READER")
    send("", "ANON")
    node.wait_log("lacks the write role")
    time.sleep(0.5)
    r = requests.get(node.url + "/exec", params={"query": "select sym from trade"}, auth=ops, timeout=10)
    assert [row[0] for row in r.json()["dataset"]] == ["OK"], "refused connections wrote nothing"
    log = node.log_tail(400)
    assert "ILP TCP: failed login" in log and "wrong user or key" in log


def test_the_subscription_port_takes_only_logged_in_users_with_their_role(cluster, users, tmp_path):
    f, _ = users
    tp = cluster.tp(extra=["--users", str(f)])
    r = requests.post(tp.url + "/write", data=f"trade,sym=S price=1.0,size=1i {T0}\n", auth=basic("writer"), timeout=10)
    assert r.status_code == 204, r.text
    # Without a user, with a wrong password, and as a user without read:
    # refused, and each says why in the tp's log.
    for extra, env, why in [
        ([], {}, "log in before subscribing"),
        (["--tp-user", "reader"], {"TICKDB_TP_PASSWORD": "wrong"}, "failed login from 127.0.0.1 as `reader`"),
        (["--tp-user", "writer"], {"TICKDB_TP_PASSWORD": "writer-pw-1"}, "lacks the read role"),
    ]:
        p = cluster.rdb(tp.tp_port, extra=extra, start=False)
        old = dict(os.environ)
        os.environ.update(env)
        try:
            p.start(wait_ready=False)
        finally:
            os.environ.clear()
            os.environ.update(old)
        tp.wait_log(why)
        p.kill9()
    # The reader follows the tp.
    os.environ["TICKDB_TP_PASSWORD"] = "reader-pw-1"
    try:
        rdb = cluster.rdb(tp.tp_port, extra=["--tp-user", "reader"])
    finally:
        del os.environ["TICKDB_TP_PASSWORD"]
    assert rdb.wait_rows("trade", 1) == 1


def test_admin_commands_log_in_as_the_admin_user(cluster, users):
    f, _ = users
    node = cluster.up(extra=["--users", str(f)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKDB_ADMIN")}
    args = [BIN, "eod", "--node", f"127.0.0.1:{node.http_port}", "--no-wait"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode != 0 and "401" in p.stderr, p.stderr
    p = subprocess.run(args, capture_output=True, text=True, timeout=30,
                       env=dict(env, TICKDB_ADMIN_USER="reader", TICKDB_ADMIN_PASSWORD="reader-pw-1"))
    assert p.returncode != 0 and "403" in p.stderr, p.stderr
    p = subprocess.run(args, capture_output=True, text=True, timeout=30,
                       env=dict(env, TICKDB_ADMIN_USER="ops", TICKDB_ADMIN_PASSWORD="ops-pw-1"))
    assert p.returncode == 0 and "marker journaled" in p.stderr, p.stderr


def frame(ty: int, body: bytes) -> bytes:
    """One subscription-protocol frame (docs/protocol.md)."""
    import struct
    return struct.pack("<IB", len(body), ty) + body


def str16(s: str) -> bytes:
    import struct
    b = s.encode()
    return struct.pack("<H", len(b)) + b


def read_frame(sock) -> tuple[int, bytes]:
    import struct
    head = b""
    while len(head) < 5:
        chunk = sock.recv(5 - len(head))
        assert chunk, "closed before a frame"
        head += chunk
    n, ty = struct.unpack("<IB", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        assert chunk, "closed inside a frame"
        body += chunk
    return ty, body


def test_the_subscription_port_checks_the_role_of_publishers_and_subscribers(cluster, users):
    import socket
    import struct
    f, _ = users
    tp = cluster.tp(extra=["--users", str(f)])
    login = lambda who: frame(9, str16(who) + str16(f"{who}-pw-1"))
    subscribe = frame(1, struct.pack("<QII", 1, 0, 0))
    write = frame(6, struct.pack("<Q", 7) + b"\x00")
    for first, then, want in [
        (login("reader"), write, b"lacks the write role; publishing needs it"),
        (login("writer"), subscribe, b"lacks the read role; subscribing needs it"),
        (b"", write, b"log in before publishing"),
        (frame(9, str16("writer") + str16("nope")), write, b"wrong user or password"),
    ]:
        with socket.create_connection(("127.0.0.1", tp.tp_port), timeout=10) as s:
            s.sendall(first + then)
            ty, body = read_frame(s)
            assert ty == 4 and want in body, (ty, body)
    # The reader subscribes: SubscribeOk (type 2) comes back.
    with socket.create_connection(("127.0.0.1", tp.tp_port), timeout=10) as s:
        s.sendall(login("reader") + subscribe)
        ty, body = read_frame(s)
        assert ty == 2, (ty, body)


def test_the_agg_logs_in_to_subscribe_and_to_publish(cluster, tmp_path):
    entries = [user_entry(n, r, f"{n}-pw-1")[0] for n, r in
               [("writer", ["write"]), ("ops", ["admin"]), ("aggy", ["read", "write"]), ("peek", ["read"])]]
    f = tmp_path / "users.toml"
    f.write_text("\n".join(entries))
    node = cluster.up(extra=["--users", str(f)])
    ops = ("ops", "ops-pw-1")
    lines = "".join(f"trade,sym=S{i % 3} price={100 + i}.0,size={i + 1}i {T0 + i * 1_000_000}\n" for i in range(30))
    r = requests.post(node.url + "/write", data=lines, auth=("writer", "writer-pw-1"), timeout=10)
    assert r.status_code == 204, r.text
    old = dict(os.environ)
    try:
        # A reader-only agg subscribes but may not publish its bars.
        os.environ["TICKDB_TP_PASSWORD"] = "peek-pw-1"
        peek = cluster.raw(["agg", "--tp", f"127.0.0.1:{node.tp_port}", "--tp-user", "peek", "--publish-ms", "50"],
                           role="agg")
        node.wait_log("lacks the write role; publishing needs it", timeout=20)
        peek.kill9()
        os.environ["TICKDB_TP_PASSWORD"] = "aggy-pw-1"
        cluster.raw(["agg", "--tp", f"127.0.0.1:{node.tp_port}", "--tp-user", "aggy", "--publish-ms", "50"],
                    role="agg")
    finally:
        os.environ.clear()
        os.environ.update(old)
    deadline = time.monotonic() + 30
    got = 0
    while time.monotonic() < deadline:
        got = requests.get(node.url + "/exec", params={"query": "select coalesce(sum(trades), 0) from trade_1m"},
                           auth=ops, timeout=10).json()["dataset"][0][0]
        if got == 30:
            break
        time.sleep(0.1)
    assert got == 30, "the logged-in agg folded every trade into its published bars"


def test_the_feed_logs_in_over_http_and_over_ilp_tcp(cluster, tmp_path):
    feed_entry, feed_auth = ilp_user("tcpfeed", ["write"])
    entries = [feed_entry] + [user_entry(n, r, f"{n}-pw-1")[0] for n, r in [("writer", ["write"]), ("ops", ["admin"])]]
    f = tmp_path / "users.toml"
    f.write_text("\n".join(entries))
    node = cluster.up(extra=["--users", str(f)])
    ops = ("ops", "ops-pw-1")
    token = dict(kv.split("=", 1) for kv in feed_auth.strip(";").split(";"))
    base = ["feed", "--ilp-port", str(node.ilp_port), "--http-port", str(node.http_port), "--rate", "2000",
            "--duration", "1", "--symbols", "20"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKDB_") or k == "TICKDB_BIN"}
    p = subprocess.run([BIN, *base, "--transport", "http"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode != 0 and "401" in p.stderr, p.stderr
    p = subprocess.run([BIN, *base, "--transport", "http", "--user", "writer"], capture_output=True, text=True,
                       timeout=60, env=dict(env, TICKDB_PASSWORD="writer-pw-1"))
    assert p.returncode == 0, p.stderr
    after_http = count(node, ops, "quote")
    assert after_http > 0
    p = subprocess.run([BIN, *base, "--transport", "tcp", "--user", "tcpfeed", "--ilp-token-x", token["token_x"],
                        "--ilp-token-y", token["token_y"]], capture_output=True, text=True, timeout=60,
                       env=dict(env, TICKDB_ILP_TOKEN=token["token"]))
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + 10
    while count(node, ops, "quote") <= after_http and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count(node, ops, "quote") > after_http, "the TCP feed's rows arrived"


def test_the_monitor_logs_in_to_poll_a_node_with_users(cluster, users, tmp_path):
    f, _ = users
    node = cluster.up(extra=["--users", str(f)])
    r = requests.post(node.url + "/write", data=f"trade,sym=M price=1.0,size=1i {T0}\n", auth=basic("writer"),
                      timeout=10)
    assert r.status_code == 204, r.text
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKDB_") or k == "TICKDB_BIN"}
    args = [BIN, "monitor", "--rdb", f"127.0.0.1:{node.http_port}", "--every-ms", "100", "--duration", "1"]
    p = subprocess.run([*args, "--out", str(tmp_path / "anon")], capture_output=True, text=True, timeout=60, env=env)
    anon = p.stderr
    p = subprocess.run([*args, "--out", str(tmp_path / "in"), "--user", "reader"], capture_output=True, text=True,
                       timeout=60, env=dict(env, TICKDB_PASSWORD="reader-pw-1"))
    assert p.returncode == 0, p.stderr
    # The status as a number of its own: log timestamps hold digits too
    # (15:10:11.588401Z once failed this check).
    status_401 = re.compile(r"(?<![0-9.:])401(?![0-9])")
    assert status_401.search(anon) or "unauthorized" in anon, anon
    assert not status_401.search(p.stderr) and "unauthorized" not in p.stderr, p.stderr
