//! Raw record access for shipping: each record exactly as it lies on disk
//! (its 32-byte header and payload), so that a standby can append the very
//! same bytes (`Journal::append_raw`), plus where the primary's segments
//! start, so that it can roll at the same records with the same segment
//! headers (`Journal::roll_segment_at`).
//!
//! Every check the replay reader makes is made here (the record stream in
//! `stream.rs` does the reading): a record is returned only once all its
//! bytes were read and its CRC matched, so a record the writer has not
//! finished writing is never returned. Like `JournalReader`, it trusts the
//! caller's bound `to_seq` (a sequence number it knows was written); unlike
//! it, the bound can be raised as the writer commits more (`extend_to`), so a
//! shipper keeps one reader and its file position instead of reopening and
//! rescanning the tail segment each time.

use std::path::Path;

use crate::error::JournalError;
use crate::format::SegmentHeader;
use crate::stream::{End, RecordStream};

type Result<T> = std::result::Result<T, JournalError>;

/// What is known about a record returned by the raw reader, besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecordMeta {
    pub seq: u64,
    /// Bytes of the record on disk: 32-byte header + payload.
    pub len: u64,
    /// Some(the header of the segment it is in) when this record is the
    /// first of its segment: a follower rolls here, with this header.
    pub segment_start: Option<SegmentHeader>,
    /// The first seq of the segment it is in (its file is
    /// `journal-{segment_first_seq:020}.log`).
    pub segment_first_seq: u64,
    /// Byte offset of the record in that segment file.
    pub offset: u64,
}

/// One record as it lies on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub meta: RawRecordMeta,
    /// The record's exact bytes: 32-byte header, then the payload.
    pub bytes: Vec<u8>,
}

/// Reads records `from_seq ..= to_seq` as their on-disk bytes, in order,
/// across segments. A problem is an error (the reader then stops: every
/// later read returns an error too), never a skip.
pub struct RawReader {
    stream: RecordStream,
    /// The error that stopped the reader, repeated to any later read.
    failed: Option<String>,
}

impl RawReader {
    /// Opens a raw reader over `dir` for `from_seq ..= to_seq` (`from_seq` 0
    /// is read as 1). `to_seq` must be a seq the writer has written
    /// (`Journal::written_seq`, or a seq the caller saw committed); it may be
    /// below `from_seq` (nothing to read yet) and raised later with
    /// `extend_to`. When `from_seq <= to_seq`, fails now if the journal no
    /// longer holds `from_seq` (`MissingSegment`, naming its first segment).
    pub fn open(dir: &Path, from_seq: u64, to_seq: u64) -> Result<Self> {
        Ok(RawReader {
            stream: RecordStream::open(dir, from_seq, to_seq, End::Bounded)?,
            failed: None,
        })
    }

    /// Raises the bound to `to_seq` (a lower value is ignored): the writer
    /// has written up to it since.
    pub fn extend_to(&mut self, to_seq: u64) {
        self.stream.extend_to(to_seq);
    }

    /// The sequence number the next record returned will carry.
    pub fn next_seq(&self) -> u64 {
        self.stream.next_seq()
    }

    /// The current bound: the reader returns no record above it.
    pub fn to_seq(&self) -> u64 {
        self.stream.to_seq()
    }

    /// Reads the next record into `out` (cleared first; its capacity is kept,
    /// so a caller reusing one buffer allocates only for a record longer than
    /// any before). Ok(None): every record up to the bound was returned; more
    /// can follow after `extend_to`.
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> Result<Option<RawRecordMeta>> {
        out.clear();
        if let Some(why) = &self.failed {
            return Err(JournalError::BadInput(format!(
                "raw reader stopped at an earlier error: {why}"
            )));
        }
        match self.stream.next_into(out, true) {
            Ok(Some(m)) => Ok(Some(RawRecordMeta {
                seq: m.header.seq,
                len: m.header.total_len(),
                segment_start: (m.header.seq == m.segment.first_seq).then_some(m.segment),
                segment_first_seq: m.segment.first_seq,
                offset: m.offset,
            })),
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e)
            }
        }
    }
}

impl Iterator for RawReader {
    type Item = Result<RawRecord>;

    /// The next record up to the bound. After `None`, `extend_to` and more
    /// calls may yield more; after an `Err`, it yields nothing more.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed.is_some() {
            return None;
        }
        let mut bytes = Vec::new();
        match self.read_into(&mut bytes) {
            Ok(Some(meta)) => Some(Ok(RawRecord { meta, bytes })),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
