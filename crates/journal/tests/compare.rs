//! `compare`: two journals record by record over the range both hold, then
//! segment file by segment file. Each test builds a pair that differs (or
//! does not) in one known way and checks that the report names it, with
//! the seq and the file and offset in each journal.

mod common;

use std::path::Path;

use common::*;
use tickdb_journal::{
    compare, trim, Coverage, DiffKind, FaultyStorage, FieldDiff, FsStorage, FsyncPolicy, Journal,
    JournalError, JournalOptions, Which,
};

const CLOCK_NS: i64 = 1_700_000_000_000_000_000;

/// Writes records 1..=n into `dir` under a pinned clock (so two journals
/// written alike have identical segment headers). `tweak(seq)` may replace a
/// record's (kind, rows, time_ns, payload); `roll_before` lists seqs that
/// start a new segment.
fn write(
    dir: &Path,
    n: u64,
    clock_ns: i64,
    roll_before: &[u64],
    tweak: impl Fn(u64) -> Option<(u8, u32, i64, Vec<u8>)>,
) {
    let fs = FaultyStorage::new();
    fs.set_clock_ns(Some(clock_ns));
    let (mut j, _) = Journal::open_with(fs, dir, opts(1 << 20, FsyncPolicy::Never)).unwrap();
    for seq in 1..=n {
        if roll_before.contains(&seq) {
            j.roll_segment().unwrap();
        }
        let r = expected(seq, 0);
        let (kind, rows, time, payload) =
            tweak(seq).unwrap_or((r.kind, r.rows, r.time_ns, r.payload));
        assert_eq!(j.append(kind, rows, time, &payload).unwrap(), seq);
    }
    j.close().unwrap();
}

fn same(_: u64) -> Option<(u8, u32, i64, Vec<u8>)> {
    None
}

fn pair() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    (tmp, a, b)
}

#[test]
fn identical_journals() {
    let (_t, a, b) = pair();
    write(&a, 50, CLOCK_NS, &[20, 40], same);
    copy_dir(&a, &b);
    let rep = compare(&a, &b).unwrap();
    assert!(rep.is_identical(), "{rep}");
    assert_eq!(rep.common, Some((1, 50)));
    assert_eq!(rep.coverage, Coverage::Same);
    assert!(
        rep.to_string().contains("identical over seq 1..=50"),
        "{rep}"
    );
    // Written twice alike (same clock) is identical too.
    let (_t2, c, _) = pair();
    write(&c, 50, CLOCK_NS, &[20, 40], same);
    assert!(compare(&a, &c).unwrap().is_identical());
}

#[test]
fn a_journal_behind_is_a_strict_prefix_not_a_difference() {
    for (n_short, rolls) in [(30, vec![20, 40]), (19, vec![20, 40]), (20, vec![21])] {
        let (_t, a, b) = pair();
        write(&a, 50, CLOCK_NS, &rolls, same);
        write(&b, n_short, CLOCK_NS, &rolls, same);
        let rep = compare(&a, &b).unwrap();
        assert!(rep.is_match() && !rep.is_identical(), "{rep}");
        assert_eq!(rep.coverage, Coverage::Prefix { shorter: Which::B });
        assert_eq!(rep.prefix(), Some(Which::B));
        assert_eq!(rep.common, Some((1, n_short)));
        let text = rep.to_string();
        assert!(
            text.contains(&format!("A also holds seq {}..=50", n_short + 1))
                && text.contains("B is a strict prefix of A"),
            "{text}"
        );
        // And the other way round.
        let rep = compare(&b, &a).unwrap();
        assert_eq!(rep.prefix(), Some(Which::A), "{rep}");
    }
}

#[test]
fn a_trimmed_journal_overlaps() {
    let (_t, a, b) = pair();
    write(&a, 60, CLOCK_NS, &[20, 40], same);
    copy_dir(&a, &b);
    trim(&FsStorage, &b, 25).unwrap();
    let rep = compare(&a, &b).unwrap();
    assert!(rep.is_match(), "{rep}");
    assert_eq!(rep.coverage, Coverage::Overlap);
    assert_eq!(rep.common, Some((20, 60)));
    assert_eq!(rep.a.unshared_segments.len(), 1);
    assert!(rep.to_string().contains("A also holds seq 1..=19"), "{rep}");
}

#[test]
fn record_fields_that_differ_are_named_with_their_positions() {
    type Tweak = fn(u64) -> Option<(u8, u32, i64, Vec<u8>)>;
    let cases: [(Tweak, Vec<FieldDiff>); 4] = [
        (
            |s| {
                (s == 33).then(|| {
                    (
                        9,
                        expected(s, 0).rows,
                        expected(s, 0).time_ns,
                        expected(s, 0).payload,
                    )
                })
            },
            vec![FieldDiff::Kind {
                a: expected(33, 0).kind,
                b: 9,
            }],
        ),
        (
            |s| {
                (s == 33).then(|| {
                    (
                        expected(s, 0).kind,
                        expected(s, 0).rows,
                        5,
                        expected(s, 0).payload,
                    )
                })
            },
            vec![FieldDiff::TimeNs {
                a: expected(33, 0).time_ns,
                b: 5,
            }],
        ),
        (
            |s| {
                (s == 33).then(|| {
                    let mut p = expected(s, 0).payload;
                    p.push(0xEE);
                    (
                        expected(s, 0).kind,
                        expected(s, 0).rows,
                        expected(s, 0).time_ns,
                        p,
                    )
                })
            },
            vec![
                FieldDiff::PayloadLen {
                    a: expected(33, 0).payload.len() as u32,
                    b: expected(33, 0).payload.len() as u32 + 1,
                },
                FieldDiff::Payload {
                    at: expected(33, 0).payload.len() as u64,
                },
            ],
        ),
        (
            |s| {
                (s == 33).then(|| {
                    let mut p = vec![1u8; 40];
                    p[17] = 2;
                    (expected(s, 0).kind, 77, expected(s, 0).time_ns, p)
                })
            },
            vec![
                FieldDiff::PayloadLen {
                    a: expected(33, 0).payload.len() as u32,
                    b: 40,
                },
                FieldDiff::Rows {
                    a: expected(33, 0).rows,
                    b: 77,
                },
                FieldDiff::Payload {
                    at: first_diff(&expected(33, 0).payload, &{
                        let mut p = vec![1u8; 40];
                        p[17] = 2;
                        p
                    }),
                },
            ],
        ),
    ];
    for (i, (tweak, want)) in cases.into_iter().enumerate() {
        let (_t, a, b) = pair();
        write(&a, 50, CLOCK_NS, &[20], same);
        write(&b, 50, CLOCK_NS, &[20], tweak);
        let rep = compare(&a, &b).unwrap();
        assert!(!rep.is_match(), "case {i}: {rep}");
        let d = rep.difference.clone().unwrap();
        assert_eq!(d.seq, Some(33), "case {i}");
        assert_eq!(d.what, DiffKind::Record(want), "case {i}: {rep}");
        // Both journals hold seq 33 at the same place up to it.
        let seg = a.join("journal-00000000000000000020.log");
        let off = record_offsets(&seg)[13];
        assert_eq!(d.a.as_ref().map(|l| (&l.file, l.offset)), Some((&seg, off)));
        assert_eq!(d.b.as_ref().map(|l| l.offset), Some(off), "case {i}: {rep}");
        assert!(
            rep.to_string().contains("first difference at seq 33"),
            "{rep}"
        );
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> u64 {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len())) as u64
}

#[test]
fn segment_headers_and_boundaries_must_match() {
    // Same records, segments created at another time.
    let (_t, a, b) = pair();
    write(&a, 30, CLOCK_NS, &[10], same);
    write(&b, 30, CLOCK_NS + 1, &[10], same);
    let rep = compare(&a, &b).unwrap();
    let d = rep.difference.clone().unwrap();
    assert_eq!(d.seq, Some(1), "{rep}");
    assert!(
        matches!(d.what, DiffKind::SegmentHeader { a, b } if b.created_unix_ns == a.created_unix_ns + 1),
        "{rep}"
    );
    // Same records, segments start at other records.
    let (_t, a, b) = pair();
    write(&a, 30, CLOCK_NS, &[10], same);
    write(&b, 30, CLOCK_NS, &[11], same);
    let rep = compare(&a, &b).unwrap();
    let d = rep.difference.clone().unwrap();
    assert_eq!(d.seq, Some(10), "{rep}");
    assert_eq!(
        d.what,
        DiffKind::SegmentStart {
            starts_in: Which::A
        }
    );
    assert_eq!(d.a.unwrap().offset, 32);
    assert!(d.b.unwrap().offset > 32);
}

#[test]
fn bytes_after_the_last_record_are_a_difference_unless_the_other_holds_them() {
    let (_t, a, b) = pair();
    write(&a, 30, CLOCK_NS, &[10], same);
    copy_dir(&a, &b);
    let last_b = segments(&b).pop().unwrap();
    let mut bytes = std::fs::read(&last_b).unwrap();
    let full = bytes.len() as u64;
    // Garbage after B's last record.
    bytes.extend_from_slice(&[0xAB; 7]);
    std::fs::write(&last_b, &bytes).unwrap();
    let rep = compare(&a, &b).unwrap();
    assert!(!rep.is_match(), "{rep}");
    assert_eq!(rep.coverage, Coverage::Same);
    let d = rep.difference.clone().unwrap();
    assert_eq!(
        d.what,
        DiffKind::Length {
            a: full,
            b: full + 7
        }
    );
    assert_eq!((d.seq, d.b.unwrap().offset), (None, full));
    let (loc, _) = rep.b.after_end.clone().unwrap();
    assert_eq!((loc.file, loc.offset), (last_b.clone(), full));
    // B torn in the middle of its last record, whose bytes A holds: behind.
    let offs = record_offsets(&last_b);
    let cut = *offs.last().unwrap() + 20;
    bytes.truncate(cut as usize);
    std::fs::write(&last_b, &bytes).unwrap();
    let rep = compare(&a, &b).unwrap();
    assert!(rep.is_match(), "{rep}");
    assert_eq!(rep.prefix(), Some(Which::B));
    assert!(
        rep.to_string()
            .contains("note: B holds valid records up to seq 29; after them"),
        "{rep}"
    );
    // A flipped byte in the middle of B: B's valid prefix stops there and
    // the files differ at that byte.
    copy_dir(&a, &b);
    let first_b = segments(&b)[0].clone();
    let mut bytes = std::fs::read(&first_b).unwrap();
    let at = record_offsets(&first_b)[4] as usize + 12;
    bytes[at] ^= 1;
    std::fs::write(&first_b, &bytes).unwrap();
    let rep = compare(&a, &b).unwrap();
    assert!(!rep.is_match(), "{rep}");
    let d = rep.difference.clone().unwrap();
    assert_eq!((d.what, d.b.unwrap().offset), (DiffKind::Bytes, at as u64));
    assert_eq!(d.seq, Some(5), "{rep}");
    assert_eq!(rep.b.next_seq, 5);
}

#[test]
fn an_empty_segment_only_one_holds_is_reported_not_a_difference() {
    let (_t, a, b) = pair();
    write(&a, 30, CLOCK_NS, &[10], same);
    copy_dir(&a, &b);
    let fs = FaultyStorage::new();
    fs.set_clock_ns(Some(CLOCK_NS));
    let (mut j, _) = Journal::open_with(fs, &a, JournalOptions::default()).unwrap();
    j.roll_segment().unwrap();
    drop(j);
    let rep = compare(&a, &b).unwrap();
    assert!(rep.is_match() && !rep.is_identical(), "{rep}");
    assert_eq!(rep.coverage, Coverage::Same);
    assert!(
        rep.to_string()
            .contains("A also holds segment journal-00000000000000000031.log"),
        "{rep}"
    );
}

#[test]
fn journals_with_nothing_in_common_do_not_match() {
    let (_t, a, b) = pair();
    write(&a, 10, CLOCK_NS, &[], same);
    let o = JournalOptions {
        first_seq: Some(100),
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(&b, o.clone()).unwrap();
    // Empty at 100: nothing to compare with A's 1..=10, and a gap between.
    let rep = compare(&a, &b).unwrap();
    assert_eq!(rep.coverage, Coverage::Disjoint, "{rep}");
    assert!(!rep.is_match());
    for _ in 0..5 {
        append_std(&mut j, 0);
    }
    j.commit().unwrap();
    drop(j);
    let rep = compare(&a, &b).unwrap();
    assert_eq!(rep.coverage, Coverage::Disjoint, "{rep}");
    assert!(rep.to_string().contains("no seq in common"), "{rep}");
    // An empty journal at the next seq of the other holds nothing different.
    let (_t2, c, _) = pair();
    let (j, _) = Journal::open(
        &c,
        JournalOptions {
            first_seq: Some(11),
            ..o
        },
    )
    .unwrap();
    drop(j);
    let rep = compare(&a, &c).unwrap();
    assert!(rep.is_match(), "{rep}");
    assert_eq!(rep.common, None);
}

#[test]
fn a_follower_started_mid_segment_differs_in_its_files() {
    // Replication keeps segment files identical only from a segment start on;
    // a follower bootstrapped inside a primary segment differs there.
    let (_t, a, b) = pair();
    write(&a, 100, CLOCK_NS, &[], same);
    let o = JournalOptions {
        first_seq: Some(50),
        roll: tickdb_journal::RollPolicy::Manual,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(&b, o).unwrap();
    for rec in tickdb_journal::RawReader::open(&a, 50, 100).unwrap() {
        j.append_raw(&rec.unwrap().bytes).unwrap();
    }
    j.close().unwrap();
    let rep = compare(&a, &b).unwrap();
    let d = rep.difference.clone().unwrap();
    assert_eq!(d.seq, Some(50), "{rep}");
    assert_eq!(
        d.what,
        DiffKind::SegmentStart {
            starts_in: Which::B
        }
    );
}

#[test]
fn a_directory_without_a_journal_is_an_error() {
    let (_t, a, b) = pair();
    write(&a, 3, CLOCK_NS, &[], same);
    std::fs::create_dir_all(&b).unwrap();
    assert!(matches!(
        compare(&a, &b),
        Err(JournalError::NoJournal { .. })
    ));
    assert!(matches!(
        compare(&b, &a),
        Err(JournalError::NoJournal { .. })
    ));
}
