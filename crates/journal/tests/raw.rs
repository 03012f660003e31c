//! The raw reader: records as their exact on-disk bytes, where segments
//! start, a bound the caller raises while the writer appends, and the same
//! checks as the replay reader (nothing unchecked or half-written returned).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use rand::Rng;
use tickdb_journal::format::{parse_segment_file_name, SegmentHeader};
use tickdb_journal::{
    trim, FsStorage, FsyncPolicy, Journal, JournalError, JournalReader, RawReader, RawRecord,
};

/// Every record of the journal cut out of the segment files by hand, with
/// the header of its segment when it is the segment's first.
fn records_from_files(dir: &Path) -> Vec<(u64, Vec<u8>, Option<SegmentHeader>, u64)> {
    let mut out = Vec::new();
    for seg in segments(dir) {
        let name = seg.file_name().unwrap().to_str().unwrap().to_string();
        let first = parse_segment_file_name(&name).unwrap();
        let bytes = std::fs::read(&seg).unwrap();
        let created = i64::from_le_bytes(bytes[24..32].try_into().unwrap());
        for (i, off) in record_offsets(&seg).into_iter().enumerate() {
            let off = off as usize;
            let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
            let seq = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap());
            let start = (i == 0).then_some(SegmentHeader {
                first_seq: first,
                created_unix_ns: created,
            });
            out.push((seq, bytes[off..off + 32 + len].to_vec(), start, first));
        }
    }
    out
}

#[test]
fn yields_the_exact_bytes_and_segment_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(1000, FsyncPolicy::Never), 300, 7, 3);
    assert!(segments(dir).len() > 5);
    let by_hand = records_from_files(dir);
    assert_eq!(by_hand.len(), 300);
    for (from, to) in [(1, 300), (0, 5), (150, 160), (299, 300), (37, 250)] {
        let got: Vec<RawRecord> = RawReader::open(dir, from, to)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let from = u64::max(from, 1);
        assert_eq!(got.len() as u64, to - from + 1, "{from}..={to}");
        for r in &got {
            let (seq, bytes, start, seg_first) = &by_hand[r.meta.seq as usize - 1];
            assert_eq!(r.meta.seq, *seq);
            assert_eq!(&r.bytes, bytes, "seq {seq}");
            assert_eq!(r.meta.len, bytes.len() as u64);
            assert_eq!(r.meta.segment_start, *start, "seq {seq}");
            assert_eq!(r.meta.segment_first_seq, *seg_first);
        }
        // The raw bytes hold what the replay reader decodes.
        let decoded: Vec<_> = JournalReader::open(dir, from, to)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (r, d) in got.iter().zip(&decoded) {
            assert_eq!(&r.bytes[32..], &d.payload[..]);
            assert_eq!(*d, expected(r.meta.seq, 3));
        }
    }
    // Offsets point at the record in its file.
    let r = RawReader::open(dir, 1, 300)
        .unwrap()
        .nth(120)
        .unwrap()
        .unwrap();
    let file = dir.join(format!("journal-{:020}.log", r.meta.segment_first_seq));
    let b = std::fs::read(file).unwrap();
    let off = r.meta.offset as usize;
    assert_eq!(&b[off..off + r.bytes.len()], &r.bytes[..]);
}

#[test]
fn read_into_reuses_one_buffer_and_the_bound_can_be_raised() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(600, FsyncPolicy::Never), 100, 10, 1);
    let by_hand = records_from_files(dir);
    // Opened with nothing to read yet (from > to): no segment is touched.
    let mut r = RawReader::open(dir, 41, 40).unwrap();
    let mut buf = Vec::new();
    assert_eq!(r.read_into(&mut buf).unwrap(), None);
    for bound in [45, 45, 60, 100] {
        r.extend_to(bound);
        r.extend_to(10); // a lower bound is ignored
        assert_eq!(r.to_seq(), bound);
        while let Some(m) = r.read_into(&mut buf).unwrap() {
            assert_eq!(buf, by_hand[m.seq as usize - 1].1);
        }
        assert_eq!(r.next_seq(), bound + 1);
    }
    // Past what was written: an error, then the reader stays stopped.
    r.extend_to(101);
    assert!(matches!(
        r.read_into(&mut buf),
        Err(JournalError::Corrupt { .. })
    ));
    assert!(buf.is_empty());
    assert!(r.read_into(&mut buf).is_err());
    assert!(r.next().is_none());
}

#[test]
fn a_record_being_written_is_never_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut j, _) = Journal::open(dir, opts(1 << 20, FsyncPolicy::Never)).unwrap();
    for _ in 0..10 {
        append_std(&mut j, 0);
    }
    j.commit().unwrap();
    // Half of record 11 reached the file (a writer mid-write(2)).
    let mut rec = Vec::new();
    tickdb_journal::format::encode_record(&mut rec, 11, 1, 1, 5, &[7u8; 500]);
    let seg = j.segment_path().to_path_buf();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&rec[..rec.len() / 2]);
    std::fs::write(&seg, &bytes).unwrap();
    // Read to the written bound: ten records, nothing of the eleventh.
    let mut r = RawReader::open(dir, 1, 10).unwrap();
    let got: Vec<_> = r.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(r.next_seq(), 11);
    // A caller that asks beyond what was written gets an error, not the half.
    r.extend_to(11);
    let e = r.next().unwrap().unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("incomplete record payload"), "{e}");
}

#[test]
fn damaged_and_trimmed_records_are_errors_never_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_records(dir, opts(1000, FsyncPolicy::Never), 200, 5, 2);
    let segs = segments(dir);
    // Flip a header byte of the third record of the second segment.
    let offs = record_offsets(&segs[1]);
    let mut b = std::fs::read(&segs[1]).unwrap();
    b[offs[2] as usize + 17] ^= 0x40; // time_ns, under the CRC
    std::fs::write(&segs[1], &b).unwrap();
    let first_of_seg1 =
        parse_segment_file_name(segs[1].file_name().unwrap().to_str().unwrap()).unwrap();
    let items: Vec<_> = RawReader::open(dir, 1, 200).unwrap().collect();
    assert_eq!(items.len() as u64, first_of_seg1 + 2);
    match items.last().unwrap() {
        Err(JournalError::Corrupt { file, offset, .. }) => {
            assert_eq!(file, &segs[1]);
            assert_eq!(*offset, offs[2]);
        }
        other => panic!("{other:?}"),
    }
    // Trimmed records: MissingSegment naming the first segment kept.
    let tmp2 = tempfile::tempdir().unwrap();
    let dir2 = tmp2.path();
    write_records(dir2, opts(1000, FsyncPolicy::Never), 200, 5, 2);
    let r = trim(&FsStorage, dir2, 100).unwrap();
    assert!(!r.segments_removed.is_empty());
    match RawReader::open(dir2, 1, 200) {
        Err(JournalError::MissingSegment { found, .. }) => assert_eq!(found, r.first_seq_kept),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("trimmed records were readable"),
    }
    let got: Vec<_> = RawReader::open(dir2, r.first_seq_kept, 200)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got[0].meta.seq, r.first_seq_kept);
    assert!(got[0].meta.segment_start.is_some());
}

/// A shipper keeps one raw reader and raises its bound to what the writer
/// has written, while the writer appends and rolls; every record arrives once,
/// in order, byte-identical to the file, and segment starts are flagged.
#[test]
fn follows_a_live_writer() {
    let seed = seed("follows_a_live_writer");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let written = Arc::new(AtomicU64::new(0));
    let total = 3000u64;
    let (mut j, _) = Journal::open(&dir, opts(4096, FsyncPolicy::Never)).unwrap();
    let w = written.clone();
    let writer = std::thread::spawn(move || {
        let mut rng = rng(seed);
        while j.last_seq() < total {
            for _ in 0..rng.random_range(1..20) {
                if j.last_seq() < total {
                    append_std(&mut j, seed);
                }
            }
            j.commit().unwrap();
            w.store(j.written_seq(), Ordering::Release);
            if rng.random_range(0..50) == 0 {
                j.roll_segment().unwrap();
            }
        }
    });
    let mut r = RawReader::open(&dir, 1, 0).unwrap();
    let mut got: Vec<RawRecord> = Vec::new();
    while r.next_seq() <= total {
        r.extend_to(written.load(Ordering::Acquire));
        for rec in r.by_ref() {
            got.push(rec.unwrap());
        }
        std::thread::yield_now();
    }
    writer.join().unwrap();
    let by_hand = records_from_files(&dir);
    assert_eq!(got.len(), by_hand.len());
    for (g, (seq, bytes, start, _)) in got.iter().zip(&by_hand) {
        assert_eq!(
            (g.meta.seq, &g.bytes, g.meta.segment_start),
            (*seq, bytes, *start)
        );
    }
}
