"""The Jepsen-style checker on hand-made histories: good ones pass, and each
kind of bad one is caught with a sentence that says what went wrong. Plain
data only, no processes."""

from __future__ import annotations

import pytest

import struct

from checker import Ack, AckLog, Attempt, check, journal_records


def crc(seq: int, epoch: int) -> int:
    return (seq * 2654435761 + epoch * 97) & 0xFFFFFFFF


def journal(epochs: list[int], first: int = 1) -> list[tuple[int, int, int]]:
    """A journal whose record seq first+i was written in epochs[i]."""
    return [(first + i, e, crc(first + i, e)) for i, e in enumerate(epochs)]


def history():
    """A clean failover: client c0 writes rows 1..6 to p in epoch 1, then
    rows 7..10 to s (promoted, epoch 2); one write (row 11) failed and was
    not stored, one (row 12) failed but was stored. Journal seq = row id
    for rows 1..10, seq 11 holds row 12."""
    log = AckLog()
    t = 100.0
    for rid in range(1, 7):
        log.ack(rid, "p", epoch=1, seq=rid, t=t)
        t += 0.01
    log.fail(11, "p", "connection reset", t=t)
    t += 0.5
    for rid in range(7, 11):
        log.ack(rid, "s", epoch=2, seq=rid, t=t)
        t += 0.01
    log.fail(12, "s", "timeout", t=t)
    rows = list(range(1, 11)) + [12]
    j = journal([1] * 6 + [2] * 5)
    return (log, {"p": list(rows), "s": list(rows)}, {"p": list(j), "s": list(j)},
            {"p": [(99.0, 1), (100.2, 1), (101.0, 2)], "s": [(99.0, 1), (100.6, 2)]})


def run(log, rows, journals, epochs, mode="semi-sync", lag=None):
    return check(log, rows, journals, epochs, mode=mode, reported_lag_rows=lag)


def only(rep, *needles: str) -> str:
    """The one violation; it contains every needle."""
    assert len(rep.violations) == 1, str(rep)
    msg = rep.violations[0]
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


@pytest.mark.parametrize("mode", ["semi-sync", "async"])
def test_a_clean_history_passes(mode):
    rep = run(*history(), mode=mode, lag=0)
    assert rep.ok, str(rep)
    assert rep.stats["acked"] == 10 and rep.stats["failed"] == 2
    assert rep.stats["missing"] == {"p": 0, "s": 0}
    rep.assert_ok()


def test_a_lagging_journal_and_a_second_client_pass():
    log, rows, journals, epochs = history()
    journals["s"] = journals["s"][:7]  # s is behind: a prefix
    journals["r"] = journals["p"][3:]  # r was reseeded at seq 4: a suffix
    # A second sequential client, whose acks interleave in time with c0's:
    # its rows may sit anywhere relative to c0's, but in its own order.
    log.ack(100, "s", epoch=2, t=100.65, client="c1")
    log.ack(101, "s", epoch=2, t=100.66, client="c1")
    for n in rows:
        rows[n] = [100, *rows[n], 101]
    assert run(log, rows, journals, epochs).ok
    for n in rows:
        rows[n] = [101, *rows[n][1:-1], 100]
    rep = run(log, rows, journals, epochs)
    assert rep.violations == [
        f"{n} stores row 101 before row 100, but client c1 had row 100 acknowledged before "
        "row 101 (reordered)" for n in ("p", "s")], str(rep)


def test_a_lost_ack_is_caught():
    log, rows, journals, epochs = history()
    rows["s"].remove(4)
    msg = only(run(log, rows, journals, epochs), "acknowledged row 4", "missing from s")
    assert "acked by p in epoch 1" in msg


def test_a_duplicate_is_caught():
    log, rows, journals, epochs = history()
    rows["p"].insert(8, 7)
    only(run(log, rows, journals, epochs), "row 7 is stored 2 times on p", "duplicate")


def test_a_stored_failed_write_twice_is_a_duplicate_too():
    log, rows, journals, epochs = history()
    rows["s"].append(12)
    only(run(log, rows, journals, epochs), "row 12 is stored 2 times on s")


def test_a_row_nobody_wrote_is_caught():
    log, rows, journals, epochs = history()
    rows["s"].append(999)
    only(run(log, rows, journals, epochs), "s stores row(s) 999 that no client ever wrote")


def test_a_reordered_row_is_caught():
    log, rows, journals, epochs = history()
    r = rows["p"]
    r[2], r[3] = r[3], r[2]  # 1 2 4 3 5 ...
    only(run(log, rows, journals, epochs),
         "p stores row 4 before row 3", "client c0 had row 3 acknowledged before row 4", "reordered")


def test_a_diverged_journal_is_caught():
    log, rows, journals, epochs = history()
    j = list(journals["s"])
    seq, e, c = j[4]
    j[4] = (seq, e, c ^ 0xFF)
    journals["s"] = j
    only(run(log, rows, journals, epochs), "journals of p and s diverge at seq 5",
         f"p has epoch 1 crc {c:#010x}", f"s has epoch 1 crc {c ^ 0xFF:#010x}")


def test_a_journal_gap_is_caught():
    log, rows, journals, epochs = history()
    del journals["s"][5]
    only(run(log, rows, journals, epochs), "s's journal jumps from seq 5 to seq 7 (gap)")


def test_an_epoch_going_down_in_a_journal_is_caught():
    log, rows, journals, epochs = history()
    # Both journals agree, but epoch 2 is followed by epoch 1 at seq 9.
    j = journal([1] * 6 + [2, 2, 1, 2, 2])
    journals = {"p": j, "s": list(j)}
    rep = run(log, rows, journals, epochs)
    assert "p's journal goes back from epoch 2 to epoch 1 at seq 9" in rep.violations
    assert "s's journal goes back from epoch 2 to epoch 1 at seq 9" in rep.violations
    # ...and row 9, acked as seq 9 in epoch 2, is not what the journals hold.
    assert any("row 9 was acknowledged as seq 9 in epoch 2" in m and "overwritten" in m
               for m in rep.violations), str(rep)


def test_an_observed_epoch_going_down_is_caught():
    log, rows, journals, epochs = history()
    epochs["p"].append((102.0, 1))  # p reports epoch 1 after it had reported 2
    only(run(log, rows, journals, epochs), "p's observed epoch went down from 2", "to 1 (t=102.000)")


def test_a_split_brain_ack_is_caught():
    log, rows, journals, epochs = history()
    # The old primary, cut off, acknowledges row 13 in epoch 1 after s had
    # acknowledged row 7 in epoch 2; it made it onto both nodes.
    log.ack(13, "p", epoch=1, t=100.7, client="c2")
    for n in rows:
        rows[n].append(13)
    msg = only(run(log, rows, journals, epochs), "split brain: row 13 was acknowledged by p in epoch 1",
               "after row 7 had been acknowledged by s in epoch 2")
    assert "t=100.700" in msg


def test_async_loss_within_the_reported_lag_passes_and_over_it_is_caught():
    log, rows, journals, epochs = history()
    # The promoted standby had not received rows 5 and 6 (async): lost.
    for n in rows:
        rows[n] = [r for r in rows[n] if r not in (5, 6)]
    assert run(log, rows, journals, epochs, mode="async", lag=2).ok
    assert run(log, rows, journals, epochs, mode="async", lag=5).ok
    rep = run(log, rows, journals, epochs, mode="async", lag=1)
    assert rep.violations == [
        "async: p is missing 2 acknowledged rows (5, 6), more than the reported lag of 1 rows",
        "async: s is missing 2 acknowledged rows (5, 6), more than the reported lag of 1 rows",
    ], str(rep)
    rep = run(log, rows, journals, epochs, mode="async", lag=None)
    assert len(rep.violations) == 2 and "none was reported" in rep.violations[0], str(rep)
    # The same loss in semi-sync mode is one violation per row and node.
    rep = run(log, rows, journals, epochs, mode="semi-sync")
    assert sorted(rep.violations) == sorted(
        f"acknowledged row {r} (acked by p in epoch 1, seq {r}) is missing from {n}"
        for r in (5, 6) for n in ("p", "s")), str(rep)


def test_an_ack_given_twice_is_caught():
    log, rows, journals, epochs = history()
    log.ack(3, "s", epoch=2, t=100.9)
    rep = run(log, rows, journals, epochs)
    assert any("row 3 was acknowledged twice" in m for m in rep.violations), str(rep)


def test_every_kind_at_once_is_reported_together():
    log, rows, journals, epochs = history()
    rows["s"].remove(2)
    rows["p"].append(1)
    journals["s"] = journal([1] * 6 + [3] * 5)
    rep = run(log, rows, journals, epochs)
    text = str(rep)
    assert "acknowledged row 2" in text and "row 1 is stored 2 times on p" in text
    assert "journals of p and s diverge at seq 7" in text
    assert text.startswith("checker (semi-sync): ")
    with pytest.raises(AssertionError, match="diverge at seq 7"):
        rep.assert_ok()


def test_the_ack_log_round_trips_through_jsonl(tmp_path):
    path = tmp_path / "acks.jsonl"
    log = AckLog(path)
    log.ack(1, "p", epoch=1, seq=10, t=1.0)
    log.fail(2, "p", "refused", t=2.0)
    log.ack(3, "s", epoch=2, seq=None, t=3.0, client="c1")
    log.close()
    # Appended as it went: one line per record, readable mid-run.
    assert len(path.read_text().splitlines()) == 3
    back = AckLog.from_jsonl(path)
    assert back.acks == log.acks and back.fails == log.fails
    assert back.acked_ids == [1, 3] and len(back) == 2
    other = tmp_path / "copy.jsonl"
    log.to_jsonl(other)
    again = AckLog.from_jsonl(other)
    assert again.acks == log.acks and again.fails == log.fails
    # Plain records work as input too.
    rep = check([Ack(1, "p", 1, 10, 1.0), Attempt(2, "p", "x", 2.0)], {"p": [1, 2]}, mode="semi-sync")
    assert rep.ok, str(rep)


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode"):
        check(AckLog(), {}, mode="sync")


def segment(first: int, records: list[tuple[int, int, bytes]], version: int = 2) -> bytes:
    """A segment in tickdb's layout: records are (seq, epoch, payload)."""
    b = b"TICKJRNL" + struct.pack("<IIQq", version, 32, first, 0)
    for seq, epoch, payload in records:
        b += struct.pack("<IIQqIB", len(payload), crc(seq, epoch), seq, 0, 1, 0) + epoch.to_bytes(3, "little")
        b += payload
    return b


def test_journal_records_reads_segments_up_to_a_torn_tail(tmp_path):
    (tmp_path / "journal-00000000000000000001.log").write_bytes(
        segment(1, [(1, 0, b"a"), (2, 0, b"bb")], version=1))
    torn = segment(3, [(3, 1, b"ccc"), (4, 2, b"dddd")])
    (tmp_path / "journal-00000000000000000003.log").write_bytes(torn[:-2])
    (tmp_path / "journal-00000000000000000003.log.old").write_bytes(b"junk")
    assert journal_records(tmp_path) == [(1, 0, crc(1, 0)), (2, 0, crc(2, 0)),
                                         (3, 1, crc(3, 1))]
    (tmp_path / "journal-00000000000000000003.log").write_bytes(torn)
    recs = journal_records(tmp_path)
    assert recs[-1] == (4, 2, crc(4, 2))
    rep = check(AckLog(), {}, {"p": recs, "s": recs[:2]}, mode="semi-sync")
    assert rep.ok, str(rep)
