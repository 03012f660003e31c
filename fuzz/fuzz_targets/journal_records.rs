//! Journal segments and records (crates/journal), as they are read from
//! disk: the first byte picks what the rest is:
//!   sel % 4 == 0  a whole segment file (named by the first_seq in its header)
//!   sel % 4 == 1  records behind a valid segment header (first_seq 1)
//!   sel % 4 == 2  the same with every record's CRC32C fixed up, so that
//!                 mutations reach the checks behind the checksum
//!   sel % 4 == 3  the journal's SCHEMA file, and its EPOCHS file
//! A segment is decoded in memory (check_record, find_valid_record) and
//! from a file in a scratch directory on /dev/shm: JournalReader (replay),
//! RawReader (shipping), verify, and Journal::open's recovery (Strict, or
//! PointInTime when sel & 4).
//! Asserts: no panic; a record that passes its checks re-encodes to its
//! exact bytes; the replay reader and the raw reader return the same
//! records, the ones the in-memory walk found, and stop at the same place;
//! a SCHEMA or EPOCHS file that decodes re-encodes to bytes that decode to
//! the same history.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tickdb_journal::format::{
    check_record, decode_header, encode_record_in, find_valid_record, segment_file_name,
    RecordCheck, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use tickdb_journal::{
    EpochHistory, FsyncPolicy, Journal, JournalOptions, JournalReader, RawReader, RecoveryMode,
    RollPolicy, SchemaHistory, SegmentHeader,
};

/// This process's scratch directory (libFuzzer's -jobs run several).
fn scratch() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        base.join(format!("tickdb-fuzz-journal-{}", std::process::id()))
    })
}

/// The records at the start of a segment's body, as the in-memory checks
/// see them: (seq, the record's bytes).
fn walk(file: &[u8], first_seq: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut off = SEGMENT_HEADER_BYTES as usize;
    let mut want = first_seq;
    loop {
        match check_record(file, off) {
            RecordCheck::Ok(h) => {
                let end = off + h.total_len() as usize;
                assert!(end <= file.len());
                let rec = &file[off..end];
                let mut enc = Vec::new();
                let payload = &rec[RECORD_HEADER_BYTES as usize..];
                encode_record_in(&mut enc, h.epoch, h.seq, h.kind, h.rows, h.time_ns, payload);
                assert_eq!(enc, rec, "a checked record re-encodes to its bytes");
                if h.seq != want {
                    break;
                }
                out.push((h.seq, rec.to_vec()));
                off = end;
                want = match want.checked_add(1) {
                    Some(w) => w,
                    None => break,
                };
            }
            _ => {
                if let Some((at, h)) = find_valid_record(file, off + 1, want) {
                    assert!(at > off && at + h.total_len() as usize <= file.len());
                    assert!(h.seq >= want);
                }
                break;
            }
        }
    }
    out
}

fn segment(data: &[u8], mode: u8) -> (u64, Vec<u8>) {
    if mode == 0 {
        let seq = match data.get(16..24) {
            Some(b) => u64::from_le_bytes(b.try_into().unwrap()),
            None => 1,
        };
        return (seq, data.to_vec());
    }
    let mut file = SegmentHeader {
        first_seq: 1,
        created_unix_ns: 1_700_000_000_000_000_000,
    }
    .encode()
    .to_vec();
    file.extend_from_slice(data);
    if mode == 2 {
        tickdb_fuzz::fix_crcs(&mut file, SEGMENT_HEADER_BYTES as usize, 4, 8, |len| {
            (len as usize).checked_add(RECORD_HEADER_BYTES as usize)
        });
    }
    (1, file)
}

fn histories(data: &[u8]) {
    if let Ok(h) = SchemaHistory::decode(data, Path::new("SCHEMA")) {
        let enc = h.encode();
        let back =
            SchemaHistory::decode(&enc, Path::new("SCHEMA")).expect("re-encoded SCHEMA decodes");
        assert_eq!(back.encode(), enc);
    }
    if let Ok(h) = EpochHistory::decode(data) {
        let back = EpochHistory::decode(h.encode().as_bytes()).expect("re-encoded EPOCHS decodes");
        assert_eq!(back, h);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    if sel % 4 == 3 {
        histories(data);
        return;
    }
    let (first_seq, file) = segment(data, sel % 4);
    let walked = match decode_header(&file, first_seq) {
        Ok(_) => walk(&file, first_seq),
        Err(_) => Vec::new(),
    };

    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("scratch directory");
    std::fs::write(dir.join(segment_file_name(first_seq)), &file).expect("segment file");

    // Replay and shipping read the same records, the ones the walk found
    // (the bound asks for more than there are, so both end in an error).
    let bound = walked.len() + 2;
    let replayed: Vec<_> = match JournalReader::open(dir, first_seq, u64::MAX) {
        Ok(r) => r.take(bound).collect(),
        Err(_) => Vec::new(),
    };
    let shipped: Vec<_> = match RawReader::open(dir, first_seq, u64::MAX) {
        Ok(r) => r.take(bound).collect(),
        Err(_) => Vec::new(),
    };
    let ok_r: Vec<_> = replayed.iter().map_while(|r| r.as_ref().ok()).collect();
    let ok_s: Vec<_> = shipped.iter().map_while(|r| r.as_ref().ok()).collect();
    assert_eq!(
        ok_r.len(),
        ok_s.len(),
        "replay and shipping read as many records"
    );
    assert!(ok_r.len() <= walked.len());
    for ((r, s), (seq, bytes)) in ok_r.iter().zip(&ok_s).zip(&walked) {
        assert_eq!((r.seq, s.meta.seq), (*seq, *seq));
        assert_eq!(&s.bytes, bytes);
        assert_eq!(&r.payload[..], &bytes[RECORD_HEADER_BYTES as usize..]);
    }

    let _ = tickdb_journal::verify(dir);
    let opts = JournalOptions {
        fsync: FsyncPolicy::Never,
        recovery: if sel & 4 != 0 {
            RecoveryMode::PointInTime
        } else {
            RecoveryMode::Strict
        },
        roll: RollPolicy::Manual,
        ..JournalOptions::default()
    };
    if let Ok((j, _report)) = Journal::open(dir, opts) {
        // Recovery keeps every record the readers could read.
        assert!(j.last_seq() as u128 + 1 >= first_seq as u128 + ok_r.len() as u128);
    }
});
