//! The tickerplant (tp): validates updates against the schema, appends them
//! to the journal, and only then publishes them to subscribers and
//! acknowledges them, per the fsync policy.
//!
//! - `tickerplant`: the handle every ingest path and subscriber uses
//! - `journal_thread`: the single thread that owns the journal and the
//!   sequence; group commit happens there
//! - `hub`: subscribers, their filters and bounded queues, zero-latency or
//!   timer publishing
//! - `ingest`: ILP text → validated update
//! - `ilp_tcp`: the ILP TCP listener
//! - `sub_server`: the subscription port remote rdbs (and the agg) use
//! - `schema_binding`: the journal's schema history: the schema is bound to
//!   the journal it writes, changes are recorded or refused

pub mod error;
pub mod hub;
pub mod ilp_tcp;
pub mod ingest;
mod journal_thread;
pub mod schema_binding;
pub mod sub_server;
pub mod tickerplant;

pub use error::{OpenError, TpError};
pub use hub::{SubFilter, SubQueue, Update};
pub use tickerplant::{Subscription, Tickerplant, TpConfig, TpStatus};

/// Journal record kind of an update (tickdb-core codec payload).
pub const RECORD_KIND_UPDATE: u8 = 1;

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
