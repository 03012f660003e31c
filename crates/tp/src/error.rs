//! The tp's error enum: bad input from a client, a journal that can no longer
//! acknowledge (I/O, poisoned), and shutdown.

#[derive(Debug, thiserror::Error)]
pub enum TpError {
    /// A client sent something the schema or the protocol rejects.
    #[error("{0}")]
    BadInput(String),
    /// An ILP line was rejected; `line` is 1-based within the request.
    #[error("line {line}: {reason}")]
    BadLine { line: u64, reason: String },
    /// The request is larger than the configured bound.
    #[error("{0}")]
    TooLarge(String),
    /// The journal failed (write, fsync, full disk): nothing is acknowledged
    /// any more until the tp is restarted.
    #[error("journal unavailable, update NOT acknowledged: {0}")]
    Journal(String),
    #[error("tickerplant is shutting down")]
    Shutdown,
    #[error("{0}")]
    Io(String),
}
