//! Recovery at open, verify and repair: torn tails, corruption, gaps,
//! crashes during recovery.

mod common;

use std::path::Path;

use common::*;
use tickdb_journal::format::{encode_record, SegmentHeader};
use tickdb_journal::{
    plan_repair, repair, verify, Fault, FaultyStorage, FsyncPolicy, Journal, JournalError,
    JournalOptions, Op, RecoveryMode,
};

fn pit() -> JournalOptions {
    JournalOptions {
        recovery: RecoveryMode::PointInTime,
        ..JournalOptions::default()
    }
}

fn set_file(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

/// Cuts the last record at every byte offset, pads with nothing, zeros or
/// garbage, and checks that recovery truncates to the previous record and
/// that the journal then takes and keeps new records.
#[test]
fn torn_tail_at_every_offset() {
    let seed = seed("torn_tail_at_every_offset");
    let mut rng = rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let n = 5;
    write_records(&base, JournalOptions::default(), n, 1, 0);
    let seg = segments(&base).pop().unwrap();
    let name = seg.file_name().unwrap().to_owned();
    let full = std::fs::read(&seg).unwrap();
    let last_start = *record_offsets(&seg).last().unwrap() as usize;
    let mut cases = 0;
    for cut in last_start..full.len() {
        for pad in 0..3 {
            let mut bytes = full[..cut].to_vec();
            match pad {
                1 => bytes.extend(vec![0u8; 1 + cut % 70]),
                2 => {
                    let mut g = garbage(&mut rng, 1 + (cut * 7) % 90);
                    // Garbage that happens to repeat the byte it replaces
                    // (1 in 256 at the last byte) would complete the record,
                    // which is then rightly kept: the case wants a torn one.
                    if full.get(cut) == g.first() {
                        g[0] ^= 0xff;
                    }
                    bytes.extend(g)
                }
                _ => {}
            }
            let dir = tmp.path().join(format!("c{cut}-{pad}"));
            std::fs::create_dir_all(&dir).unwrap();
            set_file(&dir.join(&name), &bytes);
            let (mut j, rep) = Journal::open(&dir, JournalOptions::default())
                .unwrap_or_else(|e| panic!("cut {cut} pad {pad}: {e}"));
            let dropped = (bytes.len() - last_start) as u64;
            if dropped == 0 {
                assert!(rep.is_clean(), "{rep}");
            } else {
                assert_eq!(
                    rep.truncated,
                    Some((dir.join(&name), last_start as u64, dropped)),
                    "cut {cut} pad {pad}: {rep}"
                );
                assert!(rep.dropped.is_empty());
                assert!(rep.to_string().contains("Truncated"), "{rep}");
            }
            assert_eq!(j.last_seq(), n - 1);
            assert_eq!(
                std::fs::metadata(dir.join(&name)).unwrap().len(),
                last_start as u64
            );
            append_std(&mut j, 0);
            assert!(j.commit().unwrap());
            drop(j);
            let (_j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
            assert!(rep.is_clean(), "{rep}");
            drop(_j);
            assert_std_records(&dir, n, 0);
            std::fs::remove_dir_all(&dir).unwrap();
            cases += 1;
        }
    }
    assert!(cases > 100);
}

/// A segment whose header was torn while being created (a crash right after
/// the roll) is rewritten, at every cut of the header.
#[test]
fn torn_segment_header_is_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let (mut j, _) = Journal::open(&base, JournalOptions::default()).unwrap();
    for _ in 0..3 {
        append_std(&mut j, 0);
    }
    j.roll_segment().unwrap();
    drop(j);
    let segs = segments(&base);
    assert_eq!(segs.len(), 2);
    let header = std::fs::read(&segs[1]).unwrap();
    for cut in 0..=32 {
        for zeros in [false, true] {
            let dir = tmp.path().join(format!("h{cut}-{zeros}"));
            copy_dir(&base, &dir);
            let second = dir.join(segs[1].file_name().unwrap());
            let bytes = if zeros {
                vec![0u8; 32]
            } else {
                header[..cut].to_vec()
            };
            if zeros && cut > 0 {
                continue;
            }
            set_file(&second, &bytes);
            let (mut j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
            if cut == 32 && !zeros {
                assert!(rep.is_clean(), "{rep}");
            } else {
                assert_eq!(rep.truncated.as_ref().map(|t| t.1), Some(0), "{rep}");
            }
            assert_eq!(j.last_seq(), 3);
            append_std(&mut j, 0);
            j.commit().unwrap();
            drop(j);
            assert_eq!(segments(&dir).len(), 2);
            assert_std_records(&dir, 4, 0);
        }
    }
}

/// Writes 3 segments of 10 records each and returns their paths.
fn three_segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    for s in 0..3 {
        for _ in 0..10 {
            append_std(&mut j, 0);
        }
        j.commit().unwrap();
        if s < 2 {
            j.roll_segment().unwrap();
        }
    }
    drop(j);
    let segs = segments(dir);
    assert_eq!(segs.len(), 3);
    segs
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 1 << bit;
    set_file(path, &b);
}

#[test]
fn bit_flip_in_a_middle_record() {
    let seed = seed("bit_flip_in_a_middle_record");
    let tmp = tempfile::tempdir().unwrap();
    // Flip each field of record 5 (of 10) in turn: length, crc, seq, payload.
    for (k, field_off) in [0u64, 4, 8, 20, 29, 33].into_iter().enumerate() {
        let dir = tmp.path().join(format!("f{k}"));
        write_records(&dir, JournalOptions::default(), 10, 10, seed);
        let seg = segments(&dir).pop().unwrap();
        let off = record_offsets(&seg)[4];
        if field_off == 33 && expected(5, seed).payload.len() < 2 {
            continue;
        }
        flip_bit(&seg, off + field_off, (seed % 8) as u8);
        let before = snapshot(&dir);
        let err = Journal::open(&dir, JournalOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(err.is_corruption(), "{msg}");
        assert!(msg.contains(&seg.display().to_string()), "{msg}");
        assert!(msg.contains(&format!("offset {off}")), "{msg}");
        assert_eq!(snapshot(&dir), before, "strict refusal changes nothing");

        let (mut j, rep) = Journal::open(&dir, pit()).unwrap();
        assert_eq!(j.last_seq(), 4, "{rep}");
        assert_eq!(rep.dropped.len(), 1, "{rep}");
        let d = &rep.dropped[0];
        assert_eq!((d.file.as_path(), d.offset), (seg.as_path(), off));
        let saved = std::fs::read(d.saved_to.as_ref().unwrap()).unwrap();
        assert_eq!(saved, before[0].1[off as usize..], "the cut bytes are kept");
        assert!(rep.to_string().contains("Dropped"), "{rep}");
        append_std(&mut j, seed);
        j.commit().unwrap();
        drop(j);
        let (_j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
        assert!(rep.is_clean(), "{rep}");
        drop(_j);
        assert_std_records(&dir, 5, seed);
    }
}

#[test]
fn corruption_in_an_early_segment_moves_later_segments_away() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let segs = three_segments(dir);
    let off = record_offsets(&segs[0])[9]; // the last record of segment 1
    flip_bit(&segs[0], off + 40, 3);
    let err = Journal::open(dir, JournalOptions::default()).unwrap_err();
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("follows"), "{err}");

    let (j, rep) = Journal::open(dir, pit()).unwrap();
    assert_eq!(j.last_seq(), 9);
    drop(j);
    assert_eq!(rep.dropped.len(), 3, "{rep}");
    assert_eq!(segments(dir), vec![segs[0].clone()]);
    for d in &rep.dropped[1..] {
        let to = d.saved_to.as_ref().unwrap();
        assert!(to
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("dropped-"));
        assert_eq!(std::fs::metadata(to).unwrap().len(), d.bytes);
    }
    assert_std_records(dir, 9, 0);
}

#[test]
fn missing_middle_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let segs = three_segments(dir);
    std::fs::remove_file(&segs[1]).unwrap();
    let err = Journal::open(dir, JournalOptions::default()).unwrap_err();
    match &err {
        JournalError::MissingSegment {
            file,
            expected,
            found,
        } => {
            assert_eq!((file, *expected, *found), (&segs[2], 11, 21));
        }
        e => panic!("{e}"),
    }
    let v = verify(dir).unwrap();
    assert_eq!(v.problems.len(), 1, "{v}");
    assert_eq!(v.records, 20);

    let (j, rep) = Journal::open(dir, pit()).unwrap();
    assert_eq!(j.last_seq(), 10, "{rep}");
    drop(j);
    assert_eq!(rep.dropped.len(), 1);
    assert_eq!(segments(dir), vec![segs[0].clone()]);
}

#[test]
fn segment_cut_at_a_record_boundary_is_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let segs = three_segments(dir);
    // Cut segment 2 after its 7th record: records 18..20 vanish cleanly.
    let off = record_offsets(&segs[1])[7];
    let b = std::fs::read(&segs[1]).unwrap();
    set_file(&segs[1], &b[..off as usize]);
    let err = Journal::open(dir, JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::MissingSegment {
                expected: 18,
                found: 21,
                ..
            }
        ),
        "{err}"
    );
    let (j, _) = Journal::open(dir, pit()).unwrap();
    assert_eq!(j.last_seq(), 17);
}

#[test]
fn sequence_gap_inside_a_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut b = SegmentHeader {
        first_seq: 1,
        created_unix_ns: 0,
    }
    .encode()
    .to_vec();
    for seq in [1u64, 2, 4, 5] {
        encode_record(&mut b, seq, 1, 1, seq as i64, b"x");
    }
    set_file(&dir.join("journal-00000000000000000001.log"), &b);
    let err = Journal::open(dir, JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Gap {
                expected: 3,
                found: 4,
                offset: 98,
                ..
            }
        ),
        "{err}"
    );
    let v = verify(dir).unwrap();
    assert_eq!((v.records, v.problems.len()), (4, 1), "{v}");
    let (j, _) = Journal::open(dir, pit()).unwrap();
    assert_eq!(j.last_seq(), 2);
}

#[test]
fn newer_format_version_is_never_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, JournalOptions::default(), 3, 3, 0);
    let seg = segments(dir).pop().unwrap();
    let mut b = std::fs::read(&seg).unwrap();
    b[8] = 3;
    set_file(&seg, &b);
    for o in [JournalOptions::default(), pit()] {
        let err = Journal::open(dir, o).unwrap_err();
        assert!(
            matches!(err, JournalError::UnsupportedVersion { version: 3, .. }),
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&seg).unwrap(), b);
}

/// Recovery interrupted at each step (a failed truncate, a failed fsync after
/// it, a failed header rewrite, a failed move), then run again, ends in the
/// same state as recovery run once.
#[test]
fn crash_during_recovery_then_recover_again() {
    let tmp = tempfile::tempdir().unwrap();
    // A torn tail, and a torn segment header.
    let torn = tmp.path().join("torn");
    write_records(&torn, JournalOptions::default(), 8, 8, 0);
    let seg = segments(&torn).pop().unwrap();
    let mut b = std::fs::read(&seg).unwrap();
    b.truncate(b.len() - 5);
    b.extend([0xEE; 20]);
    set_file(&seg, &b);
    let header_torn = tmp.path().join("header");
    write_records(&header_torn, JournalOptions::default(), 8, 8, 0);
    set_file(
        &header_torn.join("journal-00000000000000000009.log"),
        b"TICKJ",
    );
    // Corruption followed by valid segments, for point-in-time recovery.
    let corrupt = tmp.path().join("corrupt");
    let segs = three_segments(&corrupt);
    flip_bit(&segs[0], record_offsets(&segs[0])[3] + 8, 0);

    let cases: Vec<(&Path, JournalOptions, Op, u64)> = vec![
        (&torn, JournalOptions::default(), Op::SetLen, 0),
        (&torn, JournalOptions::default(), Op::SyncData, 0),
        (&header_torn, JournalOptions::default(), Op::SetLen, 0),
        (&header_torn, JournalOptions::default(), Op::Write, 0),
        (&header_torn, JournalOptions::default(), Op::SyncData, 0),
        (&corrupt, pit(), Op::Rename, 0),
        (&corrupt, pit(), Op::Rename, 1),
        (&corrupt, pit(), Op::SyncDir, 0),
        (&corrupt, pit(), Op::Create, 0),
        (&corrupt, pit(), Op::SetLen, 0),
        (&corrupt, pit(), Op::SyncData, 1),
    ];
    for (k, (src, o, op, after)) in cases.into_iter().enumerate() {
        // Reference: recovery run once, without faults.
        // Pin the clock: a rewritten header carries the time of the rewrite.
        let clock = FaultyStorage::new();
        clock.set_clock_ns(Some(1_700_000_000_000_000_000));
        let once = tmp.path().join(format!("once{k}"));
        copy_dir(src, &once);
        let (j, _) = Journal::open_with(clock.clone(), &once, o.clone()).unwrap();
        drop(j);
        // Interrupted, then run again.
        let twice = tmp.path().join(format!("twice{k}"));
        copy_dir(src, &twice);
        let fs = FaultyStorage::new();
        fs.set_clock_ns(Some(1_700_000_000_000_000_000));
        fs.inject(op, after, Fault::Eio);
        let err = Journal::open_with(fs.clone(), &twice, o.clone());
        assert!(err.is_err(), "case {k}: {op:?} fault did not fire");
        assert!(matches!(err.unwrap_err(), JournalError::Io { .. }));
        let (j, rep) = Journal::open_with(clock.clone(), &twice, o.clone()).unwrap();
        drop(j);
        assert_eq!(
            snapshot(&twice),
            snapshot(&once),
            "case {k} ({op:?} after {after}): {rep}"
        );
        assert_eq!(read_all(&twice), read_all(&once));
        // And a third open finds nothing to do.
        let (_j, rep) = Journal::open(&twice, JournalOptions::default()).unwrap();
        assert!(rep.is_clean(), "{rep}");
    }
}

#[test]
fn verify_reports_every_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let segs = three_segments(dir);
    let v = verify(dir).unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!(
        (v.records, v.first_seq, v.last_seq, v.segments.len()),
        (30, 1, 30, 3)
    );
    assert_eq!(
        v.rows,
        (1..=30).map(|s| expected(s, 0).rows as u64).sum::<u64>()
    );
    assert_eq!(v.first_time_ns, Some(expected(1, 0).time_ns));
    assert_eq!(v.last_time_ns, Some(expected(30, 0).time_ns));
    let bytes: u64 = segs
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    assert_eq!(v.bytes, bytes);

    let off1 = record_offsets(&segs[0])[2];
    flip_bit(&segs[0], off1 + 12, 1);
    let off2 = record_offsets(&segs[1])[9];
    let mut b = std::fs::read(&segs[1]).unwrap();
    b.truncate(off2 as usize + 10);
    set_file(&segs[1], &b);
    let v = verify(dir).unwrap();
    assert_eq!(v.problems.len(), 3, "{v}");
    assert_eq!(
        (v.problems[0].file.as_path(), v.problems[0].offset),
        (segs[0].as_path(), off1)
    );
    assert_eq!(
        (v.problems[1].file.as_path(), v.problems[1].offset),
        (segs[1].as_path(), off2)
    );
    assert!(v.problems[1].what.contains("torn tail"), "{v}");
    assert_eq!(v.problems[2].file, segs[2]);
    assert_eq!(v.records, 28);
    assert!(v.to_string().contains("problems: 3"));
}

#[test]
fn repair_cuts_back_and_keeps_a_backup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let segs = three_segments(&dir);
    let backup = tmp.path().join("backup");
    let clean = plan_repair(&dir, &backup).unwrap();
    assert!(!clean.needed(), "{clean}");
    let r = repair(&dir, &backup).unwrap();
    assert!(!r.needed() && r.dropped.is_empty());
    assert!(!backup.exists(), "nothing to back up");

    let off = record_offsets(&segs[1])[4];
    flip_bit(&segs[1], off + 33, 5);
    let before = snapshot(&dir);
    let plan = plan_repair(&dir, &backup).unwrap();
    assert!(plan.needed() && !plan.applied);
    assert_eq!((plan.records, plan.last_seq), (14, 14));
    assert_eq!(plan.dropped.len(), 2, "{plan}");
    assert_eq!(snapshot(&dir), before, "planning changes nothing");

    let r = repair(&dir, &backup).unwrap();
    assert!(r.applied);
    assert_eq!((r.records, r.last_seq), (14, 14), "{r}");
    assert_eq!(r.dropped.len(), 2, "{r}");
    let cut = std::fs::read(r.dropped[0].saved_to.as_ref().unwrap()).unwrap();
    assert_eq!(cut, before[1].1[off as usize..]);
    let moved = std::fs::read(r.dropped[1].saved_to.as_ref().unwrap()).unwrap();
    assert_eq!(moved, before[2].1);
    assert!(r
        .dropped
        .iter()
        .all(|d| d.saved_to.as_ref().unwrap().starts_with(&backup)));
    assert!(verify(&dir).unwrap().is_clean());
    assert_std_records(&dir, 14, 0);
    let (j, rep) = Journal::open(&dir, JournalOptions::default()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(j.last_seq(), 14);
}

#[test]
fn recovery_never_skips_silently_under_interval_policy() {
    // A journal written under IntervalMs with garbage in the middle of the
    // last segment: strict refuses, point-in-time reports.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, super_opts(), 20, 3, 1);
    let seg = segments(dir).pop().unwrap();
    let off = record_offsets(&seg)[10];
    let mut b = std::fs::read(&seg).unwrap();
    for x in &mut b[off as usize..off as usize + 40] {
        *x = 0;
    }
    set_file(&seg, &b);
    assert!(Journal::open(dir, super_opts())
        .unwrap_err()
        .is_corruption());
    let (j, rep) = Journal::open(
        dir,
        JournalOptions {
            recovery: RecoveryMode::PointInTime,
            ..super_opts()
        },
    )
    .unwrap();
    assert_eq!(j.last_seq(), 10);
    assert!(!rep.dropped.is_empty() && rep.problem.is_some(), "{rep}");
}

fn super_opts() -> JournalOptions {
    opts(1 << 20, FsyncPolicy::IntervalMs(5))
}

/// Checked-in fixtures written by an independent implementation of the
/// documented format (a Python script following docs/journal.md): version 1
/// must keep reading exactly like this.
#[test]
fn checked_in_v1_fixtures() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let tmp = tempfile::tempdir().unwrap();
    let want: Vec<_> = (1..=3u64)
        .map(|seq| tickdb_journal::Record {
            seq,
            kind: 1,
            rows: seq as u32 * 10,
            time_ns: 1_583_712_000_000_000_000 + seq as i64,
            epoch: 0,
            payload: format!("payload {seq}").into_bytes(),
        })
        .collect();
    // Clean: reads back, and this build writes the same bytes but for the
    // version (2 now: epoch 0 records are byte for byte as in version 1).
    let v1 = fixtures.join("v1");
    assert!(verify(&v1).unwrap().is_clean());
    assert_eq!(read_all(&v1), want);
    let mut bytes = SegmentHeader {
        first_seq: 1,
        created_unix_ns: 1_583_712_000_000_000_000,
    }
    .encode()
    .to_vec();
    for r in &want {
        encode_record(&mut bytes, r.seq, r.kind, r.rows, r.time_ns, &r.payload);
    }
    assert_eq!(bytes[8..12], 2u32.to_le_bytes());
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(
        bytes,
        std::fs::read(v1.join("journal-00000000000000000001.log")).unwrap()
    );
    // Torn: the last record is cut and zero-padded.
    let torn = tmp.path().join("torn");
    copy_dir(&fixtures.join("v1-torn"), &torn);
    let (j, rep) = Journal::open(&torn, JournalOptions::default()).unwrap();
    assert_eq!(j.last_seq(), 2);
    assert_eq!(rep.truncated.as_ref().map(|t| t.1), Some(32 + 41 + 41));
    drop(j);
    assert_eq!(read_all(&torn), want[..2]);
    // Bit flip in record 2 with record 3 valid after it: strict refuses.
    let flip = tmp.path().join("flip");
    copy_dir(&fixtures.join("v1-bitflip"), &flip);
    let err = Journal::open(&flip, JournalOptions::default()).unwrap_err();
    assert!(err.to_string().contains("offset 73"), "{err}");
}

/// Sequence numbers at the ends of the u64 range, in records that pass their
/// CRC (a hostile or damaged file, found by fuzzing): verify, recovery and
/// the readers answer with reports or errors, never an overflow panic.
#[test]
fn extreme_sequence_numbers_are_errors_not_overflows() {
    for (first_seq, seqs) in [
        (u64::MAX, vec![u64::MAX]),
        (u64::MAX - 1, vec![u64::MAX - 1, u64::MAX, u64::MAX]),
        (3, vec![3, u64::MAX]),
        (0, vec![]),
        (0, vec![0, 1]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = SegmentHeader {
            first_seq,
            created_unix_ns: 0,
        }
        .encode()
        .to_vec();
        for s in &seqs {
            encode_record(&mut seg, *s, 1, 0, 0, b"payload");
        }
        let name = tickdb_journal::format::segment_file_name(first_seq);
        set_file(&dir.path().join(name), &seg);
        let _ = verify(dir.path());
        for r in [
            tickdb_journal::JournalReader::open(dir.path(), first_seq, u64::MAX).map(|r| r.count()),
            tickdb_journal::RawReader::open(dir.path(), first_seq, u64::MAX).map(|r| r.count()),
        ] {
            let _ = r;
        }
        for recovery in [RecoveryMode::Strict, RecoveryMode::PointInTime] {
            let opts = JournalOptions {
                fsync: FsyncPolicy::Never,
                recovery,
                ..JournalOptions::default()
            };
            let _ = Journal::open(dir.path(), opts);
        }
    }
}
