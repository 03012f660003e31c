//! Streaming reads of committed records, for replay by rdbs and for the tp's
//! catch-up of a new subscriber, while the writer keeps appending. The reader
//! opens files read-only and never takes the writer's lock. It trusts the
//! caller's `to_seq` (a sequence number it knows was committed, so fully
//! written): records up to it must be present, so running out of bytes
//! before it is an error, not a reason to wait. The reading itself (checks,
//! bounded buffer, segment changes) is the record stream's (`stream.rs`).

use std::path::Path;

use crate::error::JournalError;
use crate::stream::{End, RecordStream};

type Result<T> = std::result::Result<T, JournalError>;

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub kind: u8,
    pub rows: u32,
    pub time_ns: i64,
    /// The epoch it was written in.
    pub epoch: u32,
    pub payload: Vec<u8>,
}

/// Reads records with `from_seq <= seq <= to_seq`, in order, across
/// segments. Every record's CRC and sequence number is checked; a problem is
/// returned as an `Err` item (after which the iterator ends), never skipped.
pub struct JournalReader {
    stream: RecordStream,
    done: bool,
}

impl JournalReader {
    /// Opens a reader over `dir` for `from_seq ..= to_seq` (`from_seq` 0 is
    /// read as 1). `to_seq` must be committed (written by `Journal::commit`);
    /// the reader stops after it. Fails if the journal no longer holds
    /// `from_seq` (its segment was removed or archived).
    pub fn open(dir: &Path, from_seq: u64, to_seq: u64) -> Result<Self> {
        let stream = RecordStream::open(dir, from_seq, to_seq, End::Bounded)?;
        let done = stream.next_seq() > to_seq;
        Ok(JournalReader { stream, done })
    }

    /// Bytes of the segment files from the first one read on, as they were
    /// at open (for progress bars; the writer may add more).
    pub fn bytes_total(&self) -> u64 {
        self.stream.bytes_total()
    }

    /// Bytes consumed so far (for progress bars).
    pub fn bytes_read(&self) -> u64 {
        self.stream.bytes_read()
    }

    /// The sequence number the next record returned will carry.
    pub fn next_seq(&self) -> u64 {
        self.stream.next_seq()
    }

    fn read_next(&mut self) -> Result<Option<Record>> {
        let mut payload = Vec::new();
        Ok(self.stream.next_into(&mut payload, false)?.map(|m| Record {
            seq: m.header.seq,
            kind: m.header.kind,
            rows: m.header.rows,
            time_ns: m.header.time_ns,
            epoch: m.header.epoch,
            payload,
        }))
    }
}

impl Iterator for JournalReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.read_next() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
