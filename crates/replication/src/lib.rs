//! tickdb-replication: a standby follows its primary's journal byte for
//! byte, the first half of Zero-Impact Crash Recovery for kdb+ (a log
//! forwarder ships new journal records to a standby, which replays them and
//! checkpoints on its own schedule).
//!
//! - `protocol`: the wire format (`--repl-port`), byte by byte
//! - `auth`: the shared secret and the challenge both sides answer
//! - `primary`: the replication listener: handshake, divergence checks, one
//!   shipper per standby
//! - `shipper`: ships one standby its records, from the journal files (so a
//!   slow standby costs the primary neither memory nor waiting), streaming,
//!   or every `--forward-interval-s`
//! - `standby`: the follower: connect, check, append byte-identically,
//!   acknowledge, reconnect
//! - `reseed`: a standby that needs records the primary trimmed starts
//!   from a consistent cut of the primary's tables, then the journal
//! - `status`: what /status and /metrics show on both sides
//!
//! The semi-sync gate (acknowledge a write only once `k` standbys hold it
//! durably) is the tickerplant's (`tickdb_tp::sync_gate`); the shippers
//! report each standby's durable sequence to it.

pub mod auth;
pub mod primary;
pub mod protocol;
pub mod reseed;
pub mod shipper;
pub mod standby;
pub mod status;

/// The replication crate's error.
#[derive(Debug, thiserror::Error)]
pub enum ReplError {
    /// The peer sent bytes that are not a valid message, or a message out
    /// of turn.
    #[error("replication protocol: {0}")]
    Protocol(String),
    /// The peer refused us, or we refuse it: bad secret, wrong version,
    /// diverged journals, a sequence one side never had.
    #[error("{0}")]
    Refused(String),
    /// An operator's bad setting (a secret too short, a bad address).
    #[error("{0}")]
    BadInput(String),
    /// The journal failed, or holds bytes that do not check.
    #[error("journal: {0}")]
    Journal(String),
    #[error("network I/O: {0}")]
    Io(#[from] std::io::Error),
    /// No TLS session with the peer: it does not speak TLS on that port,
    /// or its certificate is not trusted (says which). Retried, as a lost
    /// connection is: the peer may be restarting with its certificate.
    #[error("{0}")]
    Tls(String),
    /// The primary says this standby's journal holds records past
    /// `keep_through` that the primary never had (by their epoch
    /// histories): they must be cut before it can follow.
    #[error(
        "diverged from the primary (epoch {primary_epoch}) after seq {keep_through}: {reason}"
    )]
    Diverged {
        keep_through: u64,
        primary_epoch: u32,
        reason: String,
    },
}

/// Now, in ns since the Unix epoch.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
