"""TLS (rustls) on the HTTP and PostgreSQL wire ports, with real clients:
requests and the `questdb` client over https, psql and psycopg with
sslmode=require and verify-full. A plaintext client on a TLS port is told
so in words it can read. Certificates come from openssl: a test CA and a
server certificate for 127.0.0.1."""

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

from harness import free_port

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


@pytest.fixture
def tls_node(cluster, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    node = cluster.up(extra=["--tls-cert", str(cert), "--tls-key", str(key)], start=False)
    node.start(wait_ready=False)
    url = f"https://127.0.0.1:{node.http_port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(url + "/health", verify=str(ca), timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert node.proc.poll() is None, node.log_tail()
        assert time.monotonic() < deadline, node.log_tail()
        time.sleep(0.05)
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
    p = subprocess.run([os.environ.get("TICKDB_BIN", ""), "up", "--http-port", str(free_port()),
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
