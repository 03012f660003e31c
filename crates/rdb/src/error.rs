//! The rdb's error enum: a sequence gap (the link to the tp must be
//! re-established), corrupt data from the tp or the journal, I/O, protocol
//! errors, and Hot Restart's restore, mismatch and checkpoint failures.

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
    /// The tp holds another history than this rdb applied (a failover in
    /// async mode promoted a standby that never had this rdb's last
    /// records): following on would give a gap or a duplicate.
    #[error("{0}")]
    Diverged(String),
    /// The Hot Restart store cannot be restored (corrupt or inconsistent
    /// records, I/O): the rdb does not start on a partial state.
    #[error("hot restart: {0}")]
    Restore(String),
    /// The Hot Restart store was written for another schema, subscription or
    /// journal than this rdb's.
    #[error("hot restart: {0}")]
    Mismatch(String),
    /// A checkpoint failed; the previous durable checkpoint still stands.
    #[error("checkpoint failed: {0}")]
    Checkpoint(String),
    /// A checkpoint waits for an ended day's Parquet commit: until then the
    /// previous durable checkpoint (which still holds that day) stands.
    #[error("checkpoint deferred: {0}")]
    Deferred(String),
}
