//! The tickerplant (tp): validates updates against the schema, appends them
//! to the journal, and only then publishes them to subscribers and
//! acknowledges them, per the fsync policy.
//!
//! - `tickerplant`: the handle every ingest path and subscriber uses
//! - `journal_thread`: the single thread that owns the journal and the
//!   sequence; group commit happens there
//! - `hub`: fan-out of updates to subscribers, zero-latency or timer
//!   publishing, and whom to cut off when memory runs short
//! - `sub_queue`: one subscriber's bounded queue and what it holds
//! - `sub_memory`: the one bound on all subscriber buffer memory
//! - `catchup`: a network subscriber's journal read-ahead, within that bound
//! - `ingest`: ILP text → validated update
//! - `ilp_tcp`: the ILP TCP listener (idle and partial-line timeouts)
//! - `ilp_auth`: QuestDB's key challenge on ILP TCP, with a users file
//! - `sub_server`: the subscription port remote rdbs (and the agg) use
//! - `conn_limit`: the bound on connections per port
//! - `sync_gate`: semi-sync replication: acknowledge once `k` standbys hold
//!   an update durably
//! - `schema_binding`: the journal's schema history: the schema is bound to
//!   the journal it writes, changes are recorded or refused
//! - `schema_change`: `CREATE TABLE` and `ALTER TABLE ... ADD COLUMN` at run
//!   time, journaled as a marker in the update stream

pub mod catchup;
pub mod conn_limit;
pub mod error;
pub mod hub;
pub mod ilp_auth;
pub mod ilp_tcp;
pub mod ingest;
mod journal_thread;
pub mod role;
pub mod schema_binding;
pub mod schema_change;
pub mod sub_memory;
pub mod sub_queue;
pub mod sub_server;
pub mod sync_gate;
pub mod tickerplant;

pub use error::{OpenError, TpError};
pub use hub::{Delivered, SubFilter, SubForm, SubQueue, Update};
pub use journal_thread::ReplicatedItem;
pub use role::Role;
pub use tickerplant::{
    EncodedSubscription, Subscription, Tickerplant, TpConfig, TpStatus, WriteAck,
};

/// Journal record kind of an update (tickdb-core codec payload).
pub const RECORD_KIND_UPDATE: u8 = 1;

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
