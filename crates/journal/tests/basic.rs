//! Writing and reading: round trips, segment rolls, readers, fsync policies.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::Rng;
use tickdb_journal::format::DAY_NS;
use tickdb_journal::{
    FaultyStorage, FsyncPolicy, Journal, JournalError, JournalOptions, JournalReader, Op,
    RECORD_PAYLOAD_BYTES_MAX,
};

#[test]
fn round_trip_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let (mut j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!((j.last_seq(), j.synced_seq()), (0, 0));
    assert!(j.commit().unwrap(), "nothing to sync is synced");
    // An empty payload is a valid record.
    assert_eq!(j.append(9, 0, -1, b"").unwrap(), 1);
    for _ in 0..9 {
        append_std(&mut j, 0);
    }
    assert_eq!(j.synced_seq(), 0, "append returns before any write");
    assert!(j.commit().unwrap());
    assert_eq!(
        (j.last_seq(), j.written_seq(), j.synced_seq()),
        (10, 10, 10)
    );
    drop(j);

    let (mut j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!((rep.records, rep.last_seq, j.last_seq()), (10, 10, 10));
    assert!(rep.to_string().contains("10 record(s)"), "{rep}");
    append_std(&mut j, 0);
    j.close().unwrap();

    let recs = read_all(&dir);
    assert_eq!(recs.len(), 11);
    assert_eq!(
        (recs[0].seq, recs[0].kind, recs[0].rows, recs[0].time_ns),
        (1, 9, 0, -1)
    );
    assert!(recs[0].payload.is_empty());
    for r in &recs[1..] {
        assert_eq!(*r, expected(r.seq, 0));
    }
}

#[test]
fn many_records_across_segment_rolls() {
    let seed = seed("many_records_across_segment_rolls");
    let mut rng = rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = 400;
    let (mut j, _) = Journal::open(dir, opts(max, FsyncPolicy::Never)).unwrap();
    let n = 2000;
    for _ in 0..n {
        append_std(&mut j, seed);
        if rng.random_range(0..10) == 0 {
            j.commit().unwrap();
        }
    }
    j.commit().unwrap();
    drop(j);
    let segs = segments(dir);
    assert!(segs.len() > 50, "only {} segments", segs.len());
    let mut next = 1;
    for s in &segs {
        let len = std::fs::metadata(s).unwrap().len();
        let offs = record_offsets(s);
        assert!(
            len <= max || offs.len() == 1,
            "{} is {len} bytes",
            s.display()
        );
        let name = s.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, format!("journal-{next:020}.log"));
        next += offs.len() as u64;
    }
    assert_eq!(next, n + 1);
    let v = tickdb_journal::verify(dir).unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.records, v.segments.len()), (n, segs.len()));
    assert_std_records(dir, n, seed);
    // Reopen and keep going in the last segment.
    let (mut j, rep) = Journal::open(dir, opts(max, FsyncPolicy::Never)).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.segments, segs.len());
    append_std(&mut j, seed);
    j.close().unwrap();
    assert_std_records(dir, n + 1, seed);
}

#[test]
fn reader_from_the_middle() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(1000, FsyncPolicy::Never), 300, 7, 3);
    assert!(segments(dir).len() > 5);
    for (from, to) in [
        (1, 300),
        (2, 2),
        (150, 160),
        (299, 300),
        (300, 300),
        (0, 5),
        (37, 250),
    ] {
        let r = JournalReader::open(dir, from, to).unwrap();
        assert!(r.bytes_total() > 0);
        let recs: Vec<_> = r.collect::<Result<_, _>>().unwrap();
        let from = from.max(1);
        assert_eq!(recs.len() as u64, to - from + 1, "{from}..={to}");
        for (i, rec) in recs.iter().enumerate() {
            assert_eq!(*rec, expected(from + i as u64, 3));
        }
    }
    // Nothing when from > to.
    assert_eq!(JournalReader::open(dir, 10, 9).unwrap().count(), 0);
    // A committed seq the journal does not hold is an error item, not silence.
    let items: Vec<_> = JournalReader::open(dir, 295, 305).unwrap().collect();
    assert_eq!(items.len(), 7);
    assert!(items[..6].iter().all(|r| r.is_ok()));
    assert!(
        matches!(items[6], Err(JournalError::Corrupt { .. })),
        "{:?}",
        items[6]
    );
}

#[test]
fn reader_while_writer_appends() {
    let seed = seed("reader_while_writer_appends");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let committed = Arc::new(AtomicU64::new(0));
    let total = 3000u64;
    let (mut j, _) = Journal::open(&dir, opts(4096, FsyncPolicy::Never)).unwrap();
    let c = committed.clone();
    let writer = std::thread::spawn(move || {
        let mut rng = rng(seed);
        while j.last_seq() < total {
            for _ in 0..rng.random_range(1..20) {
                if j.last_seq() < total {
                    append_std(&mut j, seed);
                }
            }
            j.commit().unwrap();
            c.store(j.written_seq(), Ordering::Release);
            if rng.random_range(0..50) == 0 {
                j.roll_segment().unwrap();
            }
        }
    });
    // Catch up in several passes, each to the seq committed at its start.
    let mut next = 1;
    while next <= total {
        let to = committed.load(Ordering::Acquire);
        if to < next {
            std::thread::yield_now();
            continue;
        }
        for r in JournalReader::open(&dir, next, to).unwrap() {
            let r = r.unwrap();
            assert_eq!(r, expected(next, seed));
            next += 1;
        }
        assert_eq!(next, to + 1);
    }
    writer.join().unwrap();
    assert_std_records(&dir, total, seed);
}

#[test]
fn rolls_when_the_utc_day_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = FaultyStorage::new();
    let day0 = 20_000 * DAY_NS;
    fs.set_clock_ns(Some(day0 + DAY_NS - 1_000_000_000));
    let (mut j, _) = Journal::open_with(fs.clone(), dir, JournalOptions::default()).unwrap();
    append_std(&mut j, 0);
    append_std(&mut j, 0);
    j.commit().unwrap();
    fs.set_clock_ns(Some(day0 + DAY_NS + 1));
    append_std(&mut j, 0);
    j.commit().unwrap();
    drop(j);
    let segs = segments(dir);
    assert_eq!(segs.len(), 2);
    assert!(segs[1].ends_with("journal-00000000000000000003.log"));
    // Reopening the next day: the first append rolls again.
    fs.set_clock_ns(Some(day0 + 2 * DAY_NS + 5));
    let (mut j, _) = Journal::open_with(fs.clone(), dir, JournalOptions::default()).unwrap();
    append_std(&mut j, 0);
    j.commit().unwrap();
    drop(j);
    assert_eq!(segments(dir).len(), 3);
    assert_std_records(dir, 4, 0);
}

#[test]
fn roll_segment_on_demand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    j.roll_segment().unwrap(); // empty: nothing to roll
    assert_eq!(segments(dir).len(), 1);
    append_std(&mut j, 0);
    j.roll_segment().unwrap(); // writes the buffered record, then rolls
    assert_eq!(j.synced_seq(), 1);
    append_std(&mut j, 0);
    j.commit().unwrap();
    drop(j);
    assert_eq!(segments(dir).len(), 2);
    assert_std_records(dir, 2, 0);
}

#[test]
fn group_commit_is_one_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyStorage::new();
    let (mut j, _) = Journal::open_with(fs.clone(), tmp.path(), JournalOptions::default()).unwrap();
    let (syncs, writes) = (fs.count(Op::SyncData), fs.count(Op::Write));
    for _ in 0..1000 {
        append_std(&mut j, 0);
    }
    assert_eq!(fs.count(Op::Write), writes, "append must not write");
    assert!(j.commit().unwrap());
    assert_eq!(fs.count(Op::SyncData) - syncs, 1, "one fsync per commit");
    assert_eq!(
        fs.count(Op::Write) - writes,
        1,
        "one write per commit and segment"
    );
    assert_eq!(j.synced_seq(), 1000);
    // A commit with nothing new does not fsync again.
    assert!(j.commit().unwrap());
    assert_eq!(fs.count(Op::SyncData) - syncs, 1);
}

#[test]
fn interval_policy_syncs_when_due() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyStorage::new();
    let o = opts(1 << 20, FsyncPolicy::IntervalMs(200));
    let (mut j, _) = Journal::open_with(fs.clone(), tmp.path(), o).unwrap();
    assert_eq!(j.sync_due_in(), None);
    let syncs = fs.count(Op::SyncData);
    append_std(&mut j, 0);
    // Right after open the interval has not elapsed: written, not synced.
    assert!(!j.commit().unwrap());
    assert_eq!((j.written_seq(), j.synced_seq()), (1, 0));
    let due = j.sync_due_in().expect("a sync is due");
    assert!(due <= Duration::from_millis(200));
    std::thread::sleep(due);
    assert_eq!(j.sync_due_in(), Some(Duration::ZERO));
    j.sync().unwrap();
    assert_eq!(j.synced_seq(), 1);
    assert_eq!(j.sync_due_in(), None);
    assert_eq!(fs.count(Op::SyncData) - syncs, 1);
    // Once the interval has passed, commit syncs by itself.
    std::thread::sleep(Duration::from_millis(210));
    append_std(&mut j, 0);
    assert!(j.commit().unwrap());
    assert_eq!(j.synced_seq(), 2);
}

#[test]
fn never_policy_does_not_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyStorage::new();
    let (mut j, _) =
        Journal::open_with(fs.clone(), tmp.path(), opts(1 << 20, FsyncPolicy::Never)).unwrap();
    let syncs = fs.count(Op::SyncData);
    for _ in 0..10 {
        append_std(&mut j, 0);
        assert!(!j.commit().unwrap());
    }
    assert_eq!(j.sync_due_in(), None);
    assert_eq!(fs.count(Op::SyncData), syncs);
    assert_eq!((j.written_seq(), j.synced_seq()), (10, 0));
    j.sync().unwrap();
    assert_eq!(j.synced_seq(), 10);
}

#[test]
fn second_writer_is_locked_out() {
    let tmp = tempfile::tempdir().unwrap();
    let (_j, _) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(matches!(err, JournalError::Locked { .. }), "{err}");
    let err = tickdb_journal::repair(tmp.path(), &tmp.path().join("bk")).unwrap_err();
    assert!(matches!(err, JournalError::Locked { .. }), "{err}");
}

#[test]
fn bad_input_is_refused_without_poisoning() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
    let big = vec![0u8; RECORD_PAYLOAD_BYTES_MAX as usize + 1];
    let err = j.append(1, 1, 1, &big).unwrap_err();
    assert!(matches!(err, JournalError::BadInput(_)), "{err}");
    assert!(j.poisoned().is_none());
    assert_eq!(append_std(&mut j, 0), 1);
    assert!(j.commit().unwrap());
    let err = Journal::open(&tmp.path().join("x"), opts(10, FsyncPolicy::Always)).unwrap_err();
    assert!(matches!(err, JournalError::BadInput(_)), "{err}");
}

/// A bound past what was written, with an empty segment at the end (just
/// rolled to), is an error naming where the journal ends. It used to send
/// the reader round the empty segment forever.
#[test]
fn a_bound_past_an_empty_tail_segment_is_an_error_not_a_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    for _ in 0..10 {
        append_std(&mut j, 0);
    }
    j.roll_segment().unwrap();
    assert_eq!(segments(dir).len(), 2);
    for from in [1, 11] {
        let items: Vec<_> = JournalReader::open(dir, from, 11).unwrap().collect();
        let e = items.last().unwrap().as_ref().unwrap_err();
        assert!(
            e.to_string()
                .contains("journal ends at seq 10 but seq 11 was given"),
            "{e}"
        );
        let mut raw = tickdb_journal::RawReader::open(dir, from, 11).unwrap();
        let e = raw.find_map(|r| r.err()).unwrap();
        assert!(e.to_string().contains("journal ends at seq 10"), "{e}");
    }
}
