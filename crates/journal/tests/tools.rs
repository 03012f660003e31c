//! The read-only tools (verify, plan_repair, repair) on directories that are
//! not journals, on payloads a caller refuses, and on the schema history.

mod common;

use common::{opts, payload, write_records};
use std::path::Path;
use tickdb_journal::{
    plan_repair, repair, trim, verify, verify_payloads, FsStorage, FsyncPolicy, JournalError,
    SchemaEntry, SchemaHistory,
};

#[test]
fn a_directory_without_segments_is_no_journal_never_clean() {
    let tmp = tempfile::tempdir().unwrap();
    // A data directory: the journal is one level down, and a segment-like
    // file elsewhere does not count.
    let data = tmp.path();
    write_records(
        &data.join("journal"),
        opts(1 << 20, FsyncPolicy::Always),
        5,
        1,
        0,
    );
    std::fs::write(data.join("notes.txt"), b"hello").unwrap();
    let e = verify(data).unwrap_err();
    assert!(matches!(e, JournalError::NoJournal { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("no journal here: "), "{msg}");
    assert!(msg.contains("journal-"), "says what it looked for: {msg}");
    let e = plan_repair(data, &data.join("backup")).unwrap_err();
    assert!(matches!(e, JournalError::NoJournal { .. }), "{e}");
    let e = repair(data, &data.join("backup")).unwrap_err();
    assert!(matches!(e, JournalError::NoJournal { .. }), "{e}");
    assert!(!data.join("backup").exists());
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        verify(empty.path()),
        Err(JournalError::NoJournal { .. })
    ));
    // The journal itself verifies.
    assert!(verify(&data.join("journal")).unwrap().is_clean());
}

#[test]
fn a_refused_payload_is_a_problem_at_its_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(1 << 20, FsyncPolicy::Always), 5, 1, 9);
    let mut seen = Vec::new();
    let rep = verify_payloads(dir, &mut |seq, _kind, p| {
        seen.push(seq);
        assert_eq!(p, payload(seq, 9).as_slice());
        if seq == 3 {
            Err("does not fit the schema".into())
        } else {
            Ok(())
        }
    })
    .unwrap();
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    assert_eq!(rep.payloads_checked, 5);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    let p = &rep.problems[0];
    assert!(p
        .what
        .contains("record seq 3 does not decode: does not fit the schema"));
    // The offset is record 3's: 32-byte segment header, then records 1 and 2.
    let r1 = 32 + payload(1, 9).len() as u64;
    let r2 = 32 + payload(2, 9).len() as u64;
    assert_eq!(p.offset, 32 + r1 + r2);
    assert!(p.file.ends_with("journal-00000000000000000001.log"));
}

#[test]
fn verify_reports_a_damaged_history_and_trim_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(256, FsyncPolicy::Always), 20, 1, 0);
    let h = SchemaHistory::new(vec![SchemaEntry {
        first_seq: 1,
        recorded_unix_ns: 0,
        text: "[[table]]".into(),
    }])
    .unwrap();
    h.write(&FsStorage, dir).unwrap();
    let rep = verify(dir).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.problems);
    assert_eq!(rep.schema_history.as_ref(), Some(&h));
    let t = trim(&FsStorage, dir, 15).unwrap();
    assert!(!t.segments_removed.is_empty());
    assert_eq!(SchemaHistory::read(&FsStorage, dir).unwrap(), Some(h));
    flip_byte(&SchemaHistory::path(dir), 30);
    let rep = verify(dir).unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert!(rep.problems[0].file.ends_with("SCHEMA"));
    assert!(
        rep.problems[0].what.contains("CRC32C"),
        "{}",
        rep.problems[0].what
    );
    assert!(rep.schema_history.is_none());
}

fn flip_byte(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

/// Checked-in history files written by an independent implementation of
/// the documented format (`tests/fixtures/make_schema_history.py`, following
/// docs/journal.md): version 1 must keep reading exactly like this, and this
/// build must write the same bytes.
#[test]
fn checked_in_schema_history_fixtures() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let h = SchemaHistory::read(&FsStorage, &fixtures.join("schema-v1"))
        .unwrap()
        .expect("a history");
    let trade =
        "[[table]]\nname = \"trade\"\ncolumn = [{ name = \"time\", type = \"timestamp\" }]\n";
    let want = SchemaHistory::new(vec![
        SchemaEntry {
            first_seq: 1,
            recorded_unix_ns: 1_583_712_000_000_000_000,
            text: trade.into(),
        },
        SchemaEntry {
            first_seq: 42,
            recorded_unix_ns: 1_583_712_060_000_000_000,
            text: format!(
                "{trade}[[table]]\nname = \"news\"\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}]\n"
            ),
        },
    ])
    .unwrap();
    assert_eq!(h, want);
    assert_eq!(h.in_force_at(41).unwrap().first_seq, 1);
    assert_eq!(h.in_force_at(42).unwrap().first_seq, 42);
    assert_eq!(
        want.encode(),
        std::fs::read(fixtures.join("schema-v1/SCHEMA")).unwrap()
    );
    // One flipped bit in the second entry's text: corruption at that entry.
    let e = SchemaHistory::read(&FsStorage, &fixtures.join("schema-v1-bitflip")).unwrap_err();
    match &e {
        JournalError::Corrupt { offset, reason, .. } => {
            assert_eq!(*offset, 24 + 24 + trade.len() as u64, "{e}");
            assert!(
                reason.contains("entry 2 of 2 fails its CRC32C check"),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
}
