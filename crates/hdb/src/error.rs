//! Errors of the HDB. Every variant names the file or directory it is about
//! and what was wrong with it, so an operator can act on the message alone.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HdbError {
    #[error("{op} {path}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: parquet: {what}: {source}")]
    Parquet {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: parquet::errors::ParquetError,
    },

    #[error("{path}: arrow: {what}: {source}")]
    Arrow {
        path: PathBuf,
        what: String,
        #[source]
        source: arrow_schema::ArrowError,
    },

    /// A directory entry whose name does not follow the layout
    /// (`date=YYYY-MM-DD`, `part-NNNNN.parquet`).
    #[error("{path}: {what}")]
    BadName { path: PathBuf, what: String },

    /// The table cannot be written to the HDB (keyed tables are not, and an
    /// append table needs a time column of type timestamp).
    #[error("table '{table}': {what}")]
    Table { table: String, what: String },

    /// Input batches that do not have the table's Arrow schema.
    #[error("table '{table}': input batch {batch}: {what}")]
    Input {
        table: String,
        batch: usize,
        what: String,
    },

    /// The file system refused `renameat2(RENAME_NOREPLACE)`: the HDB cannot
    /// be committed atomically there without risking an overwrite.
    #[error(
        "renameat2(RENAME_NOREPLACE) {from} -> {to}: {source} (the file system does not support \
         no-replace renames; the HDB needs a local file system such as ext4, xfs, btrfs or tmpfs)"
    )]
    RenameUnsupported {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An import input that is not acceptable: the file, and the line and
    /// column when the problem is a value.
    #[error("{path}: {what}")]
    Import { path: PathBuf, what: String },

    /// Reading the journal for the cross-check failed as a whole.
    #[error("journal {path}: {source}")]
    Journal {
        path: PathBuf,
        #[source]
        source: tickdb_journal::JournalError,
    },
}

impl HdbError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        HdbError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn parquet(
        path: impl Into<PathBuf>,
        what: &'static str,
        source: parquet::errors::ParquetError,
    ) -> Self {
        HdbError::Parquet {
            path: path.into(),
            what,
            source,
        }
    }

    pub(crate) fn arrow(
        path: impl Into<PathBuf>,
        what: impl Into<String>,
        source: arrow_schema::ArrowError,
    ) -> Self {
        HdbError::Arrow {
            path: path.into(),
            what: what.into(),
            source,
        }
    }
}
