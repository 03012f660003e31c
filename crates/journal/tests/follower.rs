//! A follower's journal: `append_raw` of shipped records, `roll_segment_at`
//! where the primary rolled, `RollPolicy::Manual`, and `first_seq` for a
//! journal that starts later. The model test ships a randomly written
//! primary to a follower that crashes and resumes, and checks that the two
//! journals end byte-identical, file by file.

mod common;

use std::path::Path;

use common::*;
use rand::Rng;
use tickdb_journal::format::{encode_record, DAY_NS};
use tickdb_journal::{
    compare, trim, verify, Coverage, FaultyStorage, FsStorage, FsyncPolicy, Journal, JournalError,
    JournalOptions, JournalReader, Op, RawReader, RecoveryMode, RollPolicy, SegmentHeader,
    SEGMENT_BYTES_MIN,
};

fn follower_opts(fsync: FsyncPolicy, first_seq: Option<u64>) -> JournalOptions {
    JournalOptions {
        // Tiny on purpose: a follower must not roll by size on its own.
        segment_bytes_max: SEGMENT_BYTES_MIN,
        fsync,
        recovery: RecoveryMode::Strict,
        roll: RollPolicy::Manual,
        first_seq,
    }
}

fn record(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_record(&mut v, seq, 1, 2, 3, payload);
    v
}

/// Ships every record the primary wrote from the follower's next seq on.
fn ship_all(primary: &Path, upto: u64, f: &mut Journal) {
    let r = RawReader::open(primary, f.last_seq() + 1, upto).unwrap();
    for rec in r {
        let rec = rec.unwrap();
        if let Some(h) = rec.meta.segment_start {
            f.roll_segment_at(h.first_seq, h.created_unix_ns).unwrap();
        }
        assert_eq!(f.append_raw(&rec.bytes).unwrap(), rec.meta.seq);
    }
    f.commit().unwrap();
}

#[test]
fn append_raw_refuses_bad_input_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut j, _) = Journal::open(dir, follower_opts(FsyncPolicy::Always, None)).unwrap();
    assert_eq!(j.append_raw(&record(1, b"one")).unwrap(), 1);
    // Ahead and behind: OutOfSequence, naming both positions.
    for seq in [3, 1, 0] {
        let e = j.append_raw(&record(seq, b"x")).unwrap_err();
        match &e {
            JournalError::OutOfSequence {
                expected, found, ..
            } => assert_eq!((*expected, *found), (2, seq)),
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("seq {seq}")) && msg.contains("next seq is 2"),
            "{msg}"
        );
        assert!(e.is_bad_input() && !e.is_corruption());
    }
    let good = record(2, b"two");
    let mut bad_crc = good.clone();
    bad_crc[33] ^= 1;
    // The epoch bytes are under the CRC.
    let mut epoch_flipped = good.clone();
    epoch_flipped[30] = 1;
    let mut too_long = good.clone();
    too_long[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut trailing = good.clone();
    trailing.push(0);
    for (what, bytes, needle) in [
        ("crc", &bad_crc[..], "CRC32C mismatch"),
        ("epoch flipped", &epoch_flipped[..], "CRC32C mismatch"),
        ("too long", &too_long[..], "above the bound"),
        ("short", &good[..good.len() - 1], "incomplete"),
        ("header only", &good[..20], "incomplete"),
        ("empty", &[][..], "incomplete"),
        ("trailing", &trailing[..], "its header says"),
    ] {
        match j.append_raw(bytes) {
            Err(e @ JournalError::BadInput(_)) => {
                assert!(e.to_string().contains(needle), "{what}: {e}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // Nothing was buffered by the refusals, and the journal is not poisoned.
    assert!(j.poisoned().is_none());
    assert_eq!(j.last_seq(), 1);
    assert_eq!(j.append_raw(&good).unwrap(), 2);
    assert!(j.commit().unwrap());
    drop(j);
    // The journal holds the shipped bytes exactly.
    let seg = std::fs::read(segments(dir)[0].clone()).unwrap();
    assert_eq!(&seg[32..], &[record(1, b"one"), good].concat()[..]);
}

#[test]
fn append_raw_returns_before_any_write_and_commit_makes_it_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyStorage::new();
    let (mut j, _) = Journal::open_with(
        fs.clone(),
        tmp.path(),
        follower_opts(FsyncPolicy::Always, None),
    )
    .unwrap();
    let (writes, syncs) = (fs.count(Op::Write), fs.count(Op::SyncData));
    for seq in 1..=100 {
        j.append_raw(&record(seq, &[seq as u8; 10])).unwrap();
    }
    assert_eq!(fs.count(Op::Write), writes, "append_raw must not write");
    assert_eq!(j.written_seq(), 0);
    assert!(j.commit().unwrap());
    assert_eq!(fs.count(Op::Write) - writes, 1, "one write per commit");
    assert_eq!(fs.count(Op::SyncData) - syncs, 1, "one fsync per commit");
    assert_eq!(j.synced_seq(), 100);
}

#[test]
fn roll_segment_at_rolls_where_told_with_the_given_header() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = FaultyStorage::new();
    fs.set_clock_ns(Some(1_000));
    let (mut j, _) =
        Journal::open_with(fs.clone(), dir, follower_opts(FsyncPolicy::Always, None)).unwrap();
    // The empty first segment takes the primary's creation time, in place.
    j.roll_segment_at(1, 777).unwrap();
    assert_eq!(
        j.segment_header(),
        SegmentHeader {
            first_seq: 1,
            created_unix_ns: 777
        }
    );
    assert_eq!(segments(dir).len(), 1);
    // Same header again: nothing to do, no fsync.
    let syncs = fs.count(Op::SyncData);
    j.roll_segment_at(1, 777).unwrap();
    assert_eq!(fs.count(Op::SyncData), syncs);
    for seq in 1..=3 {
        j.append_raw(&record(seq, b"abc")).unwrap();
    }
    // A segment start that does not continue the journal is refused.
    for at in [3, 5] {
        match j.roll_segment_at(at, 888) {
            Err(JournalError::OutOfSequence {
                expected, found, ..
            }) => assert_eq!((expected, found), (4, at)),
            other => panic!("{other:?}"),
        }
    }
    // Buffered records are written first, the closing segment and the new
    // header and the directory are synced before it returns.
    let (syncs, dirsyncs) = (fs.count(Op::SyncData), fs.count(Op::SyncDir));
    j.roll_segment_at(4, 888).unwrap();
    assert_eq!(j.written_seq(), 3);
    assert_eq!(j.synced_seq(), 3);
    assert_eq!(fs.count(Op::SyncData) - syncs, 2);
    assert_eq!(fs.count(Op::SyncDir) - dirsyncs, 1);
    assert_eq!(j.segment_header().created_unix_ns, 888);
    j.append_raw(&record(4, b"d")).unwrap();
    j.commit().unwrap();
    drop(j);
    let segs = segments(dir);
    assert_eq!(segs.len(), 2);
    assert!(segs[1].ends_with("journal-00000000000000000004.log"));
    let b = std::fs::read(&segs[1]).unwrap();
    let want = SegmentHeader {
        first_seq: 4,
        created_unix_ns: 888,
    }
    .encode();
    assert_eq!(&b[..32], &want[..]);
    let v = verify(dir).unwrap();
    assert!(v.is_clean() && v.last_seq == 4, "{v}");
}

#[test]
fn manual_roll_policy_never_rolls_by_size_or_day() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = FaultyStorage::new();
    let day0 = 20_000 * DAY_NS;
    fs.set_clock_ns(Some(day0 + DAY_NS - 1));
    let (mut j, _) =
        Journal::open_with(fs.clone(), dir, follower_opts(FsyncPolicy::Never, None)).unwrap();
    for _ in 0..50 {
        append_std(&mut j, 0);
    }
    j.commit().unwrap();
    fs.set_clock_ns(Some(day0 + 3 * DAY_NS));
    for _ in 0..50 {
        append_std(&mut j, 0);
    }
    j.commit().unwrap();
    assert_eq!(segments(dir).len(), 1);
    // An explicit roll still rolls.
    j.roll_segment().unwrap();
    append_std(&mut j, 0);
    j.close().unwrap();
    assert_eq!(segments(dir).len(), 2);
    assert_std_records(dir, 101, 0);
}

#[test]
fn first_seq_starts_a_new_journal_later() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let s = 1_000_001u64;
    let o = JournalOptions {
        first_seq: Some(s),
        ..opts(2000, FsyncPolicy::Always)
    };
    let (j, rep) = Journal::open(&dir, o.clone()).unwrap();
    assert_eq!((j.last_seq(), rep.last_seq), (s - 1, s - 1));
    assert!(j.segment_path().ends_with(format!("journal-{s:020}.log")));
    assert_eq!(segments(&dir).len(), 1);
    // Reopened before any record: still at S (the option is checked, not reapplied).
    drop(j);
    let (mut j, rep) = Journal::open(&dir, o.clone()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(j.last_seq(), s - 1);
    for _ in 0..300 {
        append_std(&mut j, 4);
    }
    j.commit().unwrap();
    drop(j);
    assert!(segments(&dir).len() > 3);
    // Recovery, verify and readers take a journal whose first segment is above 1.
    let (j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!((rep.first_seq, rep.last_seq), (s, s + 299));
    assert_eq!(j.last_seq(), s + 299);
    drop(j);
    let v = verify(&dir).unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.first_seq, v.last_seq, v.records), (s, s + 299, 300));
    let recs: Vec<_> = JournalReader::open(&dir, s, s + 299)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(*r, expected(s + i as u64, 4));
    }
    match JournalReader::open(&dir, 1, s) {
        Err(JournalError::MissingSegment {
            expected, found, ..
        }) => assert_eq!((expected, found), (1, s)),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A torn tail in such a journal is truncated like any other.
    let last = segments(&dir).pop().unwrap();
    let mut b = std::fs::read(&last).unwrap();
    let cut = b.len() - 5;
    b.truncate(cut);
    std::fs::write(&last, &b).unwrap();
    let (mut j, rep) = Journal::open(&dir, o.clone()).unwrap();
    assert!(rep.truncated.is_some(), "{rep}");
    assert_eq!(j.last_seq(), s + 298);
    append_std(&mut j, 4);
    j.commit().unwrap();
    drop(j);
    // Trimmed too: it recovers from its first kept segment.
    let t = trim(&FsStorage, &dir, s + 150).unwrap();
    assert!(t.first_seq_kept > s);
    let (j, rep) = Journal::open(&dir, o).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!((rep.first_seq, j.last_seq()), (t.first_seq_kept, s + 299));
}

#[test]
fn first_seq_refuses_what_would_leave_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(1 << 20, FsyncPolicy::Never), 10, 10, 0);
    let with = |s| JournalOptions {
        first_seq: Some(s),
        ..JournalOptions::default()
    };
    // The journal continues at 11: a standby asking for 11 or below opens it.
    for s in [1, 5, 11] {
        let (j, _) = Journal::open(dir, with(s)).unwrap();
        assert_eq!(j.last_seq(), 10);
    }
    // Beyond that, records 11..S-1 would be missing.
    let before = snapshot(dir);
    match Journal::open(dir, with(12)) {
        Err(e @ JournalError::BadInput(_)) => {
            let m = e.to_string();
            assert!(
                m.contains("first_seq 12") && m.contains("continues at seq 11"),
                "{m}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(snapshot(dir), before);
    assert!(matches!(
        Journal::open(dir, with(0)),
        Err(JournalError::BadInput(_))
    ));
}

/// The model test: a primary written at random (appends, commits, size and
/// day rolls, rolls on demand), a follower (maybe bootstrapped at a later
/// segment start) fed through a raw reader in random steps, crashing now and
/// then (buffered records lost, or a power loss), resuming from its own last
/// seq. At the end both journals hold the same segment files, byte for byte.
#[test]
fn follower_is_byte_identical_to_its_primary() {
    let seed = seed("follower_is_byte_identical_to_its_primary");
    let mut rng = rng(seed);
    for round in 0..6 {
        let tmp = tempfile::tempdir().unwrap();
        let (pdir, fdir) = (tmp.path().join("primary"), tmp.path().join("follower"));
        let pclock = FaultyStorage::new();
        let day0 = 20_000 * DAY_NS;
        let mut now = day0 + DAY_NS - 2_000_000_000;
        pclock.set_clock_ns(Some(now));
        let popts = opts(rng.random_range(300..3000), FsyncPolicy::Never);
        let (mut p, _) = Journal::open_with(pclock.clone(), &pdir, popts).unwrap();
        let fstore = FaultyStorage::new();
        // The follower's own clock is elsewhere: its headers must come from the primary.
        fstore.set_clock_ns(Some(day0 - 12_345));
        let fsync = if rng.random_bool(0.5) {
            FsyncPolicy::Always
        } else {
            FsyncPolicy::IntervalMs(rng.random_range(0..3))
        };
        let mut follower: Option<(Journal, RawReader)> = None;
        let mut fopts = follower_opts(fsync, None);
        let mut bootstrap = 1;
        let steps = rng.random_range(200..600);
        for _ in 0..steps {
            match rng.random_range(0..100) {
                0..50 => {
                    for _ in 0..rng.random_range(1..8) {
                        append_std(&mut p, seed);
                    }
                    p.commit().unwrap();
                }
                50..53 => p.roll_segment().unwrap(),
                53..56 => {
                    now += rng.random_range(0..DAY_NS / 2);
                    pclock.set_clock_ns(Some(now));
                }
                _ => {}
            }
            let written = p.written_seq();
            // Start the follower: at seq 1, or from a checkpoint at a segment start.
            if follower.is_none() && rng.random_range(0..40) == 0 {
                let h = p.segment_header();
                if rng.random_bool(0.5) && h.first_seq > 1 && h.first_seq <= written + 1 {
                    bootstrap = h.first_seq;
                }
                fopts.first_seq = (bootstrap > 1).then_some(bootstrap);
                let (f, _) = Journal::open_with(fstore.clone(), &fdir, fopts.clone()).unwrap();
                let r = RawReader::open(&pdir, f.last_seq() + 1, written).unwrap();
                follower = Some((f, r));
            }
            let Some((f, r)) = follower.as_mut() else {
                continue;
            };
            r.extend_to(written);
            let mut buf = Vec::new();
            for _ in 0..rng.random_range(0..30) {
                let Some(m) = r.read_into(&mut buf).unwrap() else {
                    break;
                };
                if let Some(h) = m.segment_start {
                    f.roll_segment_at(h.first_seq, h.created_unix_ns).unwrap();
                }
                assert_eq!(f.append_raw(&buf).unwrap(), m.seq);
            }
            match rng.random_range(0..100) {
                0..40 => {
                    f.commit().unwrap();
                }
                40..42 => {
                    // Crash: what was not committed is gone; maybe power too.
                    drop(follower.take());
                    if rng.random_bool(0.5) {
                        fstore.power_loss(rng.random()).unwrap();
                    }
                    let (f, rep) =
                        Journal::open_with(fstore.clone(), &fdir, fopts.clone()).unwrap();
                    assert!(rep.dropped.is_empty(), "round {round}: {rep}");
                    let r = RawReader::open(&pdir, f.last_seq() + 1, written).unwrap();
                    follower = Some((f, r));
                }
                _ => {}
            }
        }
        // The primary ends on a record (a segment it rolled to on demand and
        // left empty has no record to ship yet).
        append_std(&mut p, seed);
        p.commit().unwrap();
        let written = p.written_seq();
        drop(p);
        let mut f = match follower {
            Some((f, _)) => f,
            None => {
                Journal::open_with(fstore.clone(), &fdir, fopts.clone())
                    .unwrap()
                    .0
            }
        };
        ship_all(&pdir, written, &mut f);
        drop(f);
        let ps: Vec<_> = snapshot(&pdir)
            .into_iter()
            .filter(|(name, _)| name.as_str() >= format!("journal-{bootstrap:020}.log").as_str())
            .collect();
        let fs = snapshot(&fdir);
        assert_eq!(
            ps.iter().map(|s| &s.0).collect::<Vec<_>>(),
            fs.iter().map(|s| &s.0).collect::<Vec<_>>(),
            "round {round}: segment names"
        );
        assert!(ps == fs, "round {round}: segment bytes differ");
        let rep = compare(&pdir, &fdir).unwrap();
        assert!(rep.is_match(), "round {round}:\n{rep}");
        if bootstrap == 1 {
            assert!(rep.is_identical(), "round {round}:\n{rep}");
        } else {
            assert_eq!(rep.coverage, Coverage::Overlap, "round {round}:\n{rep}");
        }
        eprintln!(
            "round {round}: {} segment(s), seq {bootstrap}..={written} shipped",
            fs.len()
        );
    }
}

#[test]
fn shipped_epochs_are_recorded_and_older_ones_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    let rec = |epoch: u32, seq: u64| {
        let mut v = Vec::new();
        tickdb_journal::format::encode_record_in(&mut v, epoch, seq, 1, 2, 3, b"p");
        v
    };
    j.append_raw(&rec(0, 1)).unwrap();
    j.append_raw(&rec(2, 2)).unwrap();
    j.append_raw(&rec(2, 3)).unwrap();
    let e = j.append_raw(&rec(1, 4)).unwrap_err().to_string();
    assert!(e.contains("epoch 1") && e.contains("epoch 2"), "{e}");
    j.append_raw(&rec(5, 4)).unwrap();
    j.commit().unwrap();
    assert_eq!(j.epoch(), 5);
    drop(j);
    // The history survives a restart, and every record reads back with its epoch.
    let (j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    assert_eq!(
        j.epoch_history().to_string(),
        "[epoch 2 from seq 2, epoch 5 from seq 4]"
    );
    drop(j);
    let epochs: Vec<u32> = tickdb_journal::JournalReader::open(dir, 1, 4)
        .unwrap()
        .map(|r| r.unwrap().epoch)
        .collect();
    assert_eq!(epochs, vec![0, 2, 2, 5]);
}
