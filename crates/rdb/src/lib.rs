//! The real-time database (rdb): holds the day's tables in the column store
//! and keeps them equal to the tp's journal.
//!
//! - `rdb`: applies updates strictly in sequence (no gap, no duplicate)
//! - `remote`: follows a tp over the subscription port, reconnecting from
//!   the last applied sequence after any break
//! - `hot`: Hot Restart: the tables persisted in a log-structured store,
//!   checkpoints, and the restore after a restart

pub mod error;
pub mod hot;
pub mod rdb;
pub mod remote;

pub use error::RdbError;
pub use rdb::{Rdb, RdbStatus, TablesCut};
