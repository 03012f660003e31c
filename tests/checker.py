"""A Jepsen-style checker over plain data: what clients were told (an
`AckLog`, kept outside the database) against what the nodes hold afterwards
(their rows, their journals, the epochs they reported). No network here.

    log = AckLog(tmp / "acks.jsonl")          # every record appended, flushed
    log.ack(row_id=7, node="p", epoch=3, seq=41)
    log.fail(row_id=8, node="p", error="timeout")
    rep = check(log, rows_by_node, journals, epochs_seen, mode="semi-sync")
    assert rep.ok, rep                          # every violation, one sentence each

A `client` name stands for one sequential client: it sends its next write
only after the previous one was answered, so the order of its acks is the
order in which the writes must be stored. Concurrent writers use distinct
client names. A failed attempt is indeterminate: its row may or may not be
stored, but it must never be stored twice, and a row nobody attempted must
never appear.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

MAX_LISTED = 10  # ids listed in one message before "..."


@dataclass
class Ack:
    """A write the client was told succeeded."""

    row_id: int
    node: str
    epoch: int | None = None
    seq: int | None = None
    t: float = 0.0  # time.monotonic() when the ack arrived
    client: str = "c0"
    kind: str = "ack"


@dataclass
class Attempt:
    """A write that failed or whose answer never came (indeterminate)."""

    row_id: int
    node: str
    error: str = ""
    t: float = 0.0
    client: str = "c0"
    kind: str = "fail"


class AckLog:
    """Every acknowledged write and every failed attempt, in order. With a
    `path`, each record is also appended to that JSONL file at once (and
    flushed), so it survives whatever happens to the database or the test."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else None
        self.acks: list[Ack] = []
        self.fails: list[Attempt] = []
        self._f = open(self.path, "a") if self.path is not None else None

    def ack(self, row_id: int, node: str, epoch: int | None = None, seq: int | None = None,
            t: float | None = None, client: str = "c0") -> Ack:
        a = Ack(int(row_id), node, epoch, seq, time.monotonic() if t is None else t, client)
        self.acks.append(a)
        self._write(a)
        return a

    def fail(self, row_id: int, node: str, error: str = "", t: float | None = None,
             client: str = "c0") -> Attempt:
        f = Attempt(int(row_id), node, str(error), time.monotonic() if t is None else t, client)
        self.fails.append(f)
        self._write(f)
        return f

    def _write(self, rec) -> None:
        if self._f is not None:
            self._f.write(json.dumps(asdict(rec)) + "\n")
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def to_jsonl(self, path: Path | str) -> None:
        """Writes all records (acks and failures, by time) to `path`."""
        recs = sorted([*self.acks, *self.fails], key=lambda r: r.t)
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(asdict(r)) + "\n")

    @classmethod
    def from_jsonl(cls, path: Path | str) -> "AckLog":
        log = cls()
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            if d.pop("kind", "ack") == "ack":
                log.acks.append(Ack(**d))
            else:
                log.fails.append(Attempt(**d))
        return log

    @property
    def acked_ids(self) -> list[int]:
        return [a.row_id for a in self.acks]

    def __len__(self) -> int:
        return len(self.acks)


@dataclass
class Report:
    """What `check` found: `violations` (sentences; empty when all is well)
    and `stats` (counts, for the test's log)."""

    mode: str
    violations: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def assert_ok(self) -> None:
        assert self.ok, str(self)

    def __str__(self) -> str:
        head = f"checker ({self.mode}): {len(self.violations)} violation(s); " + \
            ", ".join(f"{k}={v}" for k, v in self.stats.items())
        return "\n".join([head, *(f"  - {v}" for v in self.violations)])


def _ids(ids: Iterable[int]) -> str:
    ids = list(ids)
    s = ", ".join(str(i) for i in ids[:MAX_LISTED])
    return s + (f", ... ({len(ids)} in all)" if len(ids) > MAX_LISTED else "")


def check(acks: "AckLog | Iterable[Ack | Attempt]",
          rows_by_node: dict[str, list[int]],
          journals: dict[str, list[tuple[int, int, int]]] | None = None,
          epochs_seen: dict[str, list[tuple[float, int]]] | None = None,
          mode: str = "semi-sync",
          reported_lag_rows: int | None = None) -> Report:
    """Checks a history; returns a `Report` listing every violation.

    `acks`: an AckLog, or Ack and Attempt records. `rows_by_node`: per node,
    the row ids it stores, in its stored order. `journals`: per node, its
    journal as (seq, epoch, crc) in seq order. `epochs_seen`: per node, the
    (monotonic time, epoch) it reported, in the order observed. `mode`:
    "semi-sync" (no acknowledged row may be missing) or "async" (at most
    `reported_lag_rows` acknowledged rows may be missing on a node; the
    lag the failover reported; None counts as 0, since an unreported loss
    is a loss nobody was told about).

    Checks: every acknowledged row is on every node exactly once; each
    client's acknowledged rows are stored in the order they were acked; no
    row is stored twice and none that nobody attempted; no row was acked
    twice; journals are gap-free and identical (seq -> epoch, crc) over the
    seqs they share; epochs never go down along a journal nor along a
    node's observed history; no write is acknowledged in epoch E after a
    write was acknowledged in an epoch above E (split brain); in semi-sync
    mode an ack's (seq, epoch) is what every journal holding that seq has.
    """
    if mode not in ("semi-sync", "async"):
        raise ValueError(f"mode must be 'semi-sync' or 'async', not {mode!r}")
    journals = journals or {}
    epochs_seen = epochs_seen or {}
    if isinstance(acks, AckLog):
        ack_list, fail_list = list(acks.acks), list(acks.fails)
    else:
        recs = list(acks)
        ack_list = [r for r in recs if isinstance(r, Ack)]
        fail_list = [r for r in recs if isinstance(r, Attempt)]
    rep = Report(mode)
    v = rep.violations

    # --- acks themselves ---------------------------------------------
    ack_by_id: dict[int, Ack] = {}
    for a in ack_list:
        if a.row_id in ack_by_id:
            b = ack_by_id[a.row_id]
            v.append(f"row {a.row_id} was acknowledged twice (by {b.node} in epoch {b.epoch} "
                     f"and by {a.node} in epoch {a.epoch}): clients must choose fresh ids")
        else:
            ack_by_id[a.row_id] = a
    attempted = set(ack_by_id) | {f.row_id for f in fail_list}

    # --- rows on each node -------------------------------------------
    missing_by_node: dict[str, list[int]] = {}
    for node in sorted(rows_by_node):
        rows = list(rows_by_node[node])
        counts = Counter(rows)
        for rid, c in sorted(counts.items()):
            if c > 1:
                v.append(f"row {rid} is stored {c} times on {node} (duplicate)")
        phantoms = sorted(r for r in counts if r not in attempted)
        if phantoms:
            v.append(f"{node} stores row(s) {_ids(phantoms)} that no client ever wrote")
        missing = [rid for rid in ack_by_id if rid not in counts]
        missing_by_node[node] = missing
        if missing and mode == "semi-sync":
            for rid in missing[:MAX_LISTED]:
                a = ack_by_id[rid]
                v.append(f"acknowledged row {rid} (acked by {a.node} in epoch {a.epoch}, "
                         f"seq {a.seq}) is missing from {node}")
            if len(missing) > MAX_LISTED:
                v.append(f"... and {len(missing) - MAX_LISTED} more acknowledged rows are missing from {node}")
        if missing and mode == "async":
            bound = reported_lag_rows if reported_lag_rows is not None else 0
            if len(missing) > bound:
                said = f"the reported lag of {reported_lag_rows} rows" if reported_lag_rows is not None \
                    else "the reported lag of 0 rows (none was reported)"
                v.append(f"async: {node} is missing {len(missing)} acknowledged rows "
                         f"({_ids(missing)}), more than {said}")
        # Order: each sequential client's acked rows, in ack order, must be
        # stored in that order (of those present).
        pos: dict[int, int] = {}
        for i, rid in enumerate(rows):
            pos.setdefault(rid, i)
        by_client: dict[str, list[Ack]] = defaultdict(list)
        for a in ack_by_id.values():
            by_client[a.client].append(a)
        for client in sorted(by_client):
            seq = sorted(by_client[client], key=lambda a: a.t)
            present = [a for a in seq if a.row_id in pos]
            inversions = [(x, y) for x, y in zip(present, present[1:]) if pos[y.row_id] < pos[x.row_id]]
            for x, y in inversions[:MAX_LISTED]:
                v.append(f"{node} stores row {y.row_id} before row {x.row_id}, but client {client} "
                         f"had row {x.row_id} acknowledged before row {y.row_id} (reordered)")
            if len(inversions) > MAX_LISTED:
                v.append(f"... and {len(inversions) - MAX_LISTED} more reorderings of client {client}'s rows on {node}")

    # --- journals ------------------------------------------------------
    maps: dict[str, dict[int, tuple[int, int]]] = {}
    for node in sorted(journals):
        j = list(journals[node])
        m: dict[int, tuple[int, int]] = {}
        prev = None
        for seq, epoch, crc in j:
            if prev is not None:
                pseq, pepoch = prev
                if seq <= pseq:
                    v.append(f"{node}'s journal goes back from seq {pseq} to seq {seq}")
                elif seq != pseq + 1:
                    v.append(f"{node}'s journal jumps from seq {pseq} to seq {seq} (gap)")
                if epoch < pepoch:
                    v.append(f"{node}'s journal goes back from epoch {pepoch} to epoch {epoch} at seq {seq}")
            m.setdefault(seq, (epoch, crc))
            prev = (seq, epoch)
        maps[node] = m
    names = sorted(maps)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            shared = sorted(set(maps[x]) & set(maps[y]))
            for seq in shared:
                if maps[x][seq] != maps[y][seq]:
                    (ex, cx), (ey, cy) = maps[x][seq], maps[y][seq]
                    v.append(f"journals of {x} and {y} diverge at seq {seq}: {x} has epoch {ex} "
                             f"crc {cx:#010x}, {y} has epoch {ey} crc {cy:#010x}")
                    break

    # --- acked (seq, epoch) against the journals (semi-sync) --------------
    if mode == "semi-sync":
        for a in ack_by_id.values():
            if a.seq is None or a.epoch is None:
                continue
            for node in names:
                held = maps[node].get(a.seq)
                if held is not None and held[0] != a.epoch:
                    v.append(f"row {a.row_id} was acknowledged as seq {a.seq} in epoch {a.epoch}, "
                             f"but {node}'s journal holds seq {a.seq} from epoch {held[0]} (overwritten)")

    # --- epochs observed -------------------------------------------------
    for node in sorted(epochs_seen):
        hist = sorted(enumerate(epochs_seen[node]), key=lambda p: (p[1][0], p[0]))
        hi: tuple[float, int] | None = None
        for _, (t, e) in hist:
            if hi is not None and e < hi[1]:
                v.append(f"{node}'s observed epoch went down from {hi[1]} (t={hi[0]:.3f}) "
                         f"to {e} (t={t:.3f})")
            if hi is None or e >= hi[1]:
                hi = (t, e)

    # --- split brain: an ack in epoch E after an ack in an epoch > E -------
    top: Ack | None = None
    for a in sorted((a for a in ack_list if a.epoch is not None), key=lambda a: a.t):
        if top is not None and a.epoch < top.epoch:
            v.append(f"split brain: row {a.row_id} was acknowledged by {a.node} in epoch {a.epoch} "
                     f"at t={a.t:.3f}, after row {top.row_id} had been acknowledged by {top.node} "
                     f"in epoch {top.epoch} at t={top.t:.3f}")
        if top is None or a.epoch > top.epoch:
            top = a

    rep.stats = {
        "acked": len(ack_by_id),
        "failed": len(fail_list),
        "nodes": len(rows_by_node),
        "missing": {n: len(m) for n, m in missing_by_node.items()},
        "journal_lengths": {n: len(j) for n, j in journals.items()},
        "epochs": sorted({a.epoch for a in ack_list if a.epoch is not None}),
    }
    return rep


# --- reading a journal directory into check()'s (seq, epoch, crc) -------

_SEGMENT_RE = re.compile(r"^journal-(\d{20})\.log$")
SEGMENT_HEADER = 32
RECORD_HEADER = 32


def journal_records(journal_dir: Path | str) -> list[tuple[int, int, int]]:
    """(seq, epoch, crc) of every whole record in a journal directory's
    journal-*.log segments, in seq order, for `check(journals=...)`.

    Layout as in crates/journal/src/format.rs (32-byte segment header; each
    record a 32-byte header: u32 payload_len, u32 crc32c, u64 seq, i64
    time_ns, u32 rows, u8 kind, u24 epoch; little endian; version 1 segments
    have epoch 0). A segment is read up to a record cut short (a torn tail);
    the CRC is taken as stored, not verified: `tickdb`'s own journal tools
    judge corruption, this only lets journals be compared."""
    segs = sorted((int(m.group(1)), p) for p in Path(journal_dir).iterdir()
                  if (m := _SEGMENT_RE.match(p.name)) and p.is_file())
    out: list[tuple[int, int, int]] = []
    for _, path in segs:
        data = path.read_bytes()
        if len(data) < SEGMENT_HEADER or data[:8] != b"TICKJRNL":
            continue
        version = struct.unpack_from("<I", data, 8)[0]
        off = SEGMENT_HEADER
        while off + RECORD_HEADER <= len(data):
            plen, crc, seq = struct.unpack_from("<IIQ", data, off)
            if plen == 0 and crc == 0 and seq == 0:
                break  # zeroed (preallocated or torn) space
            if off + RECORD_HEADER + plen > len(data):
                break  # torn tail
            epoch = 0 if version < 2 else int.from_bytes(data[off + 29:off + 32], "little")
            out.append((seq, epoch, crc))
            off += RECORD_HEADER + plen
    return out
