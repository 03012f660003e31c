"""kdb+ IPC with javakdb (Maven Central; big-endian messages) and node-q
(npm; `.u.sub` and its `upd` events), each installed by the test itself
(tests/kdb_clients.py). What javakdb writes must read back over SQL; what
it queries must equal PostgreSQL wire's answer; node-q must receive exactly
the rows of the symbols it asked for."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

import kdb_clients
from harness import free_port

HERE = Path(__file__).parent


def ipc_node(cluster):
    port = free_port()
    node = cluster.up(extra=["--ipc-port", str(port)])
    node.ipc_port = port
    return node


def sql(node, q):
    with psycopg.connect(host="127.0.0.1", port=node.pg_port, user="tickdb", password="tickdb",
                         autocommit=True) as c:
        return c.execute(q).fetchall()


@pytest.fixture(scope="module")
def java_cp():
    cp, why = kdb_clients.javakdb()
    if cp is None:
        pytest.skip(f"javakdb unavailable: {why}")
    return cp


def java(cp, *args, timeout=120):
    r = subprocess.run(["java", "-cp", cp, "KdbJava", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_javakdb_writes_big_endian_and_queries(cluster, java_cp):
    node = ipc_node(cluster)
    seed = 20261124
    print(f"seed {seed}")
    out = java(java_cp, "upd", node.ipc_port, 1000, seed)
    assert out == ["chaser null"], out
    got = sql(node, "SELECT count(*), count(DISTINCT sym), min(CAST(time AS BIGINT)) FROM trade")[0]
    assert got == (1000, 7, 1_704_187_800_000_000_000), got
    # A query over IPC equals the same over PostgreSQL wire.
    out = java(java_cp, "query", node.ipc_port, "s)SELECT sym, sum(size) AS s FROM trade GROUP BY sym ORDER BY sym")
    want = sql(node, "SELECT sym, sum(size) AS s FROM trade GROUP BY sym ORDER BY sym")
    syms = out[out.index("col sym") + 1:out.index("col s")]
    sums = out[out.index("col s") + 1:]
    assert list(zip(syms, map(int, sums))) == [(s, int(v)) for s, v in want]
    out = java(java_cp, "query", node.ipc_port, "select max price by sym from trade")
    assert out[0] == "keyed", out
    out = java(java_cp, "query", node.ipc_port, "no such thing")
    assert out[0].startswith("error "), out


def test_javakdb_compressed_messages_both_ways(cluster, java_cp, tmp_path):
    node = ipc_node(cluster)
    # javakdb compresses: tickdb must decompress.
    out = java(java_cp, "zipped", node.ipc_port, 5000)
    assert out[0].startswith("compressed ") and out[1] == "answer type 101", out
    assert sql(node, "SELECT count(*) FROM trade")[0][0] == 5000
    # tickdb compresses: javakdb must decompress.
    exe = HERE.parent / "target" / "debug" / "examples" / "qmsg"
    if not exe.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "tickdb-ipc", "--example", "qmsg"],
                       cwd=HERE.parent, check=True, timeout=600)
    data = subprocess.run([str(exe), "5000"], capture_output=True, check=True).stdout
    n = int.from_bytes(data[:4], "little")
    zipped = data[4 + n:]
    assert zipped[2] == 1
    f = tmp_path / "zipped.bin"
    f.write_bytes(zipped)
    out = java(java_cp, "inflate", f)
    assert out[0] == "col time" and len(out) == 4 * (5000 + 1), out[:3]


def test_node_q_subscribes_and_gets_only_its_symbols(cluster):
    mods, why = kdb_clients.node_q()
    if mods is None:
        pytest.skip(f"node-q unavailable: {why}")
    node = ipc_node(cluster)
    env = dict(os.environ, NODE_PATH=mods)
    sub = subprocess.Popen(["node", str(HERE / "ipc_clients" / "node_sub.js"), str(node.ipc_port),
                            "trade", "AAPL,IBM", "60", "60"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        first = json.loads(sub.stdout.readline())
        assert first.get("subscribed") == "trade", first
        assert first["columns"] == ["time", "sym", "price", "size"], first
        # Writes over ILP reach the IPC subscriber.
        lines = []
        for i in range(30):
            for s in ("AAPL", "MSFT", "IBM"):
                lines.append(f"trade,sym={s} price={100 + i}.5,size={i}i {1_700_000_000_000_000_000 + i}")
        import requests
        r = requests.post(node.url + "/write", data="\n".join(lines) + "\n", timeout=10)
        assert r.status_code == 204, r.text
        out, _ = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    assert sub.returncode == 0, rows[-3:]
    assert len(rows) == 60, rows[-3:]
    assert {r["sym"] for r in rows} == {"AAPL", "IBM"}
    assert [r["size"] for r in rows if r["sym"] == "AAPL"] == list(range(30))
