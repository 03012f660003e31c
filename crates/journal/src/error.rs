//! The journal's error enum. It keeps three families apart so that callers
//! can react differently: I/O failures (the disk said no), corruption and
//! sequence problems (the bytes on disk are not a consistent journal), and
//! bad input (the caller asked for something impossible, or handed over
//! bytes that do not check out: `BadInput`, `OutOfSequence`). `Poisoned` is the
//! state after an I/O failure on the write path: the journal refuses all
//! further writes until it is reopened, because after a failed write or fsync
//! the kernel may already have dropped the dirty pages, and retrying the fsync
//! would report success for data that is gone.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The operating system failed an operation (`op`) on `path`.
    #[error("journal I/O: {op} {path}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Bytes at `offset` in `file` are not a valid header or record, and
    /// (during recovery) valid records follow them, so this is not a torn tail.
    #[error("journal corrupt: {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A valid record at `offset` in `file` carries sequence number `found`
    /// where `expected` was due: records are missing.
    #[error(
        "journal sequence gap: {file} at offset {offset}: expected seq {expected}, found {found}"
    )]
    Gap {
        file: PathBuf,
        offset: u64,
        expected: u64,
        found: u64,
    },
    /// The segment `file` starts at `found` but the journal so far ends at
    /// `expected - 1`: a segment is missing, or the previous one was cut short.
    #[error(
        "journal segment missing: {file} starts at seq {found} but seq {expected} was due \
         (the records before {found} from {expected} on are missing: a segment was removed or the previous one was cut short)"
    )]
    MissingSegment {
        file: PathBuf,
        expected: u64,
        found: u64,
    },
    /// A segment written by a newer (or unknown) format version.
    #[error("journal segment {file}: unsupported format version {version} (this build reads version {supported})")]
    UnsupportedVersion {
        file: PathBuf,
        version: u32,
        supported: u32,
    },
    /// Another process (or another `Journal` in this one) holds the journal
    /// directory's lock.
    #[error("journal {dir} is locked by another writer: {source}")]
    Locked {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An earlier write or fsync failed; nothing more is accepted until the
    /// journal is reopened (the process restarted).
    #[error("journal poisoned by an earlier failure, restart to recover: {0}")]
    Poisoned(String),
    /// A read-only tool (verify, repair) was pointed at a directory with no
    /// segment: there is nothing to check, which must never read as "clean".
    #[error(
        "no journal here: {dir} holds no journal-*.log segments (looked for files named \
         journal-<20-digit first seq>.log)"
    )]
    NoJournal { dir: PathBuf },
    /// The caller's request cannot be met (a payload too long, a sequence
    /// number that does not exist, a full write buffer, a shipped record
    /// whose bytes do not check out).
    #[error("journal: bad input: {0}")]
    BadInput(String),
    /// A record or segment start handed to a follower's journal
    /// (`append_raw`, `roll_segment_at`) carries seq `found`, but the journal
    /// continues at `expected`. Bad input, not corruption: the journal's own
    /// files are fine; the caller is ahead of it or behind it.
    #[error(
        "journal: bad input: {what} carries seq {found}, but this journal's next seq is {expected}"
    )]
    OutOfSequence {
        /// "shipped record" or "segment start".
        what: &'static str,
        expected: u64,
        found: u64,
    },
}

impl JournalError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        JournalError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    /// True for the errors that describe the bytes on disk (corruption, gaps,
    /// missing segments) rather than an I/O failure or a caller mistake.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            JournalError::Corrupt { .. }
                | JournalError::Gap { .. }
                | JournalError::MissingSegment { .. }
        )
    }

    /// True for the errors that say the caller asked for something
    /// impossible (the journal and its files are untouched and fine).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            JournalError::BadInput(_) | JournalError::OutOfSequence { .. }
        )
    }
}
