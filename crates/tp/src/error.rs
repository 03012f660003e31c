//! The tp's error enums. `TpError` is what a running tp answers a client
//! with: bad input, a journal that can no longer acknowledge (I/O,
//! poisoned), shutdown. `OpenError` is why a tp did not start: an
//! operator's bad input (a schema that does not fit the journal),
//! corruption on disk, or I/O; no client ever sees one.

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
    /// This node is a standby: it takes records from its primary only.
    /// `primary` is its replication address; `http` and `ilp` where clients
    /// write to it, once the standby has heard them from it.
    #[error(
        "this node is a standby of {primary}: it accepts no writes; write to the primary{}",
        match (http, ilp) { (Some(h), Some(i)) => format!(" at {h} (HTTP) or {i} (ILP TCP)"), _ => format!(" {primary}") }
    )]
    Standby {
        primary: String,
        http: Option<String>,
        ilp: Option<String>,
    },
    /// This node was the primary and has stopped taking writes: it can no
    /// longer be sure it still is (its lease may expire, a newer epoch was
    /// seen, a switchover is handing over). Nothing of the write is
    /// acknowledged; it may be journaled here and cut when the node rejoins.
    #[error("this node is fenced and accepts no writes ({reason}){}", match primary { Some(p) => format!("; the primary is {p}"), None => String::new() })]
    Fenced {
        reason: String,
        primary: Option<String>,
    },
    /// Semi-sync: the standbys did not report the update durable in time;
    /// it is journaled here but was not acknowledged.
    #[error("{0}")]
    NotReplicated(String),
}

/// Why `Tickerplant::open` refused to start. Nothing was appended to the
/// journal in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The schema given does not fit the journal's records (an incompatible
    /// change, or records of a journal without a schema history that do not
    /// decode under it).
    #[error("{0}")]
    SchemaMismatch(String),
    /// The operator's configuration cannot be used as given.
    #[error("{0}")]
    BadInput(String),
    /// Bytes on disk are damaged: the journal (strict recovery refused it)
    /// or its schema history.
    #[error("{0}")]
    Corrupt(String),
    /// The operating system failed an operation.
    #[error("{0}")]
    Io(String),
}
