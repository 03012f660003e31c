//! The crate's error enum. It separates bad input (a schema file or a batch
//! that does not fit the schema), corruption (bytes that fail to decode) and
//! I/O (memory-domain files).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("schema {path}: {reason}")]
    Schema { path: String, reason: String },
    #[error("unknown table '{0}'")]
    UnknownTable(String),
    #[error("table '{table}': unknown column '{column}'")]
    UnknownColumn { table: String, column: String },
    #[error("table '{table}' column '{column}': {reason}")]
    BadValue {
        table: String,
        column: String,
        reason: String,
    },
    /// A schema change (`CREATE TABLE`, `ALTER TABLE ... ADD COLUMN`) that
    /// cannot be made; the reason names what was wrong. Nothing was applied.
    #[error("{0}")]
    SchemaChange(String),
    #[error("corrupt batch encoding at byte {offset}: {reason}")]
    Corrupt { offset: usize, reason: String },
    /// A chunk image (Hot Restart's column records) that does not decode.
    #[error("corrupt chunk image at byte {offset}: {reason}")]
    CorruptImage { offset: usize, reason: String },
    #[error("memory domain file {path}: {source}")]
    DomainIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("memory domain: {0}")]
    Domain(String),
    /// A day has ended and its Parquet is not committed yet: its rows are
    /// in neither the tables nor the HDB, so a cut of the tables alone
    /// would miss them.
    #[error("end of day {date} (seq {seq}) is still being written to the HDB; try again once it is committed")]
    DayClosing { date: String, seq: u64 },
}

pub type Result<T> = std::result::Result<T, CoreError>;
