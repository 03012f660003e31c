//! Hot Restart for the rdb (after Hot Restart Persistence): the rdb's tables persisted in a
//! tickdb-hotrestart store, so that a restart reloads them at disk speed and
//! replays only the journal after the last checkpoint.
//!
//! - `keys`: the record key layout (table, generation, row or key)
//! - `values`: record values as references to the column store's rows
//! - `meta`: the checkpoint record (journal sequence S, tables' state)
//! - `checkpoint`: the consistent cut and what it writes
//! - `restore`: rebuilding the column store from the store after a restart
//!
//! Life of a `HotRestart`: `open` (reloads the store, reads the last durable
//! checkpoint), `restore` into an empty column store built from the
//! checkpoint's schema (once, also when the store is new), then `checkpoint`
//! on a schedule (`spawn_schedule`) and on command, and a last one at
//! shutdown. The rdb replays the journal from S + 1 after `restore`.

mod checkpoint;
mod keys;
mod meta;
mod restore;
mod values;

pub use checkpoint::CheckpointReport;
pub use meta::{CheckpointMeta, TableMeta};
pub use restore::RestoreReport;

use crate::error::RdbError;
use crate::rdb::Rdb;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickdb_core::store::Store as ColumnStore;
use tickdb_core::Schema;
use tickdb_hotrestart::{Config, ReloadReport, Store as HotStore};

/// Default time between scheduled checkpoints: the five minutes of Zero-Impact Crash Recovery for kdb+.
pub const CHECKPOINT_INTERVAL_S_DEFAULT: u64 = 300;

/// How the rdb's Hot Restart store is opened.
#[derive(Debug, Clone)]
pub struct HotOptions {
    pub dir: PathBuf,
    /// Reload mapper threads (and as many reader threads), and table
    /// restore threads.
    pub parallelism: usize,
    /// fsync at checkpoints (off only for benchmarks and tests that need no
    /// power-loss safety).
    pub fsync: bool,
    /// Progress bars on stderr while reloading and restoring.
    pub progress: bool,
    /// The store's chunk file size.
    pub chunk_size_bytes: u64,
}

impl HotOptions {
    pub fn new(dir: impl Into<PathBuf>) -> HotOptions {
        let store = Config::default();
        HotOptions {
            dir: dir.into(),
            parallelism: store.parallelism,
            fsync: true,
            progress: false,
            chunk_size_bytes: store.chunk_size_bytes,
        }
    }
}

/// Persistence state of one table, as of the last durable checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableState {
    /// Key generation of the table's records; a clear starts a new one.
    generation: u64,
    /// The column store's generation (clear count) these rows belong to.
    store_generation: u64,
    /// Raw rows of that column-store generation already persisted.
    rows: u64,
    /// Keyed tables: raw row r has ordinal `ordinal_base + r`.
    ordinal_base: u64,
    /// Append tables: symbol names persisted (ids 0..symbols).
    symbols: u64,
    /// Restored from codec segments (a store written before chunk images):
    /// the next checkpoint writes the table again, as chunk images, under
    /// a new generation, and then removes the old one.
    legacy: bool,
}

/// What the checkpoints carry besides the tables: set by `restore`.
#[derive(Debug, Clone)]
struct Setup {
    tables_filter: Vec<String>,
    symbols_filter: Vec<String>,
}

#[derive(Default)]
struct CkState {
    setup: Option<Setup>,
    tables: HashMap<String, TableState>,
}

#[derive(Default)]
struct Counts {
    checkpoints: u64,
    failures: u64,
    last: Option<CheckpointReport>,
    last_error: Option<String>,
    restore: Option<RestoreReport>,
}

/// What `/status` shows of Hot Restart.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HotStatus {
    pub dir: String,
    /// The journal sequence the store is durable up to (0: no checkpoint yet).
    pub durable_seq: u64,
    pub checkpoints: u64,
    pub checkpoint_failures: u64,
    pub last_checkpoint: Option<CheckpointReport>,
    pub last_error: Option<String>,
    /// At start: the store's reload (seconds, bytes, records).
    pub reload_seconds: f64,
    pub reload_bytes: u64,
    pub reload_records: u64,
    pub reload_bytes_per_sec: f64,
    pub torn_tails: usize,
    /// At start: rebuilding the tables from the reloaded records.
    pub restore: Option<RestoreReport>,
    /// The store's I/O and GC figures.
    pub store: tickdb_hotrestart::IoStats,
}

/// The rdb's Hot Restart store and its checkpoints.
pub struct HotRestart {
    dir: PathBuf,
    store: HotStore,
    loaded: Option<CheckpointMeta>,
    reload: ReloadReport,
    parallelism: usize,
    progress: bool,
    ck: Mutex<CkState>,
    counts: Mutex<Counts>,
    /// The last durable checkpoint's sequence, readable while a checkpoint
    /// holds `ck` (through its fsyncs).
    durable_seq: AtomicU64,
    test_crash: Mutex<Option<CheckpointCrash>>,
}

/// Points where a test can make the next checkpoint stop as if the process
/// died there (the test then drops the rdb without a last checkpoint).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointCrash {
    /// After this many records were written, before the checkpoint record.
    AfterRecords(u64),
    /// After the checkpoint record is durable, before cleared tables' old
    /// generations are removed.
    BeforeClear,
}

pub(crate) fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A one-line description of a schema's shape (tables, kinds, columns and
/// types): what persisted rows depend on. Memory placement is not part of it.
fn schema_shape(s: &Schema) -> Vec<String> {
    s.tables
        .iter()
        .map(|t| {
            let cols: Vec<String> = t
                .columns
                .iter()
                .map(|c| format!("{} {}", c.name, c.ty.name()))
                .collect();
            format!("{} {:?} ({})", t.name, t.kind, cols.join(", "))
        })
        .collect()
}

impl HotRestart {
    /// Opens (or creates) the store in `opts.dir`, reloading it with the
    /// parallel pipeline, and reads its last durable checkpoint.
    pub fn open(opts: &HotOptions) -> Result<HotRestart, RdbError> {
        let cfg = Config {
            chunk_size_bytes: opts.chunk_size_bytes,
            parallelism: opts.parallelism.max(1),
            fsync: opts.fsync,
            progress: opts.progress,
            ..Config::default()
        };
        let (store, reload) = HotStore::open(&opts.dir, cfg).map_err(|e| {
            RdbError::Restore(format!("hot restart store {}: {e}", opts.dir.display()))
        })?;
        for t in &reload.torn_tails {
            tracing::warn!(
                "hot restart store: torn tail of {} cut at byte {} ({} bytes dropped: {})",
                t.file.display(),
                t.offset,
                t.bytes_dropped,
                t.reason
            );
        }
        let loaded = match store.meta(meta::META_NAME) {
            Some(b) => Some(CheckpointMeta::decode(&b)?),
            None => None,
        };
        Ok(HotRestart {
            dir: opts.dir.clone(),
            store,
            loaded: loaded.clone(),
            reload,
            parallelism: opts.parallelism.max(1),
            progress: opts.progress,
            durable_seq: AtomicU64::new(loaded.as_ref().map(|m| m.seq).unwrap_or(0)),
            ck: Mutex::new(CkState::default()),
            counts: Mutex::new(Counts::default()),
            test_crash: Mutex::new(None),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last durable checkpoint found at open, if any: its sequence S (the
    /// journal replays from S + 1), schema and subscription filters.
    pub fn checkpoint_found(&self) -> Option<&CheckpointMeta> {
        self.loaded.as_ref()
    }

    pub fn reload_report(&self) -> &ReloadReport {
        &self.reload
    }

    /// Checks that an rdb started with `schema` and these subscription
    /// filters, following a tp at sequence `tp_seq`, may continue from the
    /// stored checkpoint. The error says what differs and what to do.
    pub fn check_compatible(
        &self,
        schema: &Schema,
        tables_filter: &[String],
        symbols_filter: &[String],
        tp_seq: u64,
    ) -> Result<(), RdbError> {
        let Some(m) = &self.loaded else {
            return Ok(());
        };
        let hint = format!(
            "start with an empty --hot-restart directory (or remove {}) to rebuild from the journal",
            self.dir.display()
        );
        let stored = Schema::parse(&m.schema_toml, "hot restart checkpoint")
            .map_err(|e| RdbError::Restore(format!("stored schema: {e}")))?;
        let (a, b) = (schema_shape(&stored), schema_shape(schema));
        // A schema that grew at run time since the checkpoint (tables or
        // columns added) is fine: the store is restored under the
        // checkpoint's schema, and the journal after it replays the change.
        let grew = tickdb_core::schema_change::extension(&stored, schema).is_ok();
        if a != b && !grew {
            let diff = a
                .iter()
                .zip(&b)
                .find(|(x, y)| x != y)
                .map(|(x, y)| format!("stored '{x}', now '{y}'"))
                .unwrap_or_else(|| format!("stored {} tables, now {}", a.len(), b.len()));
            return Err(RdbError::Mismatch(format!(
                "the schema differs from the one the hot restart store was written with ({diff}); {hint}"
            )));
        }
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v
        };
        if sorted(&m.tables_filter) != sorted(tables_filter)
            || sorted(&m.symbols_filter) != sorted(symbols_filter)
        {
            return Err(RdbError::Mismatch(format!(
                "the hot restart store holds tables {:?} and symbols {:?} (empty: all), but this rdb subscribes to tables {:?} and symbols {:?}; {hint}",
                m.tables_filter, m.symbols_filter, tables_filter, symbols_filter
            )));
        }
        if tp_seq < m.seq {
            return Err(RdbError::Mismatch(format!(
                "the hot restart store is at journal sequence {} but the tp's journal ends at {tp_seq}: the store belongs to another journal (a new day, or another tp); {hint}",
                m.seq
            )));
        }
        Ok(())
    }

    /// Rebuilds `store` (empty, built from the checkpoint's schema, or the
    /// rdb's schema when the store is new) from the stored records. Each
    /// checkpoint records the store's schema as cut (it grows with run-time
    /// schema changes). Call once,
    /// before any checkpoint. Returns the journal sequence the restored state
    /// stands for: the rdb applies updates from the next one.
    pub fn restore(
        &self,
        store: &ColumnStore,
        tables_filter: &[String],
        symbols_filter: &[String],
    ) -> Result<RestoreReport, RdbError> {
        let (tables, report) = restore::restore(
            &self.store,
            self.loaded.as_ref(),
            store,
            self.parallelism,
            self.progress,
        )?;
        let mut ck = self.ck.lock();
        ck.setup = Some(Setup {
            tables_filter: tables_filter.to_vec(),
            symbols_filter: symbols_filter.to_vec(),
        });
        ck.tables = tables;
        self.counts.lock().restore = Some(report.clone());
        Ok(report)
    }

    /// Takes a checkpoint of `rdb` now (see `checkpoint`). Returns after the
    /// store is durable up to the reported sequence; records the outcome for
    /// `/status`.
    pub fn checkpoint(&self, rdb: &Rdb) -> Result<CheckpointReport, RdbError> {
        let r = checkpoint::run(self, rdb);
        let mut c = self.counts.lock();
        match &r {
            Ok(rep) => {
                c.checkpoints += 1;
                c.last = Some(rep.clone());
                c.last_error = None;
            }
            Err(RdbError::Deferred(_)) => {}
            Err(e) => {
                c.failures += 1;
                c.last_error = Some(e.to_string());
            }
        }
        r
    }

    fn test_crash_due(&self, records: u64) -> Result<(), RdbError> {
        match *self.test_crash.lock() {
            Some(CheckpointCrash::AfterRecords(n)) if records >= n => Err(RdbError::Checkpoint(
                format!("test crash after {records} records"),
            )),
            _ => Ok(()),
        }
    }

    /// Makes the next checkpoint stop at `at` (tests).
    #[doc(hidden)]
    pub fn set_test_crash(&self, at: Option<CheckpointCrash>) {
        *self.test_crash.lock() = at;
    }

    /// The journal sequence the store is durable up to (0: none yet).
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    pub fn status(&self) -> HotStatus {
        let c = self.counts.lock();
        HotStatus {
            dir: self.dir.display().to_string(),
            durable_seq: self.durable_seq(),
            checkpoints: c.checkpoints,
            checkpoint_failures: c.failures,
            last_checkpoint: c.last.clone(),
            last_error: c.last_error.clone(),
            reload_seconds: self.reload.elapsed.as_secs_f64(),
            reload_bytes: self.reload.bytes_loaded,
            reload_records: self.reload.records_loaded,
            reload_bytes_per_sec: self.reload.bytes_per_sec(),
            torn_tails: self.reload.torn_tails.len(),
            restore: c.restore.clone(),
            store: self.store.io_stats(),
        }
    }
}

/// A scheduled-checkpoint thread; stops (without a last checkpoint) when
/// dropped or on `stop`.
pub struct Schedule {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Schedule {
    pub fn stop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checkpoints `rdb` every `interval`, logging each one, and calls `after`
/// with every durable checkpoint (the embedded role trims the journal there).
pub fn spawn_schedule(
    rdb: Arc<Rdb>,
    interval: Duration,
    after: Box<dyn Fn(&CheckpointReport) + Send>,
) -> Result<Schedule, RdbError> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let thread = std::thread::Builder::new()
        .name("rdb-checkpoint".into())
        .spawn(move || loop {
            match rx.recv_timeout(interval) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            match rdb.checkpoint() {
                Ok(Some(r)) => {
                    log_checkpoint("scheduled", &r);
                    after(&r);
                }
                Ok(None) => return,
                Err(e @ RdbError::Deferred(_)) => tracing::info!("scheduled {e}"),
                Err(e) => tracing::error!("scheduled checkpoint failed: {e}"),
            }
        })
        .map_err(|e| RdbError::Checkpoint(format!("spawning the checkpoint thread: {e}")))?;
    Ok(Schedule {
        stop: Some(tx),
        thread: Some(thread),
    })
}

/// One log line per checkpoint.
pub fn log_checkpoint(why: &str, r: &CheckpointReport) {
    tracing::info!(
        "{why} checkpoint: durable up to seq {}, {} rows in {} records ({:.1} MB) in {} ms, ingest paused {} µs",
        r.seq,
        r.rows_written,
        r.records_written,
        r.bytes_written as f64 / 1e6,
        r.duration_ms,
        r.pause_us
    );
}
