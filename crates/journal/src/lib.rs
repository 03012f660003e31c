//! tickdb-journal owns the tickerplant's journal: a directory of segmented,
//! append-only files of CRC32C-framed, sequence-numbered records, and
//! everything that writes, recovers, verifies, repairs and replays it.
//!
//! Records are opaque payload bytes here (the tp stores tickdb-core's codec
//! encoding of one update). The format is documented byte by byte in
//! `docs/journal.md` and in [`format`].
//!
//! Durability contract, in one place:
//! - [`Journal::append`] returns BEFORE any write or fsync.
//! - [`Journal::commit`] returns AFTER the write syscalls and, under
//!   [`FsyncPolicy::Always`] (or an elapsed `IntervalMs`), AFTER the fdatasync.
//! - [`Journal::append_raw`] (a follower appending a primary's record
//!   byte for byte) returns BEFORE any write or fsync, like `append`.
//! - [`Journal::sync`], [`Journal::close`], [`Journal::roll_segment`] and
//!   [`Journal::roll_segment_at`] return AFTER their fsync (the rolls: unless
//!   the policy is `Never`).
//! - After any failed write or fsync the journal is poisoned: every later
//!   append and commit fails until it is reopened, because a retried fsync
//!   can report success for data the kernel already dropped.
//!
//! The journal directory also keeps the schema history ([`SchemaHistory`],
//! the file `SCHEMA`): which schema the records were written under, from
//! which sequence number on. The journal stores it and checks its framing;
//! the tp decides what a schema means and whether a change is compatible.
//!
//! Replication's side of it: [`RawReader`] yields each record's exact
//! on-disk bytes and where the primary's segments start; a follower appends
//! them with [`Journal::append_raw`] and [`Journal::roll_segment_at`], and
//! [`compare`] checks two journals record by record and file by file.
//!
//! All I/O of the writer, recovery, repair and the schema history goes
//! through the [`Storage`] trait: [`FsStorage`] for real files,
//! [`FaultyStorage`] to inject faults.

mod compare;
mod cut;
pub mod epochs;
pub mod error;
pub mod format;
mod journal;
mod raw_reader;
mod reader;
mod recovery;
pub mod schema_history;
pub mod storage;
mod stream;
mod trim;

pub use compare::{
    compare, CompareReport, Coverage, DiffKind, Difference, FieldDiff, JournalSide, Location, Which,
};
pub use cut::{cut_after, CutReport};
pub use epochs::{EpochHistory, EpochStart};
pub use error::JournalError;
pub use format::{SegmentHeader, RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_MAX_DEFAULT};
pub use journal::{
    FsyncPolicy, Journal, JournalOptions, RecoveryMode, RollPolicy, SEGMENT_BYTES_MIN,
    WRITE_BUFFER_BYTES_MAX,
};
pub use raw_reader::{RawReader, RawRecord, RawRecordMeta};
pub use reader::{JournalReader, Record};
pub use recovery::{
    plan_repair, repair, verify, verify_payloads, Dropped, PayloadCheck, Problem, RecoveryReport,
    RepairReport, SegmentStats, Truncation, VerifyReport,
};
pub use schema_history::{SchemaEntry, SchemaHistory};
pub use storage::{Fault, FaultyStorage, FsStorage, Op, Storage, StorageFile};
pub use trim::{trim, TrimReport};
