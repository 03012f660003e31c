//! Helpers shared by the journal's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickdb_journal::{
    verify, FsyncPolicy, Journal, JournalOptions, JournalReader, Record, RecoveryMode,
};

/// The seed for a randomized test: TICKDB_SEED if set, else random. Printed
/// so that a failure can be rerun with `TICKDB_SEED=<seed> cargo test ...`.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("TICKDB_SEED") {
        Ok(s) => s.parse().expect("TICKDB_SEED must be a u64"),
        Err(_) => rand::random(),
    };
    eprintln!("{test}: TICKDB_SEED={seed}");
    seed
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn opts(segment_bytes_max: u64, fsync: FsyncPolicy) -> JournalOptions {
    JournalOptions {
        segment_bytes_max,
        fsync,
        recovery: RecoveryMode::Strict,
        ..JournalOptions::default()
    }
}

/// A deterministic payload for `seq` (its length varies with the seq), so a
/// read-back can be checked without keeping a copy.
pub fn payload(seq: u64, salt: u64) -> Vec<u8> {
    let len = ((seq.wrapping_mul(2654435761) ^ salt) % 97) as usize;
    (0..len)
        .map(|i| (seq as usize * 31 + i * 7 + salt as usize) as u8)
        .collect()
}

pub fn expected(seq: u64, salt: u64) -> Record {
    Record {
        seq,
        kind: (seq % 5) as u8,
        rows: (seq % 13) as u32 + 1,
        time_ns: 1_700_000_000_000_000_000 + seq as i64 * 1000,
        epoch: 0,
        payload: payload(seq, salt),
    }
}

/// Appends the standard record for the next seq; returns the seq.
pub fn append_std(j: &mut Journal, salt: u64) -> u64 {
    let seq = j.last_seq() + 1;
    let r = expected(seq, salt);
    let got = j
        .append(r.kind, r.rows, r.time_ns, &r.payload)
        .expect("append");
    assert_eq!(got, seq);
    seq
}

/// Writes `n` standard records, committing every `per_commit`.
pub fn write_records(dir: &Path, o: JournalOptions, n: u64, per_commit: u64, salt: u64) {
    let (mut j, _) = Journal::open(dir, o).expect("open");
    for i in 0..n {
        append_std(&mut j, salt);
        if (i + 1) % per_commit == 0 {
            j.commit().expect("commit");
        }
    }
    j.commit().expect("commit");
}

/// Every record in the journal (the last seq comes from `verify`).
pub fn read_all(dir: &Path) -> Vec<Record> {
    let v = verify(dir).expect("verify");
    if v.last_seq == 0 {
        return Vec::new();
    }
    JournalReader::open(dir, 1, v.last_seq)
        .expect("reader")
        .collect::<Result<Vec<_>, _>>()
        .expect("read")
}

/// Asserts the journal holds exactly the standard records 1..=n.
pub fn assert_std_records(dir: &Path, n: u64, salt: u64) {
    let recs = read_all(dir);
    assert_eq!(recs.len() as u64, n, "record count");
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(*r, expected(i as u64 + 1, salt), "record {}", i + 1);
    }
}

/// Segment files in `dir`, sorted.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with("journal-") && n.ends_with(".log")
        })
        .collect();
    v.sort();
    v
}

/// Names and contents of the segment files: the journal's state on disk.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    segments(dir)
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// Byte offsets where each record of a segment starts (header excluded).
pub fn record_offsets(segment: &Path) -> Vec<u64> {
    let b = std::fs::read(segment).unwrap();
    let mut off = 32usize;
    let mut v = Vec::new();
    while off + 32 <= b.len() {
        v.push(off as u64);
        let len = u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) as usize;
        off += 32 + len;
    }
    v
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

pub fn garbage(rng: &mut StdRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random::<u8>()).collect()
}
