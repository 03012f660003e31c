//! Trimming segments behind a checkpoint: only whole segments at or before the
//! sequence go, never the newest one; the trimmed journal still recovers,
//! verifies and replays from where it starts, and a reader asking for a
//! trimmed sequence gets an error naming what is left.

mod common;

use common::*;
use tickdb_journal::{trim, verify, FsStorage, FsyncPolicy, Journal, JournalError, JournalReader};

#[test]
fn trims_whole_segments_behind_the_sequence_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let o = opts(16 * 1024, FsyncPolicy::Never);
    write_records(&dir, o.clone(), 3000, 10, 7);
    let segs = segments(&dir);
    assert!(segs.len() >= 4, "need several segments, got {}", segs.len());
    let firsts: Vec<u64> = segs
        .iter()
        .map(|p| {
            tickdb_journal::format::parse_segment_file_name(
                &p.file_name().unwrap().to_string_lossy(),
            )
            .unwrap()
        })
        .collect();

    // Just before the second segment's last record: only the first segment goes.
    let upto = firsts[2] - 2;
    let r = trim(&FsStorage, &dir, upto).unwrap();
    assert_eq!(r.segments_removed, vec![segs[0].clone()], "{r}");
    assert_eq!(r.first_seq_kept, firsts[1]);
    assert!(r.bytes_removed > 0);

    // The journal opens (recovery accepts a first segment after 1), verifies
    // clean, and replays from its first kept record.
    let v = verify(&dir).unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.first_seq, v.last_seq), (firsts[1], 3000));
    let (j, rep) = Journal::open(&dir, o.clone()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(j.last_seq(), 3000);
    drop(j);
    let got: Vec<_> = JournalReader::open(&dir, firsts[1], 3000)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len() as u64, 3001 - firsts[1]);
    assert_eq!(got[0], expected(firsts[1], 7));

    // Asking for a trimmed record names what the journal still holds.
    match JournalReader::open(&dir, 1, 3000) {
        Err(e @ JournalError::MissingSegment { .. }) => {
            assert!(e.to_string().contains(&firsts[1].to_string()), "{e}")
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a trimmed record was readable"),
    }

    // Trimming past the end keeps the newest segment (the writer's).
    let r = trim(&FsStorage, &dir, u64::MAX).unwrap();
    let left = segments(&dir);
    assert_eq!(left.len(), 1, "{r}");
    assert_eq!(left[0], *segs.last().unwrap());
    let (mut j, _) = Journal::open(&dir, o).unwrap();
    assert_eq!(append_std(&mut j, 7), 3001);
    j.commit().unwrap();

    // Nothing to trim is not an error.
    let r = trim(&FsStorage, &dir, 0).unwrap();
    assert!(r.segments_removed.is_empty());
}
