//! Comparing two journals, for replication (is the standby's journal the
//! primary's, byte for byte?) and for operators (`tickdb journal compare`).
//!
//! Two passes, both streaming through bounded buffers:
//! 1. Records: each journal is read from its first segment to the end of its
//!    longest valid prefix (what recovery would keep). Over the sequence range
//!    both hold, the records are compared field by field, and so is where
//!    segments start and their headers. The first difference is reported
//!    with its seq and its file and offset in each journal.
//! 2. Files: every segment name both hold is compared byte by byte, which
//!    catches what pass 1 cannot see (bytes after the last valid record).
//!    Segment files only one journal holds must lie outside the common range.
//!
//! A journal that holds fewer records is not different, as long as what it
//! holds is the same: the report says how the ranges relate (`Coverage`).
//! Damage after a journal's valid prefix is reported (`JournalSide::
//! after_end`), and is a difference exactly when the other journal holds
//! other bytes there. I/O failures and newer format versions are errors:
//! the journals could not be read, so nothing is claimed about them.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{
    segment_file_name, u32_at, SegmentHeader, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX,
    SEGMENT_HEADER_BYTES,
};
use crate::recovery::{list_segments, SegFile};
use crate::storage::FsStorage;
use crate::stream::{read_full, End, RecordMeta, RecordStream};

type Result<T> = std::result::Result<T, JournalError>;

/// Chunk size of the byte-by-byte file comparison, per file.
const COMPARE_CHUNK_BYTES: usize = 256 * 1024;

/// One of the two journals compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    A,
    B,
}

impl Which {
    fn other(self) -> Which {
        match self {
            Which::A => Which::B,
            Which::B => Which::A,
        }
    }
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Which::A => "A",
            Which::B => "B",
        })
    }
}

/// A byte position in a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub offset: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        write!(f, "{name} offset {}", self.offset)
    }
}

/// What one journal holds, as far as the comparison read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSide {
    pub dir: PathBuf,
    /// Segment files, in sequence order.
    pub segments: Vec<PathBuf>,
    /// The first seq it holds: its first segment's (also when that segment
    /// holds no record yet).
    pub first_seq: u64,
    /// One past its last valid record; equals `first_seq` when it holds none.
    pub next_seq: u64,
    /// What stopped the read before the end of its files: a record being
    /// written, a torn tail, or damage (where, and why). `tickdb journal
    /// verify` tells more.
    pub after_end: Option<(Location, String)>,
    /// Segment files the other journal does not hold (outside the common
    /// range, else they are the difference).
    pub unshared_segments: Vec<PathBuf>,
}

impl JournalSide {
    /// Valid records it holds.
    pub fn records(&self) -> u64 {
        self.next_seq - self.first_seq
    }
}

/// How the sequence ranges of the two journals relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Both hold the same range.
    Same,
    /// Both start at the same seq and `shorter` ends earlier: it is a strict
    /// prefix of the other (a follower behind its primary, say).
    Prefix { shorter: Which },
    /// They start at different seqs (one was trimmed, or started later from a
    /// checkpoint) and share a range.
    Overlap,
    /// They hold no seq in common, so nothing can be compared.
    Disjoint,
}

/// A field in which two records with the same seq differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldDiff {
    PayloadLen {
        a: u32,
        b: u32,
    },
    Kind {
        a: u8,
        b: u8,
    },
    TimeNs {
        a: i64,
        b: i64,
    },
    Rows {
        a: u32,
        b: u32,
    },
    /// The payloads differ from this byte of the payload on.
    Payload {
        at: u64,
    },
}

impl fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldDiff::PayloadLen { a, b } => write!(f, "payload length {a} vs {b}"),
            FieldDiff::Kind { a, b } => write!(f, "kind {a} vs {b}"),
            FieldDiff::TimeNs { a, b } => write!(f, "time_ns {a} vs {b}"),
            FieldDiff::Rows { a, b } => write!(f, "rows {a} vs {b}"),
            FieldDiff::Payload { at } => write!(f, "payload differs from its byte {at}"),
        }
    }
}

/// What differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffKind {
    /// The records at the seq differ in these fields (at least one).
    Record(Vec<FieldDiff>),
    /// The record at the seq starts a segment in one journal only.
    SegmentStart { starts_in: Which },
    /// The record starts a segment in both, under different headers.
    SegmentHeader { a: SegmentHeader, b: SegmentHeader },
    /// Two files of the same name hold different bytes from the offset on.
    Bytes,
    /// Two files of the same name, one a byte prefix of the other, where
    /// that is not a journal behind the other ending there.
    Length { a: u64, b: u64 },
    /// A segment file only one journal holds, inside the common range.
    SegmentOnlyIn(Which),
}

/// The first difference found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The record where the journals part: for a difference in file bytes,
    /// the record framed around the first differing byte (None when no
    /// record is, e.g. garbage after the last one, or a segment header).
    pub seq: Option<u64>,
    /// Where, in each journal (None: that journal has no such file).
    pub a: Option<Location>,
    pub b: Option<Location>,
    pub what: DiffKind,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "first difference at seq {seq}")?,
            None => write!(f, "first difference")?,
        }
        let loc = |l: &Option<Location>| match l {
            Some(l) => l.to_string(),
            None => "no such file".to_string(),
        };
        write!(f, ": A {}, B {}: ", loc(&self.a), loc(&self.b))?;
        match &self.what {
            DiffKind::Record(fields) => {
                let v: Vec<String> = fields.iter().map(|d| d.to_string()).collect();
                write!(f, "records differ: {}", v.join(", "))
            }
            DiffKind::SegmentStart { starts_in } => write!(
                f,
                "the record starts a segment in {starts_in} only (segments start at different records)"
            ),
            DiffKind::SegmentHeader { a, b } => write!(
                f,
                "segment headers differ: created_unix_ns {} vs {}",
                a.created_unix_ns, b.created_unix_ns
            ),
            DiffKind::Bytes => {
                let in_header = self
                    .a
                    .as_ref()
                    .is_some_and(|l| l.offset < SEGMENT_HEADER_BYTES);
                if in_header {
                    write!(f, "segment header bytes differ")
                } else {
                    write!(
                        f,
                        "file bytes differ from these offsets on (past the records both hold)"
                    )
                }
            }
            DiffKind::Length { a, b } => write!(
                f,
                "same bytes as far as the shorter goes, but {a} vs {b} bytes long, and the shorter \
                 one is not simply behind"
            ),
            DiffKind::SegmentOnlyIn(w) => {
                write!(
                    f,
                    "segment file only in {w}, inside the range both journals hold"
                )
            }
        }
    }
}

/// What `compare` found. `Display` gives the operator's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareReport {
    pub a: JournalSide,
    pub b: JournalSide,
    /// The seq range both hold, inclusive (None: none).
    pub common: Option<(u64, u64)>,
    pub coverage: Coverage,
    pub difference: Option<Difference>,
}

impl CompareReport {
    /// Nothing both journals hold differs, and they hold something in
    /// common (or both nothing, from the same seq). `tickdb journal
    /// compare` exits 0 exactly when this holds.
    pub fn is_match(&self) -> bool {
        self.difference.is_none() && self.coverage != Coverage::Disjoint
    }

    /// The journals are the same: same records, same segment files, same
    /// bytes (`--exact`).
    pub fn is_identical(&self) -> bool {
        self.is_match()
            && self.coverage == Coverage::Same
            && self.a.unshared_segments.is_empty()
            && self.b.unshared_segments.is_empty()
    }

    /// Some(the shorter) when one journal is a strict prefix of the other.
    pub fn prefix(&self) -> Option<Which> {
        match self.coverage {
            Coverage::Prefix { shorter } if self.is_match() => Some(shorter),
            _ => None,
        }
    }

    fn side(&self, w: Which) -> &JournalSide {
        match w {
            Which::A => &self.a,
            Which::B => &self.b,
        }
    }
}

fn range(first: u64, next: u64) -> String {
    if next > first {
        format!("seq {first}..={}", next - 1)
    } else {
        format!("no record (next seq {first})")
    }
}

impl fmt::Display for CompareReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (w, s) in [(Which::A, &self.a), (Which::B, &self.b)] {
            writeln!(
                f,
                "{w}: {}: {}, {} segment(s)",
                s.dir.display(),
                range(s.first_seq, s.next_seq),
                s.segments.len()
            )?;
        }
        match (&self.difference, self.coverage) {
            (Some(d), _) => writeln!(f, "{d}")?,
            (None, Coverage::Disjoint) => writeln!(
                f,
                "no seq in common: A holds {}, B holds {}; nothing can be compared",
                range(self.a.first_seq, self.a.next_seq),
                range(self.b.first_seq, self.b.next_seq)
            )?,
            (None, coverage) => {
                match self.common {
                    Some((lo, hi)) => write!(f, "identical over seq {lo}..={hi}")?,
                    None => write!(f, "identical: neither holds a record")?,
                }
                for w in [Which::A, Which::B] {
                    let (s, o) = (self.side(w), self.side(w.other()));
                    let mut also = Vec::new();
                    if s.first_seq < o.first_seq && s.next_seq > s.first_seq {
                        also.push(format!(
                            "seq {}..={}",
                            s.first_seq,
                            o.first_seq.min(s.next_seq) - 1
                        ));
                    }
                    if s.next_seq > o.next_seq {
                        also.push(format!(
                            "seq {}..={}",
                            o.next_seq.max(s.first_seq),
                            s.next_seq - 1
                        ));
                    }
                    for p in &s.unshared_segments {
                        if let Some(n) = p.file_name() {
                            also.push(format!("segment {}", n.to_string_lossy()));
                        }
                    }
                    if !also.is_empty() {
                        write!(f, "; {w} also holds {}", also.join(", "))?;
                    }
                }
                match coverage {
                    Coverage::Prefix { shorter } => {
                        write!(f, " ({shorter} is a strict prefix of {})", shorter.other())?
                    }
                    Coverage::Overlap => write!(f, " (they start at different seqs)")?,
                    _ => {}
                }
                writeln!(f)?;
            }
        }
        for (w, s) in [(Which::A, &self.a), (Which::B, &self.b)] {
            if let Some((loc, why)) = &s.after_end {
                match s.records() {
                    0 => write!(f, "note: {w} holds no valid record")?,
                    _ => write!(
                        f,
                        "note: {w} holds valid records up to seq {}",
                        s.next_seq - 1
                    )?,
                }
                writeln!(f, "; after them, at {loc}: {why}")?;
            }
        }
        Ok(())
    }
}

/// One journal being walked record by record.
struct Walker {
    side: JournalSide,
    stream: Option<RecordStream>,
    /// The current record's bytes (header and payload) and where it lies.
    buf: Vec<u8>,
    cur: Option<RecordMeta>,
}

impl Walker {
    fn open(dir: &Path, segs: &[SegFile]) -> Result<Walker> {
        let first_seq = segs.first().map(|s| s.first_seq).unwrap_or(1);
        let mut w = Walker {
            side: JournalSide {
                dir: dir.to_path_buf(),
                segments: segs.iter().map(|s| s.path.clone()).collect(),
                first_seq,
                next_seq: first_seq,
                after_end: None,
                unshared_segments: Vec::new(),
            },
            stream: None,
            buf: Vec::new(),
            cur: None,
        };
        match RecordStream::open(dir, first_seq, u64::MAX, End::UntilEnd) {
            Ok(s) => w.stream = Some(s),
            Err(e) => w.stopped(e)?,
        }
        Ok(w)
    }

    /// Moves to the next valid record; false at the end of the valid prefix.
    fn advance(&mut self) -> Result<bool> {
        self.cur = None;
        self.buf.clear();
        let Some(stream) = self.stream.as_mut() else {
            return Ok(false);
        };
        match stream.next_into(&mut self.buf, true) {
            Ok(Some(m)) => {
                self.side.next_seq = m.header.seq + 1;
                self.cur = Some(m);
                Ok(true)
            }
            Ok(None) => {
                self.stream = None;
                Ok(false)
            }
            Err(e) => {
                self.stream = None;
                self.stopped(e)?;
                Ok(false)
            }
        }
    }

    /// Records why the valid prefix ended; errors that say nothing about
    /// the journal's bytes (I/O, a newer version) are the caller's.
    fn stopped(&mut self, e: JournalError) -> Result<()> {
        // The location is given apart, so the reason is the error without it.
        let (file, offset, why) = match &e {
            JournalError::Corrupt {
                file,
                offset,
                reason,
            } => (file, *offset, reason.clone()),
            JournalError::Gap {
                file,
                offset,
                expected,
                found,
            } => (
                file,
                *offset,
                format!("sequence gap: expected seq {expected}, found {found}"),
            ),
            JournalError::MissingSegment { file, .. } => (file, 0, e.to_string()),
            _ => return Err(e),
        };
        let loc = Location {
            file: file.clone(),
            offset,
        };
        self.side.after_end = Some((loc, why));
        Ok(())
    }

    fn location(&self, m: &RecordMeta) -> Location {
        Location {
            file: self.side.dir.join(segment_file_name(m.segment.first_seq)),
            offset: m.offset,
        }
    }

    /// Walks to the end of the valid prefix.
    fn drain(&mut self) -> Result<()> {
        while self.advance()? {}
        Ok(())
    }
}

/// Compares the journals in `dir_a` and `dir_b` (journal directories) record
/// by record over the sequence range both hold, and segment file by segment
/// file; see the module comment. Read only: safe beside live writers, though
/// a tail being written may then show as a prefix or a difference. Errors:
/// `NoJournal` when a directory holds no segment, `Io`, `UnsupportedVersion`.
pub fn compare(dir_a: &Path, dir_b: &Path) -> Result<CompareReport> {
    let segs_a = segments(dir_a)?;
    let segs_b = segments(dir_b)?;
    let mut wa = Walker::open(dir_a, &segs_a)?;
    let mut wb = Walker::open(dir_b, &segs_b)?;
    let mut difference = None;
    let (mut ha, mut hb) = (wa.advance()?, wb.advance()?);
    while ha && hb {
        let (Some(ma), Some(mb)) = (wa.cur, wb.cur) else {
            break;
        };
        if ma.header.seq < mb.header.seq {
            ha = wa.advance()?;
            continue;
        }
        if mb.header.seq < ma.header.seq {
            hb = wb.advance()?;
            continue;
        }
        if let Some(what) = diff_records(&ma, &wa.buf, &mb, &wb.buf) {
            difference = Some(Difference {
                seq: Some(ma.header.seq),
                a: Some(wa.location(&ma)),
                b: Some(wb.location(&mb)),
                what,
            });
            break;
        }
        ha = wa.advance()?;
        hb = wb.advance()?;
    }
    wa.drain()?;
    wb.drain()?;
    let (a, b) = (&wa.side, &wb.side);
    let lo = a.first_seq.max(b.first_seq);
    let next = a.next_seq.min(b.next_seq);
    let both_hold_records = a.records() > 0 && b.records() > 0;
    let coverage = if lo > next || (lo == next && both_hold_records) {
        Coverage::Disjoint
    } else if a.first_seq == b.first_seq && a.next_seq == b.next_seq {
        Coverage::Same
    } else if a.first_seq == b.first_seq {
        Coverage::Prefix {
            shorter: if a.next_seq < b.next_seq {
                Which::A
            } else {
                Which::B
            },
        }
    } else {
        Coverage::Overlap
    };
    let common = (lo < next).then(|| (lo, next - 1));
    let (mut side_a, mut side_b) = (wa.side, wb.side);
    let file_diff = compare_files(&segs_a, &segs_b, &mut side_a, &mut side_b, lo, next)?;
    if difference.is_none() {
        difference = file_diff;
    }
    Ok(CompareReport {
        a: side_a,
        b: side_b,
        common,
        coverage,
        difference,
    })
}

fn segments(dir: &Path) -> Result<Vec<SegFile>> {
    let segs = list_segments(&FsStorage, dir)?;
    if segs.is_empty() {
        return Err(JournalError::NoJournal {
            dir: dir.to_path_buf(),
        });
    }
    Ok(segs)
}

/// How two records with the same seq differ (None: they do not). `a` and
/// `b` hold each record's bytes, header included.
fn diff_records(ma: &RecordMeta, a: &[u8], mb: &RecordMeta, b: &[u8]) -> Option<DiffKind> {
    let starts = |m: &RecordMeta| m.header.seq == m.segment.first_seq;
    match (starts(ma), starts(mb)) {
        (true, true) if ma.segment != mb.segment => {
            return Some(DiffKind::SegmentHeader {
                a: ma.segment,
                b: mb.segment,
            })
        }
        (true, false) => {
            return Some(DiffKind::SegmentStart {
                starts_in: Which::A,
            })
        }
        (false, true) => {
            return Some(DiffKind::SegmentStart {
                starts_in: Which::B,
            })
        }
        _ => {}
    }
    if a == b {
        return None;
    }
    let (ha, hb) = (&ma.header, &mb.header);
    let mut fields = Vec::new();
    if ha.payload_len != hb.payload_len {
        fields.push(FieldDiff::PayloadLen {
            a: ha.payload_len,
            b: hb.payload_len,
        });
    }
    if ha.kind != hb.kind {
        fields.push(FieldDiff::Kind {
            a: ha.kind,
            b: hb.kind,
        });
    }
    if ha.time_ns != hb.time_ns {
        fields.push(FieldDiff::TimeNs {
            a: ha.time_ns,
            b: hb.time_ns,
        });
    }
    if ha.rows != hb.rows {
        fields.push(FieldDiff::Rows {
            a: ha.rows,
            b: hb.rows,
        });
    }
    let h = RECORD_HEADER_BYTES as usize;
    let (pa, pb) = (a.get(h..).unwrap_or(&[]), b.get(h..).unwrap_or(&[]));
    if pa != pb {
        let at = first_difference(pa, pb).unwrap_or(pa.len().min(pb.len()));
        fields.push(FieldDiff::Payload { at: at as u64 });
    }
    // Both records passed their CRC checks and carry the same seq, so some
    // field above differs; this only guards against a future field.
    if fields.is_empty() {
        fields.push(FieldDiff::Payload { at: 0 });
    }
    Some(DiffKind::Record(fields))
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Pass 2: segment files by name. Files both hold must hold the same bytes
/// (one may stop short where its journal ends, behind the other's); a file
/// only one holds must start outside the common range `lo .. next`.
fn compare_files(
    segs_a: &[SegFile],
    segs_b: &[SegFile],
    a: &mut JournalSide,
    b: &mut JournalSide,
    lo: u64,
    next: u64,
) -> Result<Option<Difference>> {
    let mut first: Option<Difference> = None;
    let mut note = |d: Difference| {
        if first.is_none() {
            first = Some(d);
        }
    };
    let last_a = segs_a.last().map(|s| s.first_seq);
    let last_b = segs_b.last().map(|s| s.first_seq);
    let (mut i, mut j) = (0, 0);
    while i < segs_a.len() || j < segs_b.len() {
        let sa = segs_a.get(i);
        let sb = segs_b.get(j);
        match (sa, sb) {
            (Some(x), Some(y)) if x.first_seq == y.first_seq => {
                i += 1;
                j += 1;
                let (la, lb, at) = compare_bytes(&x.path, &y.path)?;
                if let Some(at) = at {
                    // Name the record the differing byte belongs to, in
                    // whichever journal frames one there.
                    let seq = match record_at(&x.path, x.first_seq, at)? {
                        Some(seq) => Some(seq),
                        None => record_at(&y.path, y.first_seq, at)?,
                    };
                    note(Difference {
                        seq,
                        a: Some(Location {
                            file: x.path.clone(),
                            offset: at,
                        }),
                        b: Some(Location {
                            file: y.path.clone(),
                            offset: at,
                        }),
                        what: DiffKind::Bytes,
                    });
                } else if la != lb {
                    // One file is a byte prefix of the other: fine where the
                    // shorter file ends a journal that is behind the other.
                    let behind = if la < lb {
                        last_a == Some(x.first_seq) && a.next_seq < b.next_seq
                    } else {
                        last_b == Some(y.first_seq) && b.next_seq < a.next_seq
                    };
                    if !behind {
                        let at = la.min(lb);
                        note(Difference {
                            seq: None,
                            a: Some(Location {
                                file: x.path.clone(),
                                offset: at,
                            }),
                            b: Some(Location {
                                file: y.path.clone(),
                                offset: at,
                            }),
                            what: DiffKind::Length { a: la, b: lb },
                        });
                    }
                }
            }
            (Some(x), y) if y.is_none_or(|y| x.first_seq < y.first_seq) => {
                i += 1;
                a.unshared_segments.push(x.path.clone());
                if (lo..next).contains(&x.first_seq) {
                    note(only_in(Which::A, x));
                }
            }
            (_, Some(y)) => {
                j += 1;
                b.unshared_segments.push(y.path.clone());
                if (lo..next).contains(&y.first_seq) {
                    note(only_in(Which::B, y));
                }
            }
            _ => break,
        }
    }
    Ok(first)
}

fn only_in(w: Which, seg: &SegFile) -> Difference {
    let here = Some(Location {
        file: seg.path.clone(),
        offset: 0,
    });
    let (a, b) = match w {
        Which::A => (here, None),
        Which::B => (None, here),
    };
    Difference {
        seq: Some(seg.first_seq),
        a,
        b,
        what: DiffKind::SegmentOnlyIn(w),
    }
}

/// The seq of the record whose bytes span `offset` in the segment file
/// `path`, walking its record headers (payloads are skipped, not read).
/// None when the offset is in the segment header or past where the records'
/// framing holds; the CRC is not checked (the caller only names a place).
fn record_at(path: &Path, first_seq: u64, offset: u64) -> Result<Option<u64>> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let len = f
        .metadata()
        .map_err(|e| JournalError::io(path, "stat segment", e))?
        .len();
    let mut at = SEGMENT_HEADER_BYTES;
    let mut seq = first_seq;
    let mut hdr = [0u8; RECORD_HEADER_BYTES as usize];
    while at <= offset && at + RECORD_HEADER_BYTES <= len {
        f.seek(SeekFrom::Start(at))
            .map_err(|e| JournalError::io(path, "seek segment", e))?;
        let n =
            read_full(&mut f, &mut hdr).map_err(|e| JournalError::io(path, "read segment", e))?;
        if n < hdr.len() {
            return Ok(None);
        }
        let payload_len = u32_at(&hdr, 0);
        if payload_len > RECORD_PAYLOAD_BYTES_MAX {
            return Ok(None);
        }
        let end = at + RECORD_HEADER_BYTES + payload_len as u64;
        if end > len {
            return Ok(None);
        }
        if offset < end {
            return Ok(Some(seq));
        }
        at = end;
        seq += 1;
    }
    Ok(None)
}

/// Streams two files side by side: (length of a, length of b, first offset
/// where their bytes differ within the shorter length).
fn compare_bytes(a: &Path, b: &Path) -> Result<(u64, u64, Option<u64>)> {
    let open = |p: &Path| -> Result<(File, u64)> {
        let f = File::open(p).map_err(|e| JournalError::io(p, "open segment", e))?;
        let len = f
            .metadata()
            .map_err(|e| JournalError::io(p, "stat segment", e))?
            .len();
        Ok((f, len))
    };
    let (mut fa, la) = open(a)?;
    let (mut fb, lb) = open(b)?;
    let mut ba = vec![0u8; COMPARE_CHUNK_BYTES];
    let mut bb = vec![0u8; COMPARE_CHUNK_BYTES];
    let mut off = 0u64;
    let end = la.min(lb);
    while off < end {
        let want = (end - off).min(COMPARE_CHUNK_BYTES as u64) as usize;
        let na = read_full(&mut fa, &mut ba[..want])
            .map_err(|e| JournalError::io(a, "read segment", e))?;
        let nb = read_full(&mut fb, &mut bb[..want])
            .map_err(|e| JournalError::io(b, "read segment", e))?;
        let n = na.min(nb);
        if let Some(p) = first_difference(&ba[..n], &bb[..n]) {
            return Ok((la, lb, Some(off + p as u64)));
        }
        off += n as u64;
        if n < want {
            // A file shrank while being read (truncated beside us): compare
            // no further than both still hold.
            break;
        }
    }
    Ok((la, lb, None))
}
