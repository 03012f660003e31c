//! tickdb Hot Restart: an in-memory key → value store persisted log-structured, after
//! Hazelcast's Hot Restart Persistence and Sprite LFS.
//!
//! - Every update is appended as a record (value, tombstone or prefix tombstone),
//!   with a CRC32C and a global sequence number, to bounded chunk files; values
//!   and tombstones go to separate chunks (`format`, `chunk`).
//! - A RAM index holds every live key with its value, chunk, seq and size, plus
//!   per-chunk live/garbage accounting (`index`).
//! - A GC thread compacts chunks chosen by cost-benefit ((garbage / live) × age),
//!   a few per cycle, copying live records from RAM sorted by age (`gc`).
//! - Reload maps the chunks (huge pages where the file system allows) with
//!   `parallelism` mapper threads, checks and decodes them with `parallelism`
//!   reader threads, and hands the records to partition threads that rebuild
//!   the index by record seq (`reload`).
//!
//! The byte layout, GC policy, back-pressure bound and durability guarantees are
//! documented in `docs/hot-restart.md`.

mod chunk;
mod error;
pub mod format;
mod gc;
mod index;
mod reload;
mod store;

pub use chunk::WRITE_BUFFER_BYTES;
pub use error::{Error, Result};
pub use format::{ChunkKind, RecordKind};
pub use gc::EMPTY_CHUNKS_PER_CYCLE_MAX;
pub use index::{ChunkState, Key, MappedBytes, Value, ValueSource};
pub use reload::{
    map_chunk_file, ReloadReport, TornTail, PARTITION_QUEUE_BATCHES, RELOAD_BATCH_BYTES,
    RELOAD_BATCH_RECORDS, RELOAD_MAP_VALUE_BYTES_MIN,
};
pub use store::{
    ChunkStats, Config, GcConfig, GcCrashPoint, IoStats, Stats, Store,
    BACKPRESSURE_GARBAGE_CHUNKS_MIN, BACKPRESSURE_WAIT_SLICE_MS, CHUNK_BYTES_MAX, CHUNK_BYTES_MIN,
    LOCK_FILE_NAME, META_KEY_PREFIX, PARALLELISM_MAX, PARTITIONS_MAX,
};
