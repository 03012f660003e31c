//! The rdb's error enum: a sequence gap (the link to the tp must be
//! re-established), corrupt data from the tp or the journal, I/O, and
//! protocol errors.

#[derive(Debug, thiserror::Error)]
pub enum RdbError {
    #[error("sequence gap: expected update {expected}, got {got}")]
    Gap { expected: u64, got: u64 },
    #[error("corrupt update {seq}: {reason}")]
    Corrupt { seq: u64, reason: String },
    #[error("update {seq} does not fit the schema: {reason}")]
    Apply { seq: u64, reason: String },
    #[error("tp {addr}: {reason}")]
    Link { addr: String, reason: String },
    #[error("schema from tp: {0}")]
    Schema(String),
}
