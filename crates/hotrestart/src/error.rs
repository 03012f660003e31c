//! The crate's error enum. It separates corruption (bytes on disk that do not
//! decode), I/O failures, bad input from the caller, and a poisoned store.

use std::io;
use std::path::PathBuf;

/// Result alias for the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A sealed chunk (or a chunk header) does not decode. Reload refuses to
    /// guess: it names the file and byte offset so an operator can look.
    #[error("corrupt chunk {} at offset {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The caller passed something the store does not accept.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Another process (or another `Store`) holds the directory's lock.
    #[error("store directory {} is locked by another user", .0.display())]
    Locked(PathBuf),
    /// A write or fsync failed earlier; the on-disk state is unknown, so the store
    /// refuses further writes until it is reopened (reload establishes the truth).
    #[error("store is poisoned after an earlier failure: {0}")]
    Poisoned(String),
    /// A test-only GC crash point was reached (see `Config::test_gc_crash`).
    #[doc(hidden)]
    #[error("GC stopped at a test crash point")]
    GcTestCrash,
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
