//! Cutting a journal's divergent suffix: what an old primary does when it
//! rejoins as a standby and its last records were never in the new
//! primary's history (the equivalent of pg_rewind, or Kafka's truncation to
//! the leader epoch's end offset in KIP-101). Nothing is deleted unseen:
//! the segment files that held the cut records are copied aside first, and
//! the report names them, with the sequences and rows cut.

use crate::epochs::{EpochHistory, EpochStart};
use crate::error::JournalError;
use crate::format::{segment_file_name, u32_at, SEGMENT_HEADER_BYTES};
use crate::journal::{Journal, JournalOptions, RollPolicy};
use crate::raw_reader::RawReader;
use crate::recovery::list_segments;
use crate::storage::{FsStorage, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Result<T> = std::result::Result<T, JournalError>;

/// What `cut_after` cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutReport {
    /// The journal now ends at this sequence.
    pub kept_through: u64,
    /// The first and last sequence cut (`from_seq > to_seq`: nothing cut).
    pub from_seq: u64,
    pub to_seq: u64,
    pub records: u64,
    pub rows: u64,
    /// Where the segment files holding the cut records were copied, whole,
    /// before the cut (their records before `from_seq` are kept too, so each
    /// copy is a valid segment file that `tickdb journal dump` reads).
    pub copy_dir: PathBuf,
    pub files: Vec<String>,
    /// Epochs that started after `kept_through`, now forgotten.
    pub epochs_dropped: Vec<EpochStart>,
}

impl CutReport {
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }
}

impl std::fmt::Display for CutReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return write!(
                f,
                "nothing cut: the journal ends at seq {}",
                self.kept_through
            );
        }
        write!(
            f,
            "cut seq {}..={} ({} records, {} rows); the journal now ends at seq {}; the segment files that held them ({}) were copied to {}",
            self.from_seq,
            self.to_seq,
            self.records,
            self.rows,
            self.kept_through,
            self.files.join(", "),
            self.copy_dir.display()
        )
    }
}

/// Cuts every record after `keep_through` from the journal in `dir` (which
/// must not be open elsewhere: its lock is taken), copying the segment files
/// that held them into `copy_dir` first (created; must not hold files of the
/// same names). The segment holding `keep_through + 1` is truncated at that
/// record (left holding only its header when that is its first record),
/// later segments are removed, and epochs that began after `keep_through`
/// are dropped from the history. Returns AFTER the truncated segment, the
/// history and the directory are fsynced.
pub fn cut_after(dir: &Path, keep_through: u64, copy_dir: &Path) -> Result<CutReport> {
    let storage: Arc<dyn Storage> = Arc::new(FsStorage);
    let opts = JournalOptions {
        roll: RollPolicy::Manual,
        ..JournalOptions::default()
    };
    // Opening recovers a torn tail and holds the lock while we cut.
    let (journal, _) = Journal::open_with(storage.clone(), dir, opts)?;
    let last = journal.last_seq();
    let mut report = CutReport {
        kept_through: keep_through.min(last),
        from_seq: keep_through + 1,
        to_seq: last,
        records: 0,
        rows: 0,
        copy_dir: copy_dir.to_path_buf(),
        files: Vec::new(),
        epochs_dropped: Vec::new(),
    };
    if keep_through >= last {
        return Ok(report);
    }
    // Count what goes, and find where it starts.
    let mut reader = RawReader::open(dir, keep_through + 1, last)?;
    let mut buf = Vec::new();
    let mut start: Option<(u64, u64)> = None;
    while let Some(meta) = reader.read_into(&mut buf)? {
        if start.is_none() {
            start = Some((meta.segment_first_seq, meta.offset));
        }
        report.records += 1;
        report.rows += u32_at(&buf, 24) as u64;
        buf.clear();
    }
    let Some((seg_first, offset)) = start else {
        return Ok(report);
    };
    storage
        .create_dir_all(copy_dir)
        .map_err(|e| JournalError::io(copy_dir, "create directory", e))?;
    let segs = list_segments(&*storage, dir)?;
    for s in segs.iter().filter(|s| s.first_seq >= seg_first) {
        let name = segment_file_name(s.first_seq);
        let to = copy_dir.join(&name);
        let bytes = storage
            .read_file(&s.path)
            .map_err(|e| JournalError::io(&s.path, "read segment", e))?;
        let mut f = storage
            .create_new(&to)
            .map_err(|e| JournalError::io(&to, "create copy of cut segment", e))?;
        crate::recovery::write_all_at(&mut *f, &to, 0, &bytes)?;
        f.sync_data()
            .map_err(|e| JournalError::io(&to, "fdatasync copy of cut segment", e))?;
        report.files.push(name);
    }
    storage
        .sync_dir(copy_dir)
        .map_err(|e| JournalError::io(copy_dir, "sync directory", e))?;
    for s in segs.iter().rev().filter(|s| s.first_seq > seg_first) {
        storage
            .remove_file(&s.path)
            .map_err(|e| JournalError::io(&s.path, "remove cut segment", e))?;
    }
    let path = dir.join(segment_file_name(seg_first));
    let mut f = storage
        .open_write(&path)
        .map_err(|e| JournalError::io(&path, "open segment to cut", e))?;
    f.set_len(offset.max(SEGMENT_HEADER_BYTES))
        .map_err(|e| JournalError::io(&path, "truncate segment", e))?;
    f.sync_data()
        .map_err(|e| JournalError::io(&path, "fdatasync cut segment", e))?;
    let mut epochs = EpochHistory::read(&*storage, dir)?;
    report.epochs_dropped = epochs.truncate_after(keep_through);
    epochs.write(&*storage, dir)?;
    storage
        .sync_dir(dir)
        .map_err(|e| JournalError::io(dir, "sync directory", e))?;
    drop(journal);
    tracing::warn!(dir = %dir.display(), "journal {report}");
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FsyncPolicy;

    fn opts() -> JournalOptions {
        JournalOptions {
            fsync: FsyncPolicy::Never,
            segment_bytes_max: crate::SEGMENT_BYTES_MIN,
            ..JournalOptions::default()
        }
    }

    #[test]
    fn cuts_the_suffix_keeps_a_copy_and_the_journal_goes_on() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("j");
        {
            let (mut j, _) = Journal::open(&dir, opts()).unwrap();
            for i in 0..40u32 {
                if i == 25 {
                    j.commit().unwrap();
                    j.begin_epoch(3).unwrap();
                }
                j.append(1, 2, i as i64, &vec![7u8; 2000]).unwrap();
            }
            j.close().unwrap();
        }
        let copy = d.path().join("cut");
        let r = cut_after(&dir, 20, &copy).unwrap();
        assert_eq!((r.from_seq, r.to_seq, r.records, r.rows), (21, 40, 20, 40));
        assert_eq!(r.epochs_dropped.len(), 1);
        assert!(!r.files.is_empty());
        for f in &r.files {
            assert!(copy.join(f).exists());
        }
        let (mut j, _) = Journal::open(&dir, opts()).unwrap();
        assert_eq!(j.last_seq(), 20);
        assert_eq!(j.epoch(), 0);
        j.begin_epoch(4).unwrap();
        assert_eq!(j.append(1, 1, 0, b"x").unwrap(), 21);
        j.close().unwrap();
        // Nothing to cut: a no-op.
        let r = cut_after(&dir, 21, &d.path().join("cut2")).unwrap();
        assert!(r.is_empty());
    }
}
