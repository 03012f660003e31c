//! Trimming: removing the oldest segments once something else holds their
//! records durably. The RDB's hot restart checkpoint is that something: once
//! the store is durable up to sequence S, no restart of that RDB needs records
//! at or before S. Trimming only ever removes whole, closed segments whose
//! every record is at or before the given sequence; the newest segment (the
//! one the writer appends to) always stays, so a journal never becomes empty
//! and recovery, which accepts a first segment that starts after 1, still
//! opens it.
//!
//! Safe while the writer runs: the writer only appends to the newest segment,
//! and a reader that already opened a trimmed segment keeps reading it (the
//! file lives until it is closed). A reader asking for a trimmed sequence gets
//! `JournalError::MissingSegment`, naming what the journal still holds.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::recovery::list_segments;
use crate::storage::Storage;

/// What a trim removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// The sequence the caller said is held elsewhere.
    pub upto_seq: u64,
    pub segments_removed: Vec<PathBuf>,
    pub bytes_removed: u64,
    /// The first sequence the journal still holds (its first segment's).
    pub first_seq_kept: u64,
}

impl fmt::Display for TrimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "trimmed {} segment(s), {} bytes, behind seq {}; the journal now starts at seq {}",
            self.segments_removed.len(),
            self.bytes_removed,
            self.upto_seq,
            self.first_seq_kept
        )
    }
}

/// Removes every segment whose records all have sequence numbers at or before
/// `upto_seq`, except the newest segment, then fsyncs the directory. Returns
/// after the fsync. The caller must hold the records up to `upto_seq`
/// durably elsewhere (a checkpoint); the journal cannot check that.
pub fn trim(storage: &dyn Storage, dir: &Path, upto_seq: u64) -> Result<TrimReport, JournalError> {
    let segs = list_segments(storage, dir)?;
    let mut report = TrimReport {
        upto_seq,
        first_seq_kept: segs.first().map(|s| s.first_seq).unwrap_or(0),
        ..TrimReport::default()
    };
    // Segment i holds first_seq(i) ..= first_seq(i+1) - 1: all at or before
    // upto_seq exactly when the next segment starts at or before upto_seq + 1.
    for pair in segs.windows(2) {
        let (seg, next) = (&pair[0], &pair[1]);
        if next.first_seq > upto_seq.saturating_add(1) {
            break;
        }
        let bytes = storage.file_len(&seg.path).unwrap_or(0);
        storage
            .remove_file(&seg.path)
            .map_err(|e| JournalError::io(&seg.path, "remove trimmed segment", e))?;
        report.segments_removed.push(seg.path.clone());
        report.bytes_removed += bytes;
        report.first_seq_kept = next.first_seq;
    }
    if !report.segments_removed.is_empty() {
        storage
            .sync_dir(dir)
            .map_err(|e| JournalError::io(dir, "fsync directory after trim", e))?;
    }
    Ok(report)
}
