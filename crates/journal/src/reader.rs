//! Streaming reads of committed records, for replay by rdbs and for the tp's
//! catch-up of a new subscriber, while the writer keeps appending. The reader
//! opens files read-only and never takes the writer's lock. It trusts the
//! caller's `to_seq` (a sequence number it knows was committed, so fully
//! written): records up to it must be present, so running out of bytes
//! before it is an error, not a reason to wait.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{
    decode_header, decode_record_header, record_crc_ok, u32_at, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX, SEGMENT_HEADER_BYTES,
};
use crate::recovery::list_segments;
use crate::storage::FsStorage;

type Result<T> = std::result::Result<T, JournalError>;

/// Read buffer size of the streaming reader.
const READ_BUFFER_BYTES: usize = 1024 * 1024;

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub kind: u8,
    pub rows: u32,
    pub time_ns: i64,
    pub payload: Vec<u8>,
}

struct Cursor {
    path: PathBuf,
    file: BufReader<File>,
    offset: u64,
    /// The seq the next record in this file must carry.
    next_in_file: u64,
}

/// Reads records with `from_seq <= seq <= to_seq`, in order, across
/// segments. Every record's CRC and sequence number is checked; a problem is
/// returned as an `Err` item (after which the iterator ends), never skipped.
pub struct JournalReader {
    dir: PathBuf,
    next_seq: u64,
    to_seq: u64,
    cur: Option<Cursor>,
    bytes_total: u64,
    bytes_read: u64,
    done: bool,
}

impl JournalReader {
    /// Opens a reader over `dir` for `from_seq ..= to_seq` (`from_seq` 0 is
    /// read as 1). `to_seq` must be committed (written by `Journal::commit`);
    /// the reader stops after it. Fails if the journal no longer holds
    /// `from_seq` (its segment was removed or archived).
    pub fn open(dir: &Path, from_seq: u64, to_seq: u64) -> Result<Self> {
        let from = from_seq.max(1);
        let mut r = JournalReader {
            dir: dir.to_path_buf(),
            next_seq: from,
            to_seq,
            cur: None,
            bytes_total: 0,
            bytes_read: 0,
            done: from > to_seq,
        };
        if r.done {
            return Ok(r);
        }
        let segs = list_segments(&FsStorage, dir)?;
        let Some(idx) = segs.iter().rposition(|s| s.first_seq <= from) else {
            return Err(match segs.first() {
                Some(s) => JournalError::MissingSegment {
                    file: s.path.clone(),
                    expected: from,
                    found: s.first_seq,
                },
                None => JournalError::BadInput(format!(
                    "journal {} holds no segment, seq {from}..={to_seq} requested",
                    dir.display()
                )),
            });
        };
        for s in &segs[idx..] {
            r.bytes_total += std::fs::metadata(&s.path).map(|m| m.len()).unwrap_or(0);
        }
        r.cur = Some(open_segment(&segs[idx].path, segs[idx].first_seq)?);
        r.bytes_read = SEGMENT_HEADER_BYTES;
        Ok(r)
    }

    /// Bytes of the segment files from the first one read on, as they were
    /// at open (for progress bars; the writer may add more).
    pub fn bytes_total(&self) -> u64 {
        self.bytes_total
    }

    /// Bytes consumed so far (for progress bars).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The sequence number the next record returned will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn read_next(&mut self) -> Result<Option<Record>> {
        loop {
            if self.next_seq > self.to_seq {
                return Ok(None);
            }
            let cur = self.cur.as_mut().expect("a cursor exists until done");
            let mut hdr = [0u8; RECORD_HEADER_BYTES as usize];
            let got = read_full(&mut cur.file, &mut hdr)
                .map_err(|e| JournalError::io(&cur.path, "read segment", e))?;
            if got == 0 {
                self.next_segment()?;
                continue;
            }
            let corrupt = |reason: String| JournalError::Corrupt {
                file: cur.path.clone(),
                offset: cur.offset,
                reason,
            };
            if got < hdr.len() {
                return Err(corrupt(format!(
                    "incomplete record header ({got} bytes) before committed seq {}",
                    self.to_seq
                )));
            }
            let len = u32_at(&hdr, 0);
            if len > RECORD_PAYLOAD_BYTES_MAX {
                return Err(corrupt(format!(
                    "record length {len} above the bound {RECORD_PAYLOAD_BYTES_MAX}"
                )));
            }
            let h = decode_record_header(&hdr, len);
            let mut payload = vec![0u8; len as usize];
            let got = read_full(&mut cur.file, &mut payload)
                .map_err(|e| JournalError::io(&cur.path, "read segment", e))?;
            if got < payload.len() {
                return Err(corrupt(format!(
                    "incomplete record payload ({got} of {len} bytes)"
                )));
            }
            if hdr[29..32] != [0, 0, 0] || !record_crc_ok(&hdr, &payload) {
                return Err(corrupt(format!(
                    "record seq {} fails its CRC32C check",
                    h.seq
                )));
            }
            // Checked after the CRC: a wrong seq in a damaged record is corruption, not a gap.
            if h.seq != cur.next_in_file {
                return Err(JournalError::Gap {
                    file: cur.path.clone(),
                    offset: cur.offset,
                    expected: cur.next_in_file,
                    found: h.seq,
                });
            }
            cur.offset += h.total_len();
            cur.next_in_file += 1;
            self.bytes_read += h.total_len();
            if h.seq < self.next_seq {
                continue;
            }
            self.next_seq += 1;
            return Ok(Some(Record {
                seq: h.seq,
                kind: h.kind,
                rows: h.rows,
                time_ns: h.time_ns,
                payload,
            }));
        }
    }

    /// At the end of a segment: moves to the segment that continues the
    /// sequence (listing the directory again, since the writer may have
    /// rolled since open).
    fn next_segment(&mut self) -> Result<()> {
        let cur = self.cur.as_ref().expect("a cursor exists until done");
        let want = cur.next_in_file;
        let segs = list_segments(&FsStorage, &self.dir)?;
        if let Some(s) = segs.iter().find(|s| s.first_seq == want) {
            self.cur = Some(open_segment(&s.path, s.first_seq)?);
            self.bytes_read += SEGMENT_HEADER_BYTES;
            return Ok(());
        }
        if let Some(s) = segs.iter().find(|s| s.first_seq > want) {
            return Err(JournalError::MissingSegment {
                file: s.path.clone(),
                expected: want,
                found: s.first_seq,
            });
        }
        Err(JournalError::Corrupt {
            file: cur.path.clone(),
            offset: cur.offset,
            reason: format!(
                "journal ends at seq {} but seq {} was given as committed",
                want - 1,
                self.to_seq
            ),
        })
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

fn open_segment(path: &Path, first_seq: u64) -> Result<Cursor> {
    let f = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let mut file = BufReader::with_capacity(READ_BUFFER_BYTES, f);
    let mut hdr = [0u8; SEGMENT_HEADER_BYTES as usize];
    let got =
        read_full(&mut file, &mut hdr).map_err(|e| JournalError::io(path, "read segment", e))?;
    if let Err(p) = decode_header(&hdr[..got], first_seq) {
        if let crate::format::HeaderProblem::Version(v) = p {
            return Err(JournalError::UnsupportedVersion {
                file: path.to_path_buf(),
                version: v,
                supported: crate::format::SEGMENT_VERSION,
            });
        }
        return Err(JournalError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: p.to_string(),
        });
    }
    Ok(Cursor {
        path: path.to_path_buf(),
        file,
        offset: SEGMENT_HEADER_BYTES,
        next_in_file: first_seq,
    })
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
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
