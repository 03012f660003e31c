"""Hot Restart through the real binary: an rdb restarted from its store plus
the journal tail holds exactly the rows of one rebuilt from the whole journal;
checkpoints on command, on a schedule and at shutdown; the journal trimmed
behind a checkpoint; a store written for another schema refuses to start.
(The model-based crash tests are crates/rdb/tests/hot_restart.rs and
crates/hotrestart/tests.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import requests

from harness import run

SCHEMA = """
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "price", type = "f64" },
  { name = "size", type = "i64" },
]

[[table]]
name = "quote"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "bid", type = "f64" },
  { name = "ask", type = "f64" },
]

[[table]]
name = "last"
kind = "keyed"
key = ["sym"]
column = [
  { name = "sym", type = "symbol" },
  { name = "time", type = "timestamp" },
  { name = "price", type = "f64" },
]
"""

ORDER = {
    "trade": "select * from trade order by time, sym, price, size",
    "quote": "select * from quote order by time, sym, bid, ask",
    "last": "select * from last order by sym",
}


def schema_file(tmp: Path, text: str = SCHEMA) -> Path:
    p = tmp / "schema.toml"
    p.write_text(text)
    return p


class Feed:
    """Random ILP requests over HTTP with increasing timestamps."""

    def __init__(self, rng):
        self.rng = rng
        self.t = 1_700_000_000_000_000_000

    def post(self, db, requests_n: int) -> None:
        for _ in range(requests_n):
            lines = []
            for _ in range(self.rng.randint(1, 60)):
                self.t += self.rng.randint(1, 1000)
                sym = f"S{self.rng.randint(0, 12)}"
                kind = self.rng.random()
                if kind < 0.4:
                    lines.append(f"trade,sym={sym} price={self.rng.uniform(1, 99):.4f},size={self.rng.randint(1, 900)}i {self.t}")
                elif kind < 0.9:
                    bid = self.rng.uniform(1, 99)
                    lines.append(f"quote,sym={sym} bid={bid:.4f},ask={bid + 0.01:.4f} {self.t}")
                else:
                    lines.append(f"last,sym={sym} price={self.rng.uniform(1, 99):.4f} {self.t}")
            r = requests.post(db.url + "/write", data="\n".join(lines) + "\n", timeout=30)
            assert r.status_code == 204, r.text


def wait_applied(db, seq: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.status()["seq"] >= seq:
            return
        time.sleep(0.05)
    raise AssertionError(f"rdb at {db.status()['seq']}, want {seq}\n{db.log_tail()}")


def checkpoint(db) -> dict:
    r = requests.post(db.url + "/checkpoint", timeout=60)
    assert r.status_code == 200, r.text
    c = r.json()
    assert c["seq"] > 0 and c["pause_us"] >= 0 and c["duration_ms"] >= 0, c
    # What operators read in /status: the store's disk and GC figures.
    st = db.status()["hot_restart"]
    assert st["durable_seq"] >= c["seq"], st
    store = st["store"]
    assert store["disk_bytes"] > 0 and store["chunks"] > 0 and store["user_bytes_written"] > 0, store
    assert store["write_amplification"] >= 1.0 and store["garbage_bytes"] >= 0, store
    assert {"gc_bytes_written", "gc_runs", "gc_chunks_reclaimed"} <= store.keys(), store
    return c


def same_tables(a, b) -> None:
    for table, sql in ORDER.items():
        ra, rb = a.exec(sql), b.exec(sql)
        assert len(ra) == len(rb), f"{table}: {len(ra)} rows vs {len(rb)}"
        assert ra == rb, f"{table} differs"


def test_restart_from_store_and_tail_equals_full_replay(cluster, rng, tmp_path):
    schema = schema_file(tmp_path)
    hot = tmp_path / "hot"
    extra = ["--schema", str(schema), "--hot-restart", str(hot), "--checkpoint-interval-s", "3600"]
    db = cluster.up(extra=extra)
    feed = Feed(rng)
    feed.post(db, 40)
    r = requests.post(db.url + "/clear", params={"tables": "quote"}, timeout=10)
    assert r.status_code == 200 and r.json()["tables"] == ["quote"], r.text
    feed.post(db, 30)
    first = checkpoint(db)
    feed.post(db, 40)
    second = checkpoint(db)
    assert second["seq"] > first["seq"]
    assert second["rows_written"] > 0 and second["bytes_written"] > 0
    # A tail the store does not hold, then a crash: no final checkpoint.
    feed.post(db, 25)
    tp_seq = db.status()["tp"]["seq"]
    wait_applied(db, tp_seq)
    db.kill9()

    db2 = cluster.up(data_dir=db.data_dir, extra=extra)
    st = db2.status()["hot_restart"]
    assert st["restore"]["seq"] == second["seq"], st
    assert sum(st["restore"]["rows"].values()) > 0, st
    assert st["reload_bytes"] > 0 and st["durable_seq"] == second["seq"], st
    log = db2.log.read_text()
    assert f"replaying journal records {second['seq'] + 1}..={tp_seq}" in log, log[-3000:]
    wait_applied(db2, tp_seq)

    # An rdb without a store rebuilds from the whole journal: same rows, same order.
    full = cluster.rdb(db2.tp_port)
    wait_applied(full, tp_seq)
    same_tables(db2, full)
    assert db2.scalar("select count(*) from last") <= 13

    # Going on from the restored state stays exact.
    feed.post(db2, 10)
    seq = db2.status()["tp"]["seq"]
    wait_applied(db2, seq)
    wait_applied(full, seq)
    same_tables(db2, full)


def test_remote_rdb_restarts_from_its_store(cluster, rng, tmp_path):
    tp = cluster.tp(extra=["--schema", str(schema_file(tmp_path))])
    hot = tmp_path / "rdb-hot"
    rdb = cluster.rdb(tp.tp_port, extra=["--hot-restart", str(hot)])
    feed = Feed(rng)
    feed.post(tp, 30)
    wait_applied(rdb, tp.status()["tp"]["seq"])
    c = checkpoint(rdb)
    feed.post(tp, 20)
    rdb.kill9()
    feed.post(tp, 10)
    rdb2 = cluster.rdb(tp.tp_port, extra=["--hot-restart", str(hot)])
    seq = tp.status()["tp"]["seq"]
    wait_applied(rdb2, seq)
    assert rdb2.status()["hot_restart"]["restore"]["seq"] == c["seq"]
    full = cluster.rdb(tp.tp_port)
    wait_applied(full, seq)
    same_tables(rdb2, full)
    # A different subscription on the same store is refused, saying why.
    bad = cluster.rdb(tp.tp_port, extra=["--hot-restart", str(hot), "--table", "trade"], start=False)
    rdb2.terminate()
    bad.start(wait_ready=False)
    assert bad.wait_exit(timeout=60) != 0
    assert "subscribes to tables" in bad.log.read_text()


def test_scheduled_and_final_checkpoints(cluster, rng, tmp_path):
    hot = tmp_path / "hot"
    schema = ["--schema", str(schema_file(tmp_path))]
    db = cluster.up(extra=[*schema, "--hot-restart", str(hot), "--checkpoint-interval-s", "1"])
    Feed(rng).post(db, 20)
    deadline = time.monotonic() + 30
    while db.status()["hot_restart"]["checkpoints"] < 1:
        assert time.monotonic() < deadline, db.log_tail()
        time.sleep(0.1)
    Feed(rng).post(db, 5)
    seq = db.status()["tp"]["seq"]
    wait_applied(db, seq)
    assert db.terminate() == 0
    assert "final checkpoint: durable up to seq" in db.log.read_text()
    db2 = cluster.up(data_dir=db.data_dir, extra=[*schema, "--hot-restart", str(hot)])
    st = db2.status()
    assert st["hot_restart"]["restore"]["seq"] == seq, st["hot_restart"]
    assert "replaying journal records" not in db2.log.read_text()
    metrics = requests.get(db2.url + "/metrics", timeout=10).text
    assert f"tickdb_hotrestart_durable_seq {seq}" in metrics, metrics


def test_journal_trimmed_only_behind_a_checkpoint(cluster, rng, tmp_path):
    schema = ["--schema", str(schema_file(tmp_path))]
    plain = cluster.up(data_dir=tmp_path / "plain", extra=schema)
    r = requests.post(plain.url + "/journal/trim", timeout=10)
    assert r.status_code == 409 and "checkpoint" in r.json()["message"], r.text
    r = requests.post(plain.url + "/checkpoint", timeout=10)
    assert r.status_code == 409 and "--hot-restart" in r.json()["message"], r.text

    hot = tmp_path / "hot"
    extra = [*schema, "--hot-restart", str(hot), "--segment-bytes-max", "4096"]
    db = cluster.up(extra=extra)
    feed = Feed(rng)
    feed.post(db, 60)
    c = checkpoint(db)
    feed.post(db, 5)
    r = requests.post(db.url + "/journal/trim", timeout=30)
    assert r.status_code == 200, r.text
    t = r.json()
    assert t["segments_removed"] > 0 and 1 < t["first_seq_kept"] <= c["seq"] + 1, t
    v = run(["journal", "verify", str(db.data_dir / "journal")])
    assert v.returncode == 0, v.stdout + v.stderr
    seq = db.status()["tp"]["seq"]
    db.kill9()
    db2 = cluster.up(data_dir=db.data_dir, extra=extra)
    wait_applied(db2, seq)
    assert db2.status()["hot_restart"]["restore"]["seq"] == c["seq"]
    # A subscriber that needs trimmed records is told what the journal holds.
    late = cluster.rdb(db2.tp_port, start=False)
    late.start(wait_ready=False)
    deadline = time.monotonic() + 20
    while "the journal no longer holds seq 1" not in late.log.read_text():
        assert time.monotonic() < deadline, late.log_tail()
        time.sleep(0.1)


def test_store_for_another_schema_refuses_start(cluster, rng, tmp_path):
    hot = tmp_path / "hot"
    db = cluster.up(extra=["--hot-restart", str(hot), "--schema", str(schema_file(tmp_path))])
    Feed(rng).post(db, 5)
    checkpoint(db)
    assert db.terminate() == 0
    other = tmp_path / "other"
    other.mkdir()
    p = cluster.up(
        data_dir=tmp_path / "data2",
        extra=["--hot-restart", str(hot), "--schema", str(schema_file(other, SCHEMA.replace('"bid"', '"bid_px"')))],
        start=False,
    )
    p.start(wait_ready=False)
    assert p.wait_exit(timeout=60) != 0
    out = p.log.read_text()
    assert "schema differs" in out and "bid_px" in out, out[-2000:]


# ---- the Hot Restart benchmarks, in short runs ------------------------------
# They check what they measure (both systems against a model of the workload,
# every restart against the rows held at the crash), so a short run is a real
# end-to-end test of the store, Redis as the peer and the rdb's restart paths.
# Speed is not asserted.


def md_rows(md: str, label: str) -> list[list[str]]:
    return [[c.strip() for c in l.split("|")[1:-1]] for l in md.splitlines() if l.startswith(f"| {label}")]


def test_bench_kv_runs_the_same_operations_on_tickdb_and_redis(tmp_path):
    out = tmp_path / "kv.json"
    r = run(["bench", "kv", "--entries", "20000", "--updates", "40000", "--always-updates", "2000",
             "--value-bytes", "512", "--batch", "200", "--chunk-mb", "2", "--parallelism", "1,3",
             "--runs", "2", "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    for label, n in (("load (20.0k)", 1), ("updates (40.0k)", 1), ("updates (2.0k)", 1),
                     ("raw sequential read", 2), ("tickdb reload", 2), ("Redis AOF load, as left", 1),
                     ("Redis AOF load, after BGREWRITEAOF", 1)):
        rows = md_rows(md, label)
        assert len(rows) == n and all(row[0] and row[1] for row in rows), (label, md)
    # Every speed is a median over the two runs, with its range.
    for label in ("load (20.0k)", "updates (40.0k)", "tickdb reload"):
        for row in md_rows(md, label):
            assert "–" in row[2], (label, row)
    assert "Redis's faster form" in md, md
    assert md.count("\n- ", md.index("Targets (reported, not asserted)")) == 3, md
    rep = json.loads(out.read_text())
    assert len(rep["runs"]) == 2
    for run_ in rep["runs"]:
        t, rd = run_["tickdb"], run_["redis"]
        # The store and Redis agree with the model (the run would have
        # failed otherwise), so they hold the same number of keys.
        assert t["live_records"] == rep["live_keys"] > 15_000
        assert [x["ops"] for x in (t["load"], t["everysec"], t["always"])] == [20_000, 40_000, 2_000]
        assert [x["ops"] for x in (rd["load"], rd["everysec"], rd["always"])] == [20_000, 40_000, 2_000]
        # 2 MiB chunks under 40k random updates of 512 B: GC had work and did it.
        assert t["gc_runs"] > 0 and t["write_amplification"] > 1.0, t
        assert [x["parallelism"] for x in t["reloads"]] == [1, 3]
        for x in t["reloads"]:
            assert x["records"] >= rep["live_keys"] and x["bytes"] > 0 and x["secs"] > 0 and x["raw_mb_s"] > 0
        # Every reload read the same files.
        assert len({(x["records"], x["bytes"]) for x in t["reloads"]}) == 1, t["reloads"]
        assert rd["version"].startswith("7.")
        for form in ("restart", "rewritten"):
            assert rd[form]["aof_bytes"] > 0 and rd[form]["secs"] > 0, rd
        # The rewritten AOF is one RDB base file of the live keys: smaller
        # than the operations' log, which holds every overwritten value too.
        assert rd["rewritten"]["aof_bytes"] < rd["restart"]["aof_bytes"], rd


def test_bench_kv_refuses_bad_options_clearly(tmp_path):
    r = run(["bench", "kv", "--entries", "0", "--no-redis", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "--entries" in r.stderr, r.stderr
    r = run(["bench", "kv", "--entries", "1000", "--runs", "0", "--no-redis", "--work-dir", str(tmp_path / "w")])
    assert r.returncode != 0 and "--runs" in r.stderr, r.stderr


def test_bench_restart_brings_back_every_row_three_ways(tmp_path):
    out = tmp_path / "restart.json"
    r = run(["bench", "restart", "--rows", "60000", "--steps", "2", "--tail-rows", "6000",
             "--live-rate", "2000", "--repeats", "1", "--symbols", "200", "--segment-bytes-max", "262144",
             "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    assert "Longest ingest pause" in md
    targets = md.split("Targets (reported, not asserted)")[1]
    assert "at least 10× faster than replaying the whole journal" in targets, md
    assert "reload at 90% or more of a raw cold read" in targets, md
    assert len(md_rows(md, "whole journal")) == 1 and len(md_rows(md, "Hot Restart, journal")) == 2, md
    rep = json.loads(out.read_text())
    cks = rep["checkpoints"]
    assert len(cks) == 2 and cks[0]["rows"] < cks[1]["rows"]
    assert all(c["bytes_written"] > 0 and c["duration_ms"] >= 0 for c in cks), cks
    # Both prestress steps and the tail went in, and the live feed added more.
    assert rep["rows"] >= 66_000 and rep["tail_rows"] >= 6_000
    # The trim removed segments behind the checkpoint; the restart from the
    # trimmed journal still brought every row back (checked by the bench).
    assert 0 < rep["journal_trimmed_bytes"] < rep["journal_bytes"]
    for k in ("full_replay", "hot_whole_journal", "hot_trimmed_journal"):
        assert len(rep[k]["secs"]) == 1 and rep[k]["secs"][0] > 0, rep[k]
    for k in ("hot_whole_journal", "hot_trimmed_journal"):
        assert len(rep[k]["reload_secs"]) == 1 and len(rep[k]["restore_secs"]) == 1
    assert rep["full_replay"]["reload_secs"] == []
    # The raw read and the mapped read (the reload's own way of reading)
    # of the store, one each per repeat, both reported.
    assert len(rep["raw_read_mb_s"]) == 1 and rep["raw_read_mb_s"][0] > 0, rep
    assert len(rep["mapped_read_mb_s"]) == 1 and rep["mapped_read_mb_s"][0] > 0, rep
    assert "of the cold mapped read" in targets and "mapping it whole, advised huge pages and populated" in md, md
    # How much of the store each ready rdb had mapped in 2 MiB pages: read
    # from /proc once per restart (0 where the file system gives none).
    for k in ("hot_whole_journal", "hot_trimmed_journal"):
        assert len(rep[k]["huge_mapped_bytes"]) == 1, rep[k]
