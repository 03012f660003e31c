"""tp and rdb as separate processes: an rdb replays the journal up to the tp's
current sequence, then follows live, with no gap and no duplicate; also
when it starts, or is killed and restarted, while the tp is under load."""

from __future__ import annotations

import threading
import time
from collections import Counter

import requests

SYMS = [f"L{i:02d}" for i in range(20)]


class Loader:
    """Posts numbered trade rows over HTTP until stopped; counts what the
    tp acknowledged (outside the database)."""

    def __init__(self, tp, rng, rows_per_request: int = 200):
        self.tp = tp
        self.rng = rng
        self.rows = rows_per_request
        self.acked = Counter()
        self.size_sum = 0
        self.next_id = 0
        self.stop = threading.Event()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write_once(self, session=requests) -> None:
        """One request of numbered rows; counted once acknowledged."""
        lines, batch = [], Counter()
        size_sum = 0
        for _ in range(self.rows):
            sym = self.rng.choice(SYMS)
            self.next_id += 1
            lines.append(f"trade,sym={sym} price=1.5,size={self.next_id}i {1_700_000_000_000_000_000 + self.next_id}")
            batch[sym] += 1
            size_sum += self.next_id
        r = session.post(self.tp.url + "/write", data="\n".join(lines) + "\n", timeout=30)
        assert r.status_code == 204, r.text
        self.acked.update(batch)
        self.size_sum += size_sum

    def _run(self) -> None:
        s = requests.Session()
        try:
            while not self.stop.is_set():
                self.write_once(s)
        except Exception as e:  # surfaced by finish()
            self.error = e

    def start(self) -> "Loader":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        if self.error:
            raise self.error


def wait_converged(rdb, loader, timeout: float = 60) -> None:
    """Waits for the rdb to reach the tp's sequence, then compares exactly."""
    want = sum(loader.acked.values())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = rdb.status()
        if st["seq"] >= st.get("tp_seq", 0) and rdb.scalar("select count(*) from trade") >= want:
            break
        time.sleep(0.05)
    n, s = rdb.exec("select count(*), sum(size) from trade")[0]
    assert n == want, f"rdb has {n} rows, the tp acknowledged {want}"
    assert s == loader.size_sum, "rdb rows differ from the acknowledged rows (missing or doubled)"
    got = {sym: c for sym, c in rdb.exec("select sym, count(*) from trade group by sym")}
    assert got == dict(loader.acked)
    # No row twice: sizes are unique ids.
    assert rdb.scalar("select count(distinct size) from trade") == want


def test_rdb_replays_then_follows(cluster, rng):
    tp = cluster.tp()
    loader = Loader(tp, rng)
    loader.write_once()
    rdb = cluster.rdb(tp.tp_port)
    assert rdb.scalar("select count(*) from trade") == sum(loader.acked.values())
    loader.start()
    time.sleep(0.5)
    loader.finish()
    wait_converged(rdb, loader)


def test_rdb_started_under_load_converges_exactly(cluster, rng):
    tp = cluster.tp(extra=["--fsync", "never"])
    loader = Loader(tp, rng).start()
    time.sleep(0.7)
    rdb = cluster.rdb(tp.tp_port)
    time.sleep(0.7)
    loader.finish()
    wait_converged(rdb, loader)


def test_rdb_killed_and_restarted_under_load_converges_exactly(cluster, rng):
    tp = cluster.tp(extra=["--fsync", "never"])
    loader = Loader(tp, rng).start()
    rdb = cluster.rdb(tp.tp_port)
    for _ in range(3):
        time.sleep(rng.uniform(0.1, 0.5))
        rdb.kill9()
        rdb = cluster.rdb(tp.tp_port)
    time.sleep(0.3)
    loader.finish()
    wait_converged(rdb, loader)


def test_rdb_follows_the_tp_across_a_tp_crash(cluster, rng):
    tp = cluster.tp()
    loader = Loader(tp, rng)
    loader.write_once()
    rdb = cluster.rdb(tp.tp_port)
    tp.kill9()
    # Same ports, same journal: the rdb reconnects and resumes after the
    # last sequence it applied.
    tp2 = cluster.tp(data_dir=tp.data_dir, http=tp.http_port, ilp=tp.ilp_port, tp=tp.tp_port)
    loader.tp = tp2
    loader.start()
    time.sleep(0.5)
    loader.finish()
    wait_converged(rdb, loader)


def test_symbol_and_table_subscription(cluster, rng):
    tp = cluster.tp()
    rdb = cluster.rdb(tp.tp_port, extra=["--symbol", "L00", "--symbol", "L01", "--table", "trade"])
    loader = Loader(tp, rng)
    loader.write_once()
    q = "quote,sym=L00 bid=1.0,ask=1.25,bsize=1i,asize=1i 1\n"
    assert requests.post(tp.url + "/write", data=q, timeout=10).status_code == 204
    want = loader.acked["L00"] + loader.acked["L01"]
    rdb.wait_rows("trade", want)
    time.sleep(0.2)
    assert rdb.scalar("select count(*) from trade") == want
    assert rdb.scalar("select count(*) from quote") == 0


def test_journal_tools_on_a_real_journal(cluster, rng):
    from harness import run

    db = cluster.up()
    loader = Loader(db, rng)
    loader.write_once()
    db.terminate()
    r = run(["journal", "verify", str(db.data_dir / "journal")])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "problems: none" in r.stdout and f"rows:     {sum(loader.acked.values())}" in r.stdout, r.stdout
    r = run(["journal", "dump", str(db.data_dir / "journal")])
    assert r.returncode == 0 and "trade" in r.stdout, r.stdout + r.stderr


def test_slow_subscriber_is_cut_off_and_catches_up(cluster, rng):
    """A subscriber that stops reading (SIGSTOP) fills its bounded queue and
    is cut off with a logged reason; the tp keeps acknowledging and the
    other rdb keeps up. Resumed, the cut-off rdb re-subscribes from its last
    sequence and converges through the journal."""
    import os
    import signal

    tp = cluster.tp(extra=["--sub-queue-bytes-max", "65536"])
    fast = cluster.rdb(tp.tp_port)
    slow = cluster.rdb(tp.tp_port)
    loader = Loader(tp, rng, rows_per_request=2000)
    os.kill(slow.proc.pid, signal.SIGSTOP)
    try:
        # Write until the tp gives up on the stopped subscriber: how much the
        # kernel's socket buffers absorb first differs between machines.
        for i in range(2000):
            loader.write_once()
            if i >= 50 and i % 10 == 0 and "too slow" in tp.log.read_text(errors="replace"):
                break
        want = sum(loader.acked.values())
        fast.wait_rows("trade", want)
        deadline = time.monotonic() + 30
        while "too slow" not in tp.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the stopped subscriber was never cut off:\n" + tp.log_tail()
            time.sleep(0.1)
    finally:
        os.kill(slow.proc.pid, signal.SIGCONT)
    slow.wait_rows("trade", want, timeout=60)
    assert slow.scalar("select count(*) from trade") == want == fast.scalar("select count(*) from trade")
    assert slow.scalar("select sum(size) from trade") == loader.size_sum
