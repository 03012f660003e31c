"""TLS (rustls) on every port but kdb+ IPC, with real clients: requests and
the `questdb` client over https and tcps, psql and psycopg with
sslmode=require and verify-full, `tickdb rdb` on the subscription port
(--tp-tls-ca) and a standby on the replication port (--primary-tls-ca). A
plaintext client on a TLS port is told so in words it can read, and so is a
TLS client on a plaintext port. Certificates come from openssl: a test CA
and a server certificate for 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
import requests
from questdb import Sender, TimestampNanos

from harness import BIN, free_port, run

T0 = 1_700_000_000_000_000_000

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make test certificates")


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, cert.pem, key.pem): a CA and a server certificate it signed
    for IP 127.0.0.1."""
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d, timeout=60)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ossl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=tickdb test CA")
    ossl("req", *ec, "-keyout", "key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "cert.pem", "-days", "1", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


def make_other_ca(d: Path) -> Path:
    """A CA that signed nothing this test serves: trusting only it must
    refuse the node's certificate."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", "other-ca.key", "-out", "other-ca.pem", "-days", "2",
                    "-subj", "/CN=another CA"], check=True, capture_output=True, cwd=d, timeout=60)
    return d / "other-ca.pem"


def start_tls(node, ca: Path) -> str:
    """Starts a node with --tls-cert and waits until it answers over https;
    returns its https URL."""
    node.start(wait_ready=False)
    url = f"https://127.0.0.1:{node.http_port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(url + "/health", verify=str(ca), timeout=2).status_code == 200:
                return url
        except requests.RequestException:
            pass
        assert node.proc.poll() is None, node.log_tail()
        assert time.monotonic() < deadline, node.log_tail()
        time.sleep(0.05)


@pytest.fixture
def tls_node(cluster, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    node = cluster.up(extra=["--tls-cert", str(cert), "--tls-key", str(key)], start=False)
    url = start_tls(node, ca)
    return node, url, ca


def test_https_with_requests_and_the_questdb_client(tls_node):
    node, url, ca = tls_node
    with Sender.from_conf(f"https::addr=127.0.0.1:{node.http_port};tls_roots={ca};") as s:
        s.row("trade", symbols={"sym": "TLS"}, columns={"price": 5.0, "size": 7}, at=TimestampNanos(T0))
    deadline = time.monotonic() + 10
    while True:
        r = requests.get(url + "/exec", params={"query": "select sum(size) from trade"}, verify=str(ca), timeout=10)
        assert r.status_code == 200, r.text
        if r.json()["dataset"][0][0] == 7 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert r.json()["dataset"][0][0] == 7
    # A plaintext client is told to use https.
    r = requests.get(f"http://127.0.0.1:{node.http_port}/exec", params={"query": "select 1"}, timeout=10)
    assert r.status_code == 400 and r.json()["code"] == "tls_required", r.text
    # A client that does not trust the certificate refuses it.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url + "/health", timeout=10)


def test_postgresql_wire_with_psql_and_psycopg(tls_node):
    node, _, ca = tls_node
    env = dict(os.environ, PGPASSWORD="tickdb")
    base = f"host=127.0.0.1 port={node.pg_port} user=tickdb dbname=tickdb"
    if shutil.which("psql"):
        p = subprocess.run(["psql", f"{base} sslmode=require", "-Atc", "select 40 + 2"], capture_output=True,
                           text=True, timeout=30, env=env)
        assert p.returncode == 0 and p.stdout.strip() == "42", p.stderr
        p = subprocess.run(["psql", f"{base} sslmode=disable", "-Atc", "select 1"], capture_output=True,
                           text=True, timeout=30, env=env)
        assert p.returncode != 0 and "sslmode=require" in p.stderr, p.stderr
    with psycopg.connect(f"{base} password=tickdb sslmode=verify-full sslrootcert={ca}") as conn:
        assert conn.execute("select 6 * 7").fetchone()[0] == 42
        assert conn.pgconn.ssl_in_use
    with pytest.raises(psycopg.OperationalError, match="sslmode=require"):
        psycopg.connect(f"{base} password=tickdb sslmode=disable")


def test_bad_certificate_files_stop_the_start_naming_the_file(cluster, tmp_path):
    bad = tmp_path / "nothing.pem"
    bad.write_text("not a certificate\n")
    p = subprocess.run([BIN, "up", "--http-port", str(free_port()),
                        "--tls-cert", str(bad), "--tls-key", str(bad), "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "--tls-cert" in p.stderr and str(bad) in p.stderr, p.stderr


def test_ilp_tcp_over_tls_with_the_questdb_client(tls_node):
    node, url, ca = tls_node
    with Sender.from_conf(f"tcps::addr=127.0.0.1:{node.ilp_port};tls_roots={ca};") as s:
        for i in range(100):
            s.row("trade", symbols={"sym": "TCPS"}, columns={"price": 1.0, "size": 1}, at=TimestampNanos(T0 + i))
    deadline = time.monotonic() + 10
    n = 0
    while time.monotonic() < deadline:
        r = requests.get(url + "/exec", params={"query": "select count(*) from trade where sym = 'TCPS'"},
                         verify=str(ca), timeout=10)
        n = r.json()["dataset"][0][0]
        if n == 100:
            break
        time.sleep(0.05)
    assert n == 100
    # A plaintext ILP client is told, in one line, to use TLS; nothing it
    # sent is written.
    import socket
    with socket.create_connection(("127.0.0.1", node.ilp_port), timeout=10) as s:
        s.sendall(f"trade,sym=PLAIN price=1.0,size=1i {T0}\n".encode())
        said = s.recv(200)
    assert b"speaks TLS only" in said and b"tcps" in said, said
    node.wait_log("a plaintext client on the TLS port")


def https_scalar(url: str, ca: Path, sql: str):
    r = requests.get(url + "/exec", params={"query": sql}, verify=str(ca), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["dataset"][0][0]


def write_tcps(node, ca: Path, sym: str, n: int, first: int = 0) -> None:
    """n trades for `sym` over ILP TCP with TLS, `size` = first..first+n."""
    with Sender.from_conf(f"tcps::addr=127.0.0.1:{node.ilp_port};tls_roots={ca};") as s:
        for i in range(first, first + n):
            s.row("trade", symbols={"sym": sym}, columns={"price": 2.5, "size": i}, at=TimestampNanos(T0 + i))


def test_rdb_follows_a_tls_tp_and_a_plaintext_one_is_told_to_use_tls(tls_node, cluster, tmp_path):
    node, url, ca = tls_node
    write_tcps(node, ca, "SUB", 50)
    rdb = cluster.rdb(node.tp_port, extra=["--tp-tls-ca", str(ca)])
    assert rdb.wait_rows("trade", 50) == 50
    # Live updates over the TLS subscription, answered over SQL (PostgreSQL
    # wire on the rdb, which has no certificate of its own).
    write_tcps(node, ca, "SUB", 50, first=50)
    assert rdb.wait_rows("trade", 100) == 100
    with psycopg.connect(f"host=127.0.0.1 port={rdb.pg_port} user=tickdb password=tickdb dbname=tickdb") as conn:
        got = conn.execute("select count(*), sum(size) from trade where sym = 'SUB'").fetchone()
    assert tuple(got) == (100, sum(range(100)))

    # A plaintext rdb is told, in the subscription protocol's Error frame,
    # that the port speaks TLS only and which flag to give.
    plain = cluster.rdb(node.tp_port, start=False)
    plain.start(wait_ready=False)
    said = plain.wait_log("speaks TLS only", timeout=20)
    assert "--tp-tls-ca" in said, said
    node.wait_log("a plaintext client on the TLS port")
    # The tp keeps serving its TLS subscriber.
    write_tcps(node, ca, "SUB", 10, first=100)
    assert rdb.wait_rows("trade", 110) == 110
    assert node.proc.poll() is None

    # An rdb trusting another CA refuses the tp's certificate, and says so.
    other = cluster.rdb(node.tp_port, extra=["--tp-tls-ca", str(make_other_ca(tmp_path))], start=False)
    other.start(wait_ready=False)
    other.wait_log("certificate must be signed by a CA in --tp-tls-ca", timeout=20)
    node.wait_log("TLS handshake failed")
    assert plain.proc.poll() is None and other.proc.poll() is None
    for p in (plain, other):
        r = requests.get(p.url + "/exec", params={"query": "select count(*) from trade"}, timeout=10)
        assert r.status_code == 503, r.text


def test_a_tls_rdb_on_a_plaintext_tp_is_told_it_does_not_speak_tls(cluster, tmp_path):
    ca, _, _ = make_certs(tmp_path)
    node = cluster.up()
    rdb = cluster.rdb(node.tp_port, extra=["--tp-tls-ca", str(ca)], start=False)
    rdb.start(wait_ready=False)
    said = rdb.wait_log("does not speak TLS on this port", timeout=20)
    assert "--tls-cert" in said, said
    assert node.proc.poll() is None


def test_a_standby_follows_a_tls_primary(tls_node, cluster, tmp_path):
    node, url, ca = tls_node
    follow = ["--standby-of", f"127.0.0.1:{node.repl_port}"]
    if not os.environ.get("TICKDB_REPL_SECRET"):
        # The secret the primary generated at its first start.
        follow += ["--repl-secret-file", str(node.data_dir / "repl-secret")]
    # A fresh standby without TLS is refused with the reason, and stops.
    plain = cluster.up(data_dir=tmp_path / "plain", extra=follow, start=False)
    plain.start(wait_ready=False)
    assert plain.wait_exit(timeout=60) != 0
    said = plain.log_tail(80)
    assert "speaks TLS only" in said and "--primary-tls-ca" in said, said
    node.wait_log("a plaintext standby on the TLS port")

    # A standby trusting another CA refuses the primary's certificate and
    # keeps trying, saying why.
    wrong = cluster.up(data_dir=tmp_path / "wrong", start=False,
                       extra=[*follow, "--primary-tls-ca", str(make_other_ca(tmp_path))])
    wrong.start(wait_ready=False)
    wrong.wait_log("certificate must be signed by a CA in --primary-tls-ca", timeout=30)
    assert wrong.proc.poll() is None
    wrong.kill9()

    write_tcps(node, ca, "REPL", 200)
    standby = cluster.up(data_dir=tmp_path / "standby", start=False, extra=[*follow, "--primary-tls-ca", str(ca)])
    standby.start()
    assert standby.wait_rows("trade", 200) == 200
    # Live records over the TLS link too.
    write_tcps(node, ca, "REPL", 300, first=200)
    assert standby.wait_rows("trade", 500) == 500
    deadline = time.monotonic() + 30
    while https_scalar(url, ca, "select count(*) from trade") < 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    sql = "select sym, price, size, time from trade order by size"
    r = requests.get(url + "/exec", params={"query": sql}, verify=str(ca), timeout=30)
    assert r.status_code == 200, r.text
    assert standby.exec(sql) == r.json()["dataset"]
    primary_seq = requests.get(url + "/status", verify=str(ca), timeout=10).json()["tp"]["seq"]
    deadline = time.monotonic() + 30
    while standby.status()["tp"]["seq"] != primary_seq and time.monotonic() < deadline:
        time.sleep(0.05)
    assert standby.status()["tp"]["seq"] == primary_seq
    # The primary sees one standby, streaming (the refused ones never got
    # past their handshake).
    deadline = time.monotonic() + 10
    while True:
        link = requests.get(url + "/status", verify=str(ca), timeout=10).json()["replication"]["standbys"]
        if [s["state"] for s in link] == ["streaming"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [s["state"] for s in link] == ["streaming"], link


def https_status(url: str, ca: Path) -> dict:
    return requests.get(url + "/status", verify=str(ca), timeout=10).json()


def test_a_switchover_between_tls_nodes(cluster, tmp_path, monkeypatch):
    """`tickdb switchover --tls-ca` reaches a primary whose HTTP speaks only
    TLS, and the primary's own call to its standby's HTTP API (the
    promotion) speaks TLS with its --primary-tls-ca; without --tls-ca the
    command is told the port wants TLS, and nothing changes."""
    monkeypatch.setenv("TICKDB_REPL_SECRET", "switchover-tls-test-secret-0123456789")
    ca, cert, key = make_certs(tmp_path)
    tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--primary-tls-ca", str(ca)]
    p = cluster.up(data_dir=tmp_path / "p", extra=tls, start=False)
    p_url = start_tls(p, ca)
    s = cluster.up(data_dir=tmp_path / "s", start=False,
                   extra=[*tls, "--standby-of", f"127.0.0.1:{p.repl_port}"])
    s_url = start_tls(s, ca)
    write_tcps(p, ca, "SW", 100)
    deadline = time.monotonic() + 30
    while https_scalar(p_url, ca, "select count(*) from trade") < 100:
        assert time.monotonic() < deadline, p.log_tail()
        time.sleep(0.05)
    while True:
        link = https_status(p_url, ca)["replication"]["standbys"]
        if [x["state"] for x in link] == ["streaming"]:
            break
        assert time.monotonic() < deadline, (link, p.log_tail(), s.log_tail())
        time.sleep(0.05)

    node = f"127.0.0.1:{p.http_port}"
    plain = run(["switchover", "--node", node])
    assert plain.returncode != 0
    assert "TLS" in plain.stderr or "tls" in plain.stderr, plain.stderr
    assert https_status(p_url, ca)["replication"]["role"] == "primary"

    r = run(["switchover", "--node", node, "--tls-ca", str(ca)])
    assert r.returncode == 0, r.stderr + p.log_tail() + s.log_tail()
    deadline = time.monotonic() + 30
    while https_status(s_url, ca)["replication"]["role"] != "primary":
        assert time.monotonic() < deadline, s.log_tail()
        time.sleep(0.05)
    # The new primary has every row, and takes writes over TLS.
    assert https_scalar(s_url, ca, "select count(*) from trade") == 100
    write_tcps(s, ca, "SW", 10, first=100)
    deadline = time.monotonic() + 30
    while https_scalar(s_url, ca, "select count(*) from trade") < 110:
        assert time.monotonic() < deadline, s.log_tail()
        time.sleep(0.05)
