"""Recovery at start on a journal the real server wrote: a torn tail is cut
and reported; a bit flip in a middle record refuses start-up naming the file
and offset, unless --recover-point-in-time; the journal tools agree.
(The kill -9 loop is crates/tickdb/tests/crash_loop.rs; exhaustive torn
tails, gaps and injected faults are in crates/journal/tests.)"""

from __future__ import annotations

import struct
from pathlib import Path

import requests

from harness import run

SEGMENT_HEADER = 32
RECORD_HEADER = 32


def write_updates(db, n: int) -> None:
    for i in range(n):
        body = "".join(f"trade,sym=D{i % 3} price=1.5,size={i * 10 + k}i\n" for k in range(10))
        assert requests.post(db.url + "/write", data=body, timeout=10).status_code == 204


def segment(data_dir: Path) -> Path:
    segs = sorted((data_dir / "journal").glob("journal-*.log"))
    assert len(segs) == 1, segs
    return segs[0]


def record_offsets(seg: Path) -> list[int]:
    b = seg.read_bytes()
    off, out = SEGMENT_HEADER, []
    while off + RECORD_HEADER <= len(b):
        out.append(off)
        (length,) = struct.unpack_from("<I", b, off)
        off += RECORD_HEADER + length
    return out


def test_torn_tail_is_truncated_and_reported(cluster):
    db = cluster.up()
    write_updates(db, 20)
    db.kill9()
    seg = segment(db.data_dir)
    offs = record_offsets(seg)
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 7)  # cut inside the last record
    db2 = cluster.up(data_dir=db.data_dir)
    assert db2.scalar("select count(*) from trade") == 190
    log = db2.log.read_text()
    assert seg.name in log and str(offs[-1]) in log, log[-3000:]
    # The next append reads back.
    write_updates(db2, 1)
    assert db2.scalar("select count(*) from trade") == 200


def test_bit_flip_in_a_middle_record_refuses_start(cluster):
    db = cluster.up()
    write_updates(db, 20)
    db.terminate()
    seg = segment(db.data_dir)
    offs = record_offsets(seg)
    bad = offs[10]
    b = bytearray(seg.read_bytes())
    b[bad + RECORD_HEADER + 5] ^= 0x10
    seg.write_bytes(bytes(b))

    p = cluster.up(data_dir=db.data_dir, start=False)
    p.start(wait_ready=False)
    assert p.wait_exit(timeout=30) != 0
    err = p.log.read_text()
    assert seg.name in err and str(bad) in err and "--recover-point-in-time" in err, err[-3000:]

    r = run(["journal", "verify", str(db.data_dir / "journal")])
    assert r.returncode == 1, r.stdout + r.stderr
    assert str(bad) in r.stdout + r.stderr

    r = run(["journal", "repair", str(db.data_dir / "journal")])
    assert r.returncode == 2, "repair without --yes is a dry run that refuses"

    # With the flag: the longest consistent prefix (records 1..10), and a
    # report of what was dropped.
    db3 = cluster.up(data_dir=db.data_dir, extra=["--recover-point-in-time"])
    assert db3.scalar("select count(*) from trade") == 100
    log = db3.log.read_text()
    assert "drop" in log.lower(), log[-3000:]


def test_repair_keeps_a_backup(cluster, tmp_path):
    db = cluster.up()
    write_updates(db, 5)
    db.terminate()
    seg = segment(db.data_dir)
    with open(seg, "ab") as f:
        f.write(b"\xde\xad\xbe\xef" * 20)  # garbage after the last record
    journal = db.data_dir / "journal"
    backup = tmp_path / "cut"
    r = run(["journal", "repair", str(journal), "--yes", "--backup", str(backup)])
    assert r.returncode == 0, r.stdout + r.stderr
    cut = list(backup.rglob("*"))
    assert any(p.is_file() and p.stat().st_size >= 80 for p in cut), (r.stdout, cut)
    r = run(["journal", "verify", str(journal)])
    assert r.returncode == 0 and "problems: none" in r.stdout, r.stdout
    r = run(["journal", "stats", str(journal)])
    assert r.returncode == 0 and "total" in r.stdout and " 50 " in r.stdout, r.stdout
