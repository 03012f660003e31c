//! The record stream: sequential, bounded-memory reading of records across
//! segment files, with every check the journal's readers make (segment
//! header, length bound, reserved bytes, CRC32C, sequence continuity within
//! and across segments). `JournalReader` (decoded records, for replay) and
//! `RawReader` (exact on-disk bytes, for shipping) are thin wrappers over it,
//! and `compare` walks two journals with it.
//!
//! It reads real files directly, read-only, and never takes the writer's
//! lock, so it runs beside a live writer. Memory is one read buffer of
//! `READ_BUFFER_BYTES` plus the record being returned (at most
//! `RECORD_PAYLOAD_BYTES_MAX` + 32 bytes); a segment is never read whole.
//!
//! The stream trusts the caller's upper bound `to_seq`: records up to it were
//! written by the writer, so running out of bytes before it is an error, not
//! a reason to wait, and bytes past it (perhaps a record being written) are
//! never returned. In "until end" mode (`compare`) there is no bound: the
//! stream stops cleanly after the last record of the last segment.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{
    decode_header, decode_record_header, record_crc_ok, u32_at, HeaderProblem, RecordHeader,
    SegmentHeader, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX, SEGMENT_HEADER_BYTES,
    SEGMENT_VERSION,
};
use crate::recovery::list_segments;
use crate::storage::FsStorage;

type Result<T> = std::result::Result<T, JournalError>;

/// Read buffer size of the streaming readers.
pub(crate) const READ_BUFFER_BYTES: usize = 1024 * 1024;

/// Where a record returned by the stream lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordMeta {
    pub header: RecordHeader,
    /// The header of the segment file the record is in.
    pub segment: SegmentHeader,
    /// Byte offset of the record in that file (32 for its first record).
    pub offset: u64,
}

/// The segment file being read.
struct Cursor {
    path: PathBuf,
    header: SegmentHeader,
    file: BufReader<File>,
    /// Offset of the next record in the file.
    offset: u64,
    /// The seq the next record in this file must carry.
    next_in_file: u64,
}

/// How the stream treats the end of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Records up to `to_seq` are known to be written: running out before
    /// it is an error.
    Bounded,
    /// Read everything there is; the end of the last segment ends the stream.
    UntilEnd,
}

pub(crate) struct RecordStream {
    dir: PathBuf,
    next_seq: u64,
    to_seq: u64,
    end: End,
    cur: Option<Cursor>,
    bytes_total: u64,
    bytes_read: u64,
    /// Set once the end of the journal was reached in `UntilEnd` mode.
    ended: bool,
}

impl RecordStream {
    /// A stream over `dir` from `from_seq` (0 is read as 1) up to `to_seq`.
    /// The first segment is found and opened now when `from_seq <= to_seq`
    /// (so a trimmed `from_seq` fails here, naming what the journal holds),
    /// otherwise on the first read after `extend_to` raised the bound.
    pub fn open(dir: &Path, from_seq: u64, to_seq: u64, end: End) -> Result<Self> {
        let mut s = RecordStream {
            dir: dir.to_path_buf(),
            next_seq: from_seq.max(1),
            to_seq,
            end,
            cur: None,
            bytes_total: 0,
            bytes_read: 0,
            ended: false,
        };
        if s.next_seq <= s.to_seq {
            s.position()?;
        }
        Ok(s)
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn to_seq(&self) -> u64 {
        self.to_seq
    }

    /// Raises the upper bound (never lowers it): the caller learnt that more
    /// records were written.
    pub fn extend_to(&mut self, to_seq: u64) {
        self.to_seq = self.to_seq.max(to_seq);
    }

    pub fn bytes_total(&self) -> u64 {
        self.bytes_total
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Opens the segment that holds `next_seq`.
    fn position(&mut self) -> Result<()> {
        let from = self.next_seq;
        let segs = list_segments(&FsStorage, &self.dir)?;
        let Some(idx) = segs.iter().rposition(|s| s.first_seq <= from) else {
            return Err(match segs.first() {
                Some(s) => JournalError::MissingSegment {
                    file: s.path.clone(),
                    expected: from,
                    found: s.first_seq,
                },
                None if self.end == End::UntilEnd => JournalError::NoJournal {
                    dir: self.dir.clone(),
                },
                None => JournalError::BadInput(format!(
                    "journal {} holds no segment, seq {from}..={} requested",
                    self.dir.display(),
                    self.to_seq
                )),
            });
        };
        for s in &segs[idx..] {
            // Only a progress figure: a file that vanished (trimmed) counts 0.
            self.bytes_total += std::fs::metadata(&s.path).map(|m| m.len()).unwrap_or(0);
        }
        self.cur = Some(open_segment(&segs[idx].path, segs[idx].first_seq)?);
        self.bytes_read += SEGMENT_HEADER_BYTES;
        Ok(())
    }

    /// Reads the next record with `seq <= to_seq`: appends its payload to
    /// `out` (preceded by its 32-byte header when `with_header`) and returns
    /// where it lies. Ok(None): the bound (or, in `UntilEnd` mode, the end of
    /// the journal) was reached. Records before `next_seq` (from the start of
    /// the first segment) are read and checked, then dropped from `out`.
    pub fn next_into(
        &mut self,
        out: &mut Vec<u8>,
        with_header: bool,
    ) -> Result<Option<RecordMeta>> {
        loop {
            if self.next_seq > self.to_seq || self.ended {
                return Ok(None);
            }
            if self.cur.is_none() {
                self.position()?;
            }
            let Some(cur) = self.cur.as_mut() else {
                return Err(JournalError::BadInput(
                    "record stream has no segment open".into(),
                ));
            };
            let mut hdr = [0u8; RECORD_HEADER_BYTES as usize];
            let got = read_full(&mut cur.file, &mut hdr)
                .map_err(|e| JournalError::io(&cur.path, "read segment", e))?;
            if got == 0 {
                if !self.next_segment()? {
                    self.ended = true;
                    return Ok(None);
                }
                continue;
            }
            let corrupt = |reason: String| JournalError::Corrupt {
                file: cur.path.clone(),
                offset: cur.offset,
                reason,
            };
            if got < hdr.len() {
                return Err(corrupt(match self.end {
                    End::Bounded => format!(
                        "incomplete record header ({got} bytes) before committed seq {}",
                        self.to_seq
                    ),
                    End::UntilEnd => format!(
                        "incomplete record header ({got} of {RECORD_HEADER_BYTES} bytes) at the end of the file"
                    ),
                }));
            }
            let len = u32_at(&hdr, 0);
            if len > RECORD_PAYLOAD_BYTES_MAX {
                return Err(corrupt(format!(
                    "record length {len} above the bound {RECORD_PAYLOAD_BYTES_MAX}"
                )));
            }
            let h = decode_record_header(&hdr, len);
            let start = out.len();
            if with_header {
                out.extend_from_slice(&hdr);
            }
            let payload_start = out.len();
            out.resize(payload_start + len as usize, 0);
            let got = read_full(&mut cur.file, &mut out[payload_start..])
                .map_err(|e| JournalError::io(&cur.path, "read segment", e))?;
            if got < len as usize {
                out.truncate(start);
                return Err(corrupt(format!(
                    "incomplete record payload ({got} of {len} bytes)"
                )));
            }
            if !record_crc_ok(&hdr, &out[payload_start..]) {
                out.truncate(start);
                return Err(corrupt(format!(
                    "record seq {} fails its CRC32C check",
                    h.seq
                )));
            }
            // Checked after the CRC: a wrong seq in a damaged record is corruption, not a gap.
            if h.seq != cur.next_in_file {
                out.truncate(start);
                return Err(JournalError::Gap {
                    file: cur.path.clone(),
                    offset: cur.offset,
                    expected: cur.next_in_file,
                    found: h.seq,
                });
            }
            // A seq no record can follow (only a damaged or hostile file
            // holds one) is an error, not an overflow.
            let Some(after) = h.seq.checked_add(1) else {
                out.truncate(start);
                return Err(corrupt(format!(
                    "record seq {} leaves no sequence number for a next record",
                    h.seq
                )));
            };
            let meta = RecordMeta {
                header: h,
                segment: cur.header,
                offset: cur.offset,
            };
            cur.offset += h.total_len();
            cur.next_in_file = after;
            self.bytes_read += h.total_len();
            if h.seq < self.next_seq {
                out.truncate(start);
                continue;
            }
            self.next_seq += 1;
            return Ok(Some(meta));
        }
    }

    /// At the end of a segment: moves to the segment that continues the
    /// sequence (listing the directory again, since the writer may have
    /// rolled since open). Ok(false): there is none and none after it, which
    /// ends an `UntilEnd` stream.
    fn next_segment(&mut self) -> Result<bool> {
        let Some(cur) = self.cur.as_ref() else {
            return Ok(false);
        };
        let want = cur.next_in_file;
        let segs = list_segments(&FsStorage, &self.dir)?;
        // Only a later segment can continue this one. An empty segment
        // (header only, e.g. just rolled to) already bears the name `want`;
        // taking it again would read it again, forever.
        let later = |s: &&crate::recovery::SegFile| s.first_seq > cur.header.first_seq;
        if let Some(s) = segs.iter().filter(later).find(|s| s.first_seq == want) {
            self.cur = Some(open_segment(&s.path, s.first_seq)?);
            self.bytes_read += SEGMENT_HEADER_BYTES;
            return Ok(true);
        }
        if let Some(s) = segs.iter().find(|s| s.first_seq > want) {
            return Err(JournalError::MissingSegment {
                file: s.path.clone(),
                expected: want,
                found: s.first_seq,
            });
        }
        match self.end {
            End::UntilEnd => Ok(false),
            End::Bounded => Err(JournalError::Corrupt {
                file: cur.path.clone(),
                offset: cur.offset,
                reason: format!(
                    "journal ends at seq {} but seq {} was given as committed",
                    want.saturating_sub(1),
                    self.to_seq
                ),
            }),
        }
    }
}

fn open_segment(path: &Path, first_seq: u64) -> Result<Cursor> {
    let f = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let mut file = BufReader::with_capacity(READ_BUFFER_BYTES, f);
    let mut hdr = [0u8; SEGMENT_HEADER_BYTES as usize];
    let got =
        read_full(&mut file, &mut hdr).map_err(|e| JournalError::io(path, "read segment", e))?;
    let header = match decode_header(&hdr[..got], first_seq) {
        Ok(h) => h,
        Err(HeaderProblem::Version(v)) => {
            return Err(JournalError::UnsupportedVersion {
                file: path.to_path_buf(),
                version: v,
                supported: SEGMENT_VERSION,
            })
        }
        Err(p) => {
            return Err(JournalError::Corrupt {
                file: path.to_path_buf(),
                offset: 0,
                reason: p.to_string(),
            })
        }
    };
    Ok(Cursor {
        path: path.to_path_buf(),
        header,
        file,
        offset: SEGMENT_HEADER_BYTES,
        next_in_file: first_seq,
    })
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
