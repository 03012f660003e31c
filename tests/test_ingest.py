"""Writes with the real `questdb` ILP client (PyPI) over TCP and HTTP, reads
back over /exec, checks counts and sums exactly, and sees the same data
again after kill -9 and after a clean stop (journal replay)."""

from __future__ import annotations

from collections import Counter

from questdb import Sender, TimestampNanos

T0 = 1_700_000_000_000_000_000
BATCH = 2_000


def make_rows(rng, n_trades: int, n_quotes: int, n_syms: int = 50):
    """Generated rows with prices on a 1/4 grid, so float sums are exact."""
    syms = [f"S{i:03d}" for i in range(n_syms)]
    trades = [
        (T0 + i * 1000, rng.choice(syms), rng.randrange(1, 400_000) / 4, rng.randrange(1, 10_000))
        for i in range(n_trades)
    ]
    quotes = []
    for i in range(n_quotes):
        bid = rng.randrange(4, 400_000) / 4
        quotes.append((T0 + i * 1000, rng.choice(syms), bid, bid + 0.25, rng.randrange(1, 5000), rng.randrange(1, 5000)))
    return trades, quotes


def send(conf: str, trades, quotes) -> None:
    with Sender.from_conf(conf) as s:
        for i, (t, sym, price, size) in enumerate(trades):
            s.row("trade", symbols={"sym": sym}, columns={"price": price, "size": size}, at=TimestampNanos(t))
            if (i + 1) % BATCH == 0:
                s.flush()
        for i, (t, sym, bid, ask, bs, az) in enumerate(quotes):
            s.row(
                "quote",
                symbols={"sym": sym},
                columns={"bid": bid, "ask": ask, "bsize": bs, "asize": az},
                at=TimestampNanos(t),
            )
            if (i + 1) % BATCH == 0:
                s.flush()
        s.flush()


def check(db, trades, quotes) -> None:
    n, s_size, s_price = db.exec("select count(*), sum(size), sum(price) from trade")[0]
    assert n == len(trades)
    assert s_size == sum(r[3] for r in trades)
    assert s_price == sum(r[2] for r in trades)
    n, s_bid, s_asize = db.exec("select count(*), sum(bid), sum(asize) from quote")[0]
    assert n == len(quotes)
    assert s_bid == sum(r[2] for r in quotes)
    assert s_asize == sum(r[5] for r in quotes)
    got = {sym: c for sym, c in db.exec("select sym, count(*) from trade group by sym")}
    assert got == dict(Counter(r[1] for r in trades))
    # Row by row: the first rows in time order are exactly what was sent.
    first = db.exec("select time, sym, price, size from trade order by time limit 5")
    assert [tuple(r[1:]) for r in first] == [tuple(r[1:]) for r in trades[:5]]


def test_http_write_is_acknowledged_and_survives_kill9(cluster, rng):
    db = cluster.up()
    trades, quotes = make_rows(rng, 20_000, 20_000)
    send(f"http::addr=127.0.0.1:{db.http_port};", trades, quotes)
    # HTTP flush returns after the rows are journaled: no polling needed.
    check(db, trades, quotes)
    db.kill9()
    db2 = cluster.up(data_dir=db.data_dir)
    check(db2, trades, quotes)


def test_tcp_write_arrives_and_survives_clean_restart(cluster, rng):
    db = cluster.up()
    trades, quotes = make_rows(rng, 20_000, 20_000)
    send(f"tcp::addr=127.0.0.1:{db.ilp_port};", trades, quotes)
    db.wait_rows("trade", len(trades))
    db.wait_rows("quote", len(quotes))
    check(db, trades, quotes)
    assert db.terminate() == 0
    db2 = cluster.up(data_dir=db.data_dir)
    check(db2, trades, quotes)


def test_http_and_tcp_clients_at_once(cluster, rng):
    db = cluster.up(extra=["--fsync", "never"])
    t1, q1 = make_rows(rng, 10_000, 0)
    t2, q2 = make_rows(rng, 10_000, 0)
    send(f"tcp::addr=127.0.0.1:{db.ilp_port};", t1, q1)
    send(f"http::addr=127.0.0.1:{db.http_port};", t2, q2)
    db.wait_rows("trade", 20_000)
    assert db.scalar("select sum(size) from trade") == sum(r[3] for r in t1 + t2)


def test_demo_feed_flows(cluster):
    db = cluster.up(extra=["--demo-feed", "20000"])
    db.wait_rows("trade", 100)
    db.wait_rows("quote", 1000)
    st = db.status()
    assert st["tp"]["rows"] > 0 and st["memory"]["dram"] > 0
    # Bid below ask, as a feed must have it.
    assert db.scalar("select count(*) from quote where bid >= ask") == 0


def test_fsmem_tables_are_file_backed_and_accounted(cluster, tmp_path):
    """--fsmem quote puts the quote table's columns in file-backed memory
    under --fsmem-dir (kdb+ 4.0 -m / .m); /status accounts bytes per domain,
    and queries read them like any other table."""
    import os

    import requests

    fsdir = tmp_path / "fsmem"
    fsdir.mkdir()
    db = cluster.up(extra=["--fsmem-dir", str(fsdir), "--fsmem", "quote"])
    before = db.status()["memory"]
    lines = [f"quote,sym=S{i % 50} bid={i}.5,ask={i + 1}.5,bsize=1i,asize=2i {1_700_000_000_000_000_000 + i}" for i in range(20000)]
    lines += [f"trade,sym=S{i % 50} price={i}.0,size=3i {1_700_000_000_000_000_000 + i}" for i in range(20000)]
    r = requests.post(db.url + "/write", data="\n".join(lines) + "\n", timeout=30)
    assert r.status_code == 204, r.text
    db.wait_rows("quote", 20000)
    db.wait_rows("trade", 20000)
    mem = db.status()["memory"]
    assert mem["fsmem"] > before["fsmem"] and mem["fsmem_files"] > 0, (before, mem)
    assert mem["dram"] > 0, mem  # trade stays in DRAM
    assert any(os.scandir(fsdir)), "no files under --fsmem-dir"
    assert db.scalar("select sum(bsize) from quote") == 20000
    # A column placed in fsmem without a directory is refused with a clear error.
    from harness import free_port, run

    r = run(["up", "--fsmem", "quote.bsize", "--data-dir", str(tmp_path / "d2"), "--http-port", str(free_port()),
             "--ilp-port", str(free_port()), "--tp-port", str(free_port()), "--repl-port", str(free_port()), "--pg-port", str(free_port())])
    assert r.returncode != 0 and "fsmem" in r.stderr, r.stderr
