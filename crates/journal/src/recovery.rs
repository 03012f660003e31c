//! Recovery, verification and repair: everything that reads a journal
//! directory as a whole and decides what its longest consistent prefix is.
//!
//! One planner serves all three. It scans the segments in order (a reader
//! thread reading one segment ahead of the check) and stops at
//! the first problem (the "cut"): a bad header, a record that fails its
//! checks, a record with the wrong sequence number, or a segment whose name
//! does not continue the sequence. It then looks past the cut for any valid
//! record. None means a torn tail (a crash mid-write), which recovery
//! truncates in every mode. Some means corruption or a gap, which strict
//! recovery refuses and point-in-time recovery and repair cut away, saving
//! what they cut. Applying a plan is ordered so that a crash part-way leaves a
//! directory that plans to the same cut: later segments are moved away first
//! (last first), and the one truncation comes last.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{
    check_record, decode_header, find_valid_record, parse_segment_file_name, HeaderProblem,
    RecordCheck, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_VERSION,
};
use crate::schema_history::SchemaHistory;
use crate::storage::Storage;
use crate::RecoveryMode;

type Result<T> = std::result::Result<T, JournalError>;

/// A segment file found in the journal directory.
#[derive(Debug, Clone)]
pub(crate) struct SegFile {
    pub path: PathBuf,
    pub first_seq: u64,
}

/// Segment files in `dir`, ordered by the first sequence number in their name.
/// Other entries (the LOCK file, `dropped-*` directories) are ignored.
pub(crate) fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegFile>> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| JournalError::io(dir, "list directory", e))?;
    let mut segs: Vec<SegFile> = names
        .iter()
        .filter_map(|n| {
            parse_segment_file_name(n).map(|first_seq| SegFile {
                path: dir.join(n),
                first_seq,
            })
        })
        .collect();
    segs.sort_by_key(|s| s.first_seq);
    Ok(segs)
}

/// Running totals over a run of valid records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub records: u64,
    pub rows: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_time_ns: Option<i64>,
    pub last_time_ns: Option<i64>,
}

impl Totals {
    fn add(&mut self, seq: u64, rows: u32, time_ns: i64) {
        if self.records == 0 {
            self.first_seq = seq;
            self.first_time_ns = Some(time_ns);
        }
        self.records += 1;
        self.rows += rows as u64;
        self.last_seq = seq;
        self.last_time_ns = Some(time_ns);
    }
}

#[derive(Debug, Clone)]
enum BadKind {
    Header(HeaderProblem),
    Record(RecordCheck),
    Seq { expected: u64, found: u64 },
}

impl fmt::Display for BadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadKind::Header(h) => write!(f, "{h}"),
            BadKind::Record(r) => write!(f, "{}", r.problem().unwrap_or_default()),
            BadKind::Seq { expected, found } => {
                write!(f, "record has seq {found}, expected {expected}")
            }
        }
    }
}

/// One segment scanned from its start up to its first problem.
struct PrefixScan {
    header: Option<SegmentHeader>,
    totals: Totals,
    next_seq: u64,
    valid_end: u64,
    bad: Option<(u64, BadKind)>,
}

fn scan_prefix(buf: &[u8], name_seq: u64) -> PrefixScan {
    let mut s = PrefixScan {
        header: None,
        totals: Totals::default(),
        next_seq: name_seq,
        valid_end: 0,
        bad: None,
    };
    match decode_header(buf, name_seq) {
        Ok(h) => s.header = Some(h),
        Err(p) => {
            s.bad = Some((0, BadKind::Header(p)));
            return s;
        }
    }
    let mut off = SEGMENT_HEADER_BYTES as usize;
    s.valid_end = off as u64;
    while off < buf.len() {
        match check_record(buf, off) {
            // No record can follow seq u64::MAX: a record bearing it (a
            // damaged or hostile file) ends the valid prefix.
            RecordCheck::Ok(h) if h.seq == s.next_seq && h.seq != u64::MAX => {
                s.totals.add(h.seq, h.rows, h.time_ns);
                s.next_seq += 1;
                off += h.total_len() as usize;
                s.valid_end = off as u64;
            }
            RecordCheck::Ok(h) => {
                s.bad = Some((
                    off as u64,
                    BadKind::Seq {
                        expected: s.next_seq,
                        found: h.seq,
                    },
                ));
                return s;
            }
            other => {
                s.bad = Some((off as u64, BadKind::Record(other)));
                return s;
            }
        }
    }
    s
}

/// Where the longest consistent prefix ends and what lies past it.
#[derive(Debug)]
pub(crate) struct Cut {
    /// Segment index and offset to truncate it to (0: the header is bad and
    /// is rewritten), or None when the cut falls on a segment boundary.
    pub truncate: Option<(usize, u64)>,
    /// Index of the first segment dropped whole.
    pub drop_from: usize,
    /// True when no valid record follows the cut: a torn tail.
    pub torn: bool,
    /// The problem at the cut, as the error strict recovery returns.
    pub problem: JournalError,
}

/// The segment the writer continues in.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    pub index: usize,
    pub valid_end: u64,
    pub created_unix_ns: i64,
    pub records: u64,
}

#[derive(Debug)]
pub(crate) struct Plan {
    pub segs: Vec<SegFile>,
    pub sizes: Vec<u64>,
    pub kept: Totals,
    pub tail: Option<Tail>,
    pub cut: Option<Cut>,
}

/// Scans the journal and finds its longest consistent prefix. Read only.
pub(crate) fn plan(storage: &dyn Storage, dir: &Path) -> Result<Plan> {
    let segs = list_segments(storage, dir)?;
    let mut sizes = Vec::with_capacity(segs.len());
    for seg in &segs {
        sizes.push(
            storage
                .file_len(&seg.path)
                .map_err(|e| JournalError::io(&seg.path, "stat segment", e))?,
        );
    }
    let mut plan = Plan {
        sizes,
        segs,
        kept: Totals::default(),
        tail: None,
        cut: None,
    };
    // A reader thread reads the segments in order, at most
    // `SCAN_READ_AHEAD_SEGMENTS` ahead, while this one checks the segment
    // read before: the disk and the CRC work overlap instead of taking turns.
    let paths: Vec<PathBuf> = plan.segs.iter().map(|s| s.path.clone()).collect();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(SCAN_READ_AHEAD_SEGMENTS);
        s.spawn(move || {
            for p in &paths {
                // The scan stopped early (a cut, an error): stop reading.
                if tx.send(storage.read_file(p)).is_err() {
                    return;
                }
            }
        });
        scan_segments(storage, &mut plan, rx)
    })?;
    Ok(plan)
}

/// Read segments that may wait for the recovery scan's check. Each is held
/// whole, so the scan holds at most this + 2 segments: the one checked, the
/// ones waiting, and the one being read.
pub(crate) const SCAN_READ_AHEAD_SEGMENTS: usize = 1;

/// The recovery scan proper: checks the segments, read in order by the
/// reader thread of `plan`, and fills in the plan.
fn scan_segments(
    storage: &dyn Storage,
    plan: &mut Plan,
    read: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
) -> Result<()> {
    let mut expected: Option<u64> = None;
    for i in 0..plan.segs.len() {
        let seg = plan.segs[i].clone();
        if seg.first_seq == 0 {
            return Err(JournalError::Corrupt {
                file: seg.path.clone(),
                offset: 0,
                reason: "segment name carries seq 0; sequence numbers start at 1".into(),
            });
        }
        let buf = read
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the segment reader thread stopped")))
            .map_err(|e| JournalError::io(&seg.path, "read segment", e))?;
        plan.sizes[i] = buf.len() as u64;
        if let Some(e) = expected {
            if seg.first_seq != e {
                let problem = if seg.first_seq > e {
                    JournalError::MissingSegment {
                        file: seg.path.clone(),
                        expected: e,
                        found: seg.first_seq,
                    }
                } else {
                    JournalError::Corrupt {
                        file: seg.path.clone(),
                        offset: 0,
                        reason: format!(
                            "segment starts at seq {} but the previous segment already ends at seq {}",
                            seg.first_seq,
                            e - 1
                        ),
                    }
                };
                plan.cut = Some(Cut {
                    truncate: None,
                    drop_from: i,
                    torn: false,
                    problem,
                });
                break;
            }
        }
        let scan = scan_prefix(&buf, seg.first_seq);
        if let Some((_, BadKind::Header(HeaderProblem::Version(v)))) = &scan.bad {
            return Err(JournalError::UnsupportedVersion {
                file: seg.path.clone(),
                version: *v,
                supported: SEGMENT_VERSION,
            });
        }
        merge(&mut plan.kept, &scan.totals);
        plan.tail = Some(Tail {
            index: i,
            valid_end: scan.valid_end,
            created_unix_ns: scan.header.map(|h| h.created_unix_ns).unwrap_or(0),
            records: scan.totals.records,
        });
        if let Some((offset, kind)) = scan.bad {
            let cut = describe_cut(storage, plan, &buf, i, offset, kind, scan.next_seq)?;
            plan.cut = Some(cut);
            break;
        }
        expected = Some(scan.next_seq);
    }
    Ok(())
}

fn merge(into: &mut Totals, t: &Totals) {
    if t.records == 0 {
        return;
    }
    if into.records == 0 {
        into.first_seq = t.first_seq;
        into.first_time_ns = t.first_time_ns;
    }
    into.records += t.records;
    into.rows += t.rows;
    into.last_seq = t.last_seq;
    into.last_time_ns = t.last_time_ns;
}

/// Classifies the bad spot at `offset` in segment `i`: a gap, corruption
/// (a valid record follows somewhere), or a torn tail (nothing valid follows).
fn describe_cut(
    storage: &dyn Storage,
    plan: &Plan,
    buf: &[u8],
    i: usize,
    offset: u64,
    kind: BadKind,
    next_seq: u64,
) -> Result<Cut> {
    let file = plan.segs[i].path.clone();
    let cut = |torn, problem| Cut {
        truncate: Some((i, offset)),
        drop_from: i + 1,
        torn,
        problem,
    };
    if let BadKind::Seq { expected, found } = kind {
        return Ok(cut(
            false,
            JournalError::Gap {
                file,
                offset,
                expected,
                found,
            },
        ));
    }
    // Look for any valid record past the bad spot: first in this segment...
    let mut follows: Option<(PathBuf, u64, u64)> =
        find_valid_record(buf, offset as usize + 1, next_seq)
            .map(|(o, h)| (file.clone(), o as u64, h.seq));
    // ...then in every later segment.
    if follows.is_none() {
        for seg in &plan.segs[i + 1..] {
            let later = storage
                .read_file(&seg.path)
                .map_err(|e| JournalError::io(&seg.path, "read segment", e))?;
            if let Some((o, h)) = find_valid_record(&later, 0, next_seq.max(seg.first_seq)) {
                follows = Some((seg.path.clone(), o as u64, h.seq));
                break;
            }
        }
    }
    Ok(match follows {
        Some((f, o, seq)) => cut(
            false,
            JournalError::Corrupt {
                file,
                offset,
                reason: format!(
                    "{kind}; a valid record (seq {seq}) follows at {} offset {o}, so this is corruption, not a torn tail",
                    f.display()
                ),
            },
        ),
        None => cut(
            true,
            JournalError::Corrupt {
                file,
                offset,
                reason: format!("torn tail: {kind}; no valid record follows"),
            },
        ),
    })
}

/// Something recovery or repair removed from the journal, and where it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The segment file it came from.
    pub file: PathBuf,
    /// The offset in that file where the dropped bytes began (0 for a whole segment).
    pub offset: u64,
    pub bytes: u64,
    /// Where a copy of the bytes was kept (None for a torn tail, which holds
    /// no complete record).
    pub saved_to: Option<PathBuf>,
    pub what: String,
}

/// What opening a journal did to it. `Display` gives a one-paragraph summary.
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    pub dir: PathBuf,
    pub mode: RecoveryMode,
    /// Segments in the journal after recovery.
    pub segments: usize,
    /// Valid records in the journal after recovery.
    pub records: u64,
    pub rows: u64,
    /// First and last sequence numbers after recovery (0 when empty).
    pub first_seq: u64,
    pub last_seq: u64,
    /// A torn tail cut off: (file, offset it was truncated to, bytes dropped).
    pub truncated: Option<Truncation>,
    /// Everything moved away or cut (point-in-time recovery, or segments that
    /// held no valid record after a torn tail).
    pub dropped: Vec<Dropped>,
    /// The problem that caused a cut, if any.
    pub problem: Option<String>,
}

impl RecoveryReport {
    /// True when recovery changed nothing on disk.
    pub fn is_clean(&self) -> bool {
        self.truncated.is_none() && self.dropped.is_empty()
    }
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "journal {} ({:?} recovery): {} segment(s), {} record(s), {} row(s)",
            self.dir.display(),
            self.mode,
            self.segments,
            self.records,
            self.rows
        )?;
        if self.records > 0 {
            write!(f, ", seq {}..={}", self.first_seq, self.last_seq)?;
        }
        write!(f, ".")?;
        if let Some(p) = &self.problem {
            write!(f, " Found: {p}.")?;
        }
        if let Some((file, off, bytes)) = &self.truncated {
            write!(
                f,
                " Truncated {} at offset {off}, dropping {bytes} byte(s).",
                file.display()
            )?;
        }
        for d in &self.dropped {
            write!(
                f,
                " Dropped {} byte(s) of {} from offset {} ({})",
                d.bytes,
                d.file.display(),
                d.offset,
                d.what
            )?;
            match &d.saved_to {
                Some(p) => write!(f, ", saved to {}.", p.display())?,
                None => write!(f, ".")?,
            }
        }
        if self.is_clean() {
            write!(f, " Clean: nothing was changed.")?;
        }
        Ok(())
    }
}

/// A torn tail cut off: (file, offset it was truncated to, bytes dropped).
pub type Truncation = (PathBuf, u64, u64);

/// Where applying a plan keeps what it cuts.
pub(crate) enum Save<'a> {
    /// Keep nothing of a torn tail; move whole segments into a fresh
    /// `dropped-<unix seconds>` directory inside the journal.
    TornOnly,
    /// Keep everything cut, in this directory (a fresh `dropped-*` for
    /// point-in-time recovery, the backup directory for repair).
    All(&'a Path),
}

/// Applies a plan's cut. Returns (truncated, dropped) for the report.
pub(crate) fn apply(
    storage: &dyn Storage,
    dir: &Path,
    plan: &mut Plan,
    save: Save<'_>,
) -> Result<(Option<Truncation>, Vec<Dropped>)> {
    let Some(cut) = plan.cut.as_ref() else {
        return Ok((None, Vec::new()));
    };
    let (truncate, drop_from, torn, problem) = (
        cut.truncate,
        cut.drop_from,
        cut.torn,
        cut.problem.to_string(),
    );
    let mut dropped = Vec::new();
    let mut save_dir: Option<PathBuf> = match save {
        Save::All(p) => Some(p.to_path_buf()),
        Save::TornOnly => None,
    };
    let save_all = matches!(save, Save::All(_));
    let mut save_dir_made = false;
    let mut ensure_save_dir = |save_dir: &mut Option<PathBuf>| -> Result<PathBuf> {
        let d = match save_dir {
            Some(d) => d.clone(),
            None => {
                let d = fresh_dropped_dir(storage, dir)?;
                *save_dir = Some(d.clone());
                d
            }
        };
        if !save_dir_made {
            storage
                .create_dir_all(&d)
                .map_err(|e| JournalError::io(&d, "create directory", e))?;
            save_dir_made = true;
        }
        Ok(d)
    };
    let what_whole = if torn {
        "segment after a torn tail, holding no valid record"
    } else {
        "segment after the cut"
    };
    // 1. Whole segments after the cut, last first.
    let moved_any = drop_from < plan.segs.len();
    for j in (drop_from..plan.segs.len()).rev() {
        let seg = &plan.segs[j];
        let d = ensure_save_dir(&mut save_dir)?;
        let name = seg
            .path
            .file_name()
            .map(|n| n.to_owned())
            .unwrap_or_default();
        let to = unique_path(storage, &d, &name.to_string_lossy())?;
        move_file(storage, &seg.path, &to)?;
        tracing::warn!(file = %seg.path.display(), to = %to.display(), "journal: moved segment away");
        dropped.push(Dropped {
            file: seg.path.clone(),
            offset: 0,
            bytes: plan.sizes.get(j).copied().unwrap_or(0),
            saved_to: Some(to),
            what: what_whole.to_string(),
        });
    }
    if moved_any {
        storage
            .sync_dir(dir)
            .map_err(|e| JournalError::io(dir, "sync directory", e))?;
        if let Some(d) = &save_dir {
            storage
                .sync_dir(d)
                .map_err(|e| JournalError::io(d, "sync directory", e))?;
        }
    }
    dropped.reverse();
    // 2. The truncation, saving the cut bytes first when asked to.
    let mut truncated = None;
    if let Some((i, offset)) = truncate {
        let seg = plan.segs[i].clone();
        let buf = storage
            .read_file(&seg.path)
            .map_err(|e| JournalError::io(&seg.path, "read segment", e))?;
        let len = buf.len() as u64;
        if len > offset || offset < SEGMENT_HEADER_BYTES {
            let cut_bytes = &buf[(offset.min(len)) as usize..];
            let mut saved_to = None;
            if save_all && !cut_bytes.is_empty() {
                let d = ensure_save_dir(&mut save_dir)?;
                let name = seg
                    .path
                    .file_name()
                    .map(|n| n.to_owned())
                    .unwrap_or_default();
                let to = unique_path(
                    storage,
                    &d,
                    &format!("{}.from-{offset}", name.to_string_lossy()),
                )?;
                write_new_file(storage, &to, cut_bytes)?;
                storage
                    .sync_dir(&d)
                    .map_err(|e| JournalError::io(&d, "sync directory", e))?;
                saved_to = Some(to);
            }
            let mut f = storage
                .open_write(&seg.path)
                .map_err(|e| JournalError::io(&seg.path, "open segment", e))?;
            if offset < SEGMENT_HEADER_BYTES {
                // The header itself is bad or missing: start the segment afresh.
                let h = SegmentHeader {
                    first_seq: seg.first_seq,
                    created_unix_ns: storage.now_unix_ns(),
                };
                f.set_len(0)
                    .map_err(|e| JournalError::io(&seg.path, "truncate segment", e))?;
                write_all_at(&mut *f, &seg.path, 0, &h.encode())?;
                if let Some(t) = plan.tail.as_mut() {
                    t.valid_end = SEGMENT_HEADER_BYTES;
                    t.created_unix_ns = h.created_unix_ns;
                }
            } else {
                f.set_len(offset)
                    .map_err(|e| JournalError::io(&seg.path, "truncate segment", e))?;
            }
            f.sync_data()
                .map_err(|e| JournalError::io(&seg.path, "sync segment", e))?;
            tracing::warn!(file = %seg.path.display(), offset, bytes_dropped = len - offset.min(len), problem = %problem, "journal: truncated segment");
            if torn && !save_all {
                truncated = Some((seg.path.clone(), offset, len - offset.min(len)));
            } else {
                dropped.insert(
                    0,
                    Dropped {
                        file: seg.path.clone(),
                        offset,
                        bytes: len - offset.min(len),
                        saved_to,
                        what: if torn {
                            "torn tail".to_string()
                        } else {
                            format!("bytes from the bad spot on ({problem})")
                        },
                    },
                );
                if torn {
                    truncated = Some((seg.path.clone(), offset, len - offset.min(len)));
                }
            }
        }
    }
    plan.segs.truncate(drop_from);
    plan.sizes.truncate(drop_from);
    Ok((truncated, dropped))
}

fn fresh_dropped_dir(storage: &dyn Storage, dir: &Path) -> Result<PathBuf> {
    let secs = storage.now_unix_ns() / 1_000_000_000;
    unique_path(storage, dir, &format!("dropped-{secs}"))
}

/// `dir/name`, or `dir/name.N` for the first N that does not exist yet.
fn unique_path(storage: &dyn Storage, dir: &Path, name: &str) -> Result<PathBuf> {
    let existing = match storage.list_dir(dir) {
        Ok(v) => v,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(JournalError::io(dir, "list directory", e)),
    };
    if !existing.iter().any(|n| n == name) {
        return Ok(dir.join(name));
    }
    let mut n = 1u32;
    loop {
        let cand = format!("{name}.{n}");
        if !existing.contains(&cand) {
            return Ok(dir.join(cand));
        }
        n += 1;
    }
}

/// Rename, or copy (fsynced) then remove when the rename crosses filesystems.
fn move_file(storage: &dyn Storage, from: &Path, to: &Path) -> Result<()> {
    match storage.rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let bytes = storage
                .read_file(from)
                .map_err(|e| JournalError::io(from, "read segment", e))?;
            write_new_file(storage, to, &bytes)?;
            storage
                .remove_file(from)
                .map_err(|e| JournalError::io(from, "remove segment", e))
        }
        Err(e) => Err(JournalError::io(from, "move segment", e)),
    }
}

fn write_new_file(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = storage
        .create_new(path)
        .map_err(|e| JournalError::io(path, "create file", e))?;
    write_all_at(&mut *f, path, 0, bytes)?;
    f.sync_data()
        .map_err(|e| JournalError::io(path, "sync file", e))
}

/// Writes all of `bytes` at `offset`. A short write is an error here: on a
/// regular file it means the disk is full or a limit was hit.
pub(crate) fn write_all_at(
    f: &mut dyn crate::storage::StorageFile,
    path: &Path,
    offset: u64,
    bytes: &[u8],
) -> Result<()> {
    let n = f
        .write_at(offset, bytes)
        .map_err(|e| JournalError::io(path, "write", e))?;
    if n != bytes.len() {
        return Err(JournalError::io(
            path,
            "write",
            std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", bytes.len()),
            ),
        ));
    }
    Ok(())
}

/// One problem `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.what
        )
    }
}

/// Per-segment figures from `verify`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentStats {
    pub file: PathBuf,
    pub bytes: u64,
    pub records: u64,
    pub rows: u64,
    /// 0 when the segment holds no valid record.
    pub first_seq: u64,
    pub last_seq: u64,
}

/// What `verify` found. Counts cover valid records only.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub dir: PathBuf,
    pub segments: Vec<SegmentStats>,
    pub records: u64,
    pub rows: u64,
    /// Bytes of all segment files.
    pub bytes: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_time_ns: Option<i64>,
    pub last_time_ns: Option<i64>,
    pub problems: Vec<Problem>,
    /// The journal's schema history (None: the journal has none, or it is
    /// damaged, which is then one of the `problems`).
    pub schema_history: Option<SchemaHistory>,
    /// Valid records whose payload the caller's check accepted or refused
    /// (0 when verify ran without a payload check).
    pub payloads_checked: u64,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What a caller checks each valid record's payload with (the tp decodes it
/// under the schema in force at its seq): given (seq, kind, payload), Err
/// says why the payload is bad.
pub type PayloadCheck<'a> = dyn FnMut(u64, u8, &[u8]) -> std::result::Result<(), String> + 'a;

/// Reads the whole journal in `dir` and reports what is valid and every
/// problem (file, offset, what), without changing anything. Unlike recovery
/// it does not stop at the first problem: after a bad spot it resumes at the
/// next valid record, so one report shows all the damage. Run it on a live
/// journal and the tail being written may show as a torn tail. It also reads
/// the schema history (`SCHEMA`); a damaged one is a problem. A directory
/// with no segment is `JournalError::NoJournal`: there is nothing to call
/// clean.
pub fn verify(dir: &Path) -> Result<VerifyReport> {
    verify_with(&crate::storage::FsStorage, dir, None)
}

/// `verify`, and every valid record's payload passed to `check`; a payload
/// it refuses is a problem at that record's file and offset.
pub fn verify_payloads(dir: &Path, check: &mut PayloadCheck<'_>) -> Result<VerifyReport> {
    verify_with(&crate::storage::FsStorage, dir, Some(check))
}

pub(crate) fn verify_with(
    storage: &dyn Storage,
    dir: &Path,
    mut check: Option<&mut PayloadCheck<'_>>,
) -> Result<VerifyReport> {
    let segs = list_segments(storage, dir)?;
    if segs.is_empty() {
        return Err(JournalError::NoJournal {
            dir: dir.to_path_buf(),
        });
    }
    let mut rep = VerifyReport {
        dir: dir.to_path_buf(),
        ..Default::default()
    };
    match SchemaHistory::read(storage, dir) {
        Ok(h) => rep.schema_history = h,
        Err(e @ (JournalError::Corrupt { .. } | JournalError::UnsupportedVersion { .. })) => {
            let (file, offset) = match &e {
                JournalError::Corrupt { file, offset, .. } => (file.clone(), *offset),
                _ => (SchemaHistory::path(dir), 0),
            };
            rep.problems.push(Problem {
                file,
                offset,
                what: e.to_string(),
            });
        }
        Err(e) => return Err(e),
    }
    let mut all = Totals::default();
    let mut expected: Option<u64> = None;
    let mut payloads_checked = 0u64;
    for seg in &segs {
        let buf = storage
            .read_file(&seg.path)
            .map_err(|e| JournalError::io(&seg.path, "read segment", e))?;
        let mut problem = |offset: u64, what: String| {
            rep.problems.push(Problem {
                file: seg.path.clone(),
                offset,
                what,
            })
        };
        if let Some(e) = expected {
            if seg.first_seq > e {
                problem(0, format!("records {e}..={} are missing (a segment is missing or the previous one was cut short)", seg.first_seq - 1));
            } else if seg.first_seq < e {
                problem(
                    0,
                    format!(
                        "segment starts at seq {} but seq {} was due (overlap)",
                        seg.first_seq, e
                    ),
                );
            }
        }
        let mut seg_totals = Totals::default();
        let mut next = seg.first_seq;
        let mut off = SEGMENT_HEADER_BYTES as usize;
        if let Err(p) = decode_header(&buf, seg.first_seq) {
            problem(0, p.to_string());
            off = match find_valid_record(&buf, 0, seg.first_seq) {
                Some((o, _)) => o,
                None => buf.len(),
            };
        }
        while off < buf.len() {
            match check_record(&buf, off) {
                RecordCheck::Ok(h) => {
                    if h.seq != next {
                        problem(
                            off as u64,
                            format!("sequence gap: expected seq {next}, found {}", h.seq),
                        );
                    }
                    if let Some(check) = check.as_mut() {
                        let start = off + RECORD_HEADER_BYTES as usize;
                        let payload = &buf[start..start + h.payload_len as usize];
                        payloads_checked += 1;
                        if let Err(why) = check(h.seq, h.kind, payload) {
                            problem(
                                off as u64,
                                format!("record seq {} does not decode: {why}", h.seq),
                            );
                        }
                    }
                    seg_totals.add(h.seq, h.rows, h.time_ns);
                    next = h.seq.saturating_add(1);
                    off += h.total_len() as usize;
                }
                bad => {
                    let why = bad.problem().unwrap_or_default();
                    match find_valid_record(&buf, off + 1, next) {
                        Some((o, h)) => {
                            problem(
                                off as u64,
                                format!(
                                    "{} unreadable byte(s), records {next}..={} lost: {why}",
                                    o - off,
                                    h.seq - 1
                                ),
                            );
                            // The loss is reported here; do not report it again as a gap.
                            next = h.seq;
                            off = o;
                        }
                        None => {
                            problem(
                                off as u64,
                                format!(
                                    "torn tail: {} byte(s) after the last valid record: {why}",
                                    buf.len() - off
                                ),
                            );
                            off = buf.len();
                        }
                    }
                }
            }
        }
        expected = Some(next);
        merge(&mut all, &seg_totals);
        rep.bytes += buf.len() as u64;
        rep.segments.push(SegmentStats {
            file: seg.path.clone(),
            bytes: buf.len() as u64,
            records: seg_totals.records,
            rows: seg_totals.rows,
            first_seq: seg_totals.first_seq,
            last_seq: seg_totals.last_seq,
        });
    }
    rep.records = all.records;
    rep.rows = all.rows;
    rep.first_seq = all.first_seq;
    rep.last_seq = all.last_seq;
    rep.first_time_ns = all.first_time_ns;
    rep.last_time_ns = all.last_time_ns;
    rep.payloads_checked = payloads_checked;
    Ok(rep)
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "journal {}", self.dir.display())?;
        writeln!(f, "  segments: {}", self.segments.len())?;
        writeln!(f, "  records:  {} valid", self.records)?;
        writeln!(f, "  rows:     {}", self.rows)?;
        writeln!(f, "  bytes:    {}", self.bytes)?;
        if self.records > 0 {
            writeln!(f, "  seq:      {} ..= {}", self.first_seq, self.last_seq)?;
            writeln!(
                f,
                "  time_ns:  {} ..= {}",
                self.first_time_ns.unwrap_or(0),
                self.last_time_ns.unwrap_or(0)
            )?;
        }
        if self.problems.is_empty() {
            writeln!(f, "  problems: none")?;
        } else {
            writeln!(f, "  problems: {}", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "    {p}")?;
            }
        }
        Ok(())
    }
}

/// What `repair` did (or, from `plan_repair`, would do).
#[derive(Debug, Clone)]
pub struct RepairReport {
    pub dir: PathBuf,
    /// Where the cut bytes were (or would be) copied.
    pub backup_dir: PathBuf,
    /// False for a plan: nothing was changed.
    pub applied: bool,
    /// The problem at the cut, if the journal needed repair.
    pub problem: Option<String>,
    /// Records and last sequence number kept.
    pub records: u64,
    pub last_seq: u64,
    /// Everything cut (or to be cut), with where its copy went.
    pub dropped: Vec<Dropped>,
}

impl RepairReport {
    pub fn needed(&self) -> bool {
        self.problem.is_some()
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            None => write!(
                f,
                "journal {}: consistent, nothing to repair ({} records, last seq {}).",
                self.dir.display(),
                self.records,
                self.last_seq
            ),
            Some(p) => {
                let verb = if self.applied { "kept" } else { "would keep" };
                write!(
                    f,
                    "journal {}: {p}. Repair {verb} {} record(s) up to seq {}",
                    self.dir.display(),
                    self.records,
                    self.last_seq
                )?;
                for d in &self.dropped {
                    let verb = if self.applied { "cut" } else { "would cut" };
                    write!(
                        f,
                        "; {verb} {} byte(s) of {} from offset {}",
                        d.bytes,
                        d.file.display(),
                        d.offset
                    )?;
                    if let Some(s) = &d.saved_to {
                        write!(f, " (copy in {})", s.display())?;
                    }
                }
                write!(f, ". Backup directory: {}.", self.backup_dir.display())
            }
        }
    }
}

/// Says what `repair` would do, changing nothing.
pub fn plan_repair(dir: &Path, backup_dir: &Path) -> Result<RepairReport> {
    let storage = crate::storage::FsStorage;
    let plan = plan(&storage, dir)?;
    if plan.segs.is_empty() {
        return Err(JournalError::NoJournal {
            dir: dir.to_path_buf(),
        });
    }
    let mut dropped = Vec::new();
    if let Some(cut) = &plan.cut {
        if let Some((i, off)) = cut.truncate {
            let len = plan.sizes[i];
            dropped.push(Dropped {
                file: plan.segs[i].path.clone(),
                offset: off,
                bytes: len.saturating_sub(off),
                saved_to: None,
                what: cut.problem.to_string(),
            });
        }
        for j in cut.drop_from..plan.segs.len() {
            dropped.push(Dropped {
                file: plan.segs[j].path.clone(),
                offset: 0,
                bytes: plan.sizes.get(j).copied().unwrap_or(0),
                saved_to: None,
                what: "segment after the cut".into(),
            });
        }
    }
    Ok(RepairReport {
        dir: dir.to_path_buf(),
        backup_dir: backup_dir.to_path_buf(),
        applied: false,
        problem: plan.cut.as_ref().map(|c| c.problem.to_string()),
        records: plan.kept.records,
        last_seq: plan.kept.last_seq,
        dropped,
    })
}

/// Cuts the journal in `dir` back to its longest consistent prefix (the
/// same cut point-in-time recovery makes), first copying every byte it cuts
/// into `backup_dir` (whole segments moved there, partial ones copied) and
/// fsyncing the copies. Returns after the truncation is fsynced. Takes the
/// directory lock, so it refuses to run beside a live writer. A journal that
/// needs no repair is left untouched.
pub fn repair(dir: &Path, backup_dir: &Path) -> Result<RepairReport> {
    repair_with(&crate::storage::FsStorage, dir, backup_dir)
}

pub(crate) fn repair_with(
    storage: &dyn Storage,
    dir: &Path,
    backup_dir: &Path,
) -> Result<RepairReport> {
    let _lock = storage.lock_dir(dir).map_err(|e| JournalError::Locked {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    let mut p = plan(storage, dir)?;
    if p.segs.is_empty() {
        return Err(JournalError::NoJournal {
            dir: dir.to_path_buf(),
        });
    }
    let problem = p.cut.as_ref().map(|c| c.problem.to_string());
    let (_, dropped) = apply(storage, dir, &mut p, Save::All(backup_dir))?;
    Ok(RepairReport {
        dir: dir.to_path_buf(),
        backup_dir: backup_dir.to_path_buf(),
        applied: true,
        problem,
        records: p.kept.records,
        last_seq: p.kept.last_seq,
        dropped,
    })
}

/// Runs recovery on `dir`: plans, then applies the cut a torn tail (any
/// mode) or point-in-time recovery calls for, or refuses in strict mode.
/// Returns the plan as it stands after the cut and the report.
pub(crate) fn recover(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
) -> Result<(Plan, RecoveryReport)> {
    let mut p = plan(storage, dir)?;
    let problem = p.cut.as_ref().map(|c| c.problem.to_string());
    let (truncated, dropped) = match p.cut.as_ref().map(|c| c.torn) {
        None => (None, Vec::new()),
        Some(true) => apply(storage, dir, &mut p, Save::TornOnly)?,
        Some(false) => match mode {
            RecoveryMode::Strict => {
                let cut = p.cut.take().expect("checked above");
                tracing::error!(dir = %dir.display(), problem = %cut.problem, "journal: strict recovery refused");
                return Err(cut.problem);
            }
            RecoveryMode::PointInTime => {
                let d = fresh_dropped_dir(storage, dir)?;
                apply(storage, dir, &mut p, Save::All(&d))?
            }
        },
    };
    let report = RecoveryReport {
        dir: dir.to_path_buf(),
        mode,
        segments: p.segs.len(),
        records: p.kept.records,
        rows: p.kept.rows,
        first_seq: p.kept.first_seq,
        last_seq: p.kept.last_seq,
        truncated,
        dropped,
        problem,
    };
    if !report.is_clean() {
        tracing::warn!("{report}");
    }
    Ok((p, report))
}
