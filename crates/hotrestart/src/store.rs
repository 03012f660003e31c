//! The public `Store`: configuration, the write path (append a record, then update
//! the index, under one mutex), reads from RAM, `sync()`, stats, and the lifetime
//! of the GC thread. It owns the active chunk writers and the directory lock.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::chunk::{self, ChunkWriter};
use crate::error::{Error, Result};
use crate::format::{self, ChunkKind, FileState, RecordKind, KEY_BYTES_MAX, VALUE_BYTES_MAX};
use crate::gc;
use crate::index::{ChunkState, Index, Key, Value, ValueSource};
use crate::reload::{self, ReloadReport};

/// Smallest chunk accepted: tests use tiny chunks to exercise GC.
pub const CHUNK_BYTES_MIN: u64 = 4 * 1024;
/// Largest chunk accepted: GC plans and copies a chunk at a time, and a crash
/// can leave a torn tail anywhere in the active one.
pub const CHUNK_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// Most reload mapper (and reader) threads.
pub const PARALLELISM_MAX: usize = 64;
/// Most index partitions (reload partition threads).
pub const PARTITIONS_MAX: usize = 256;
/// Back-pressure never engages below this many chunks of garbage: the two active
/// chunks can hold garbage GC may not touch yet, so the bound must exceed them.
pub const BACKPRESSURE_GARBAGE_CHUNKS_MIN: u64 = 4;
/// A back-pressured writer re-checks at least this often (and on every GC commit).
pub const BACKPRESSURE_WAIT_SLICE_MS: u64 = 10;
/// Keys under this prefix are the store's own (metadata); user keys may not use it.
pub const META_KEY_PREFIX: &[u8] = b"\xff\xffhotrestart-meta/";
/// Name of the lock file flock()ed by the one open `Store`.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Garbage collector settings.
#[derive(Clone, Debug)]
pub struct GcConfig {
    /// Run the GC thread. Without it nothing is reclaimed unless `run_gc_cycle`
    /// is called, and there is no back-pressure.
    pub enabled: bool,
    /// How often the GC thread looks for work when nobody wakes it.
    pub interval_ms: u64,
    /// Most chunks with live data compacted per cycle (incremental GC). Chunks
    /// holding only garbage are deleted on top of these, as they cost no copying.
    pub chunks_per_cycle: usize,
    /// A chunk is a candidate once garbage / (garbage + live) reaches this ratio.
    pub garbage_ratio_min: f64,
    /// Back-pressure bound: writers wait while the store holds more than this
    /// many chunks' worth of garbage bytes (`× chunk_size_bytes`).
    pub backpressure_garbage_chunks: u64,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            enabled: true,
            interval_ms: 100,
            chunks_per_cycle: 4,
            garbage_ratio_min: 0.5,
            backpressure_garbage_chunks: 64,
        }
    }
}

/// Points where a test can make GC stop as if the process died there.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcCrashPoint {
    /// Half of the live records written to temporary output files.
    MidOutput,
    /// Outputs renamed to their final names; sources not committed or deleted.
    AfterRename,
    /// Index committed; source files not yet deleted.
    BeforeUnlink,
}

/// Store configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// A chunk is sealed when the next record would take it past this size.
    pub chunk_size_bytes: u64,
    /// Reload mapper threads (each reading its own chunk files) and as many
    /// reader threads (each checking and decoding the files mapped).
    pub parallelism: usize,
    /// Index partitions, and reload partition threads (one per partition).
    pub partitions: usize,
    /// fsync on `sync()`, on seal and in GC. Without it the store survives a
    /// process crash (everything flushed reaches the OS) but not a power loss.
    pub fsync: bool,
    /// Show a progress bar (bytes and records) on stderr during reload.
    pub progress: bool,
    pub gc: GcConfig,
    #[doc(hidden)]
    pub test_gc_crash: Option<GcCrashPoint>,
}

impl Default for Config {
    fn default() -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        Config {
            chunk_size_bytes: 64 * 1024 * 1024,
            parallelism: 2,
            partitions: cores.clamp(1, 16),
            fsync: true,
            progress: false,
            gc: GcConfig::default(),
            test_gc_crash: None,
        }
    }
}

impl Config {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidInput(m));
        if !(CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&self.chunk_size_bytes) {
            return bad(format!(
                "chunk_size_bytes {} outside {CHUNK_BYTES_MIN}..={CHUNK_BYTES_MAX}",
                self.chunk_size_bytes
            ));
        }
        if !(1..=PARALLELISM_MAX).contains(&self.parallelism) {
            return bad(format!(
                "parallelism {} outside 1..={PARALLELISM_MAX}",
                self.parallelism
            ));
        }
        if !(1..=PARTITIONS_MAX).contains(&self.partitions) {
            return bad(format!(
                "partitions {} outside 1..={PARTITIONS_MAX}",
                self.partitions
            ));
        }
        if self.gc.chunks_per_cycle == 0 {
            return bad("gc.chunks_per_cycle must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.gc.garbage_ratio_min) {
            return bad("gc.garbage_ratio_min must be within 0..=1".into());
        }
        if self.gc.backpressure_garbage_chunks < BACKPRESSURE_GARBAGE_CHUNKS_MIN {
            return bad(format!(
                "gc.backpressure_garbage_chunks must be at least {BACKPRESSURE_GARBAGE_CHUNKS_MIN}"
            ));
        }
        Ok(())
    }
}

/// Per-chunk accounting, as reported in `Stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkStats {
    pub seq: u64,
    pub kind: ChunkKind,
    pub state: ChunkState,
    pub file_bytes: u64,
    pub live_bytes: u64,
    pub live_records: u64,
    pub garbage_bytes: u64,
    pub garbage_records: u64,
}

/// The store's totals and counters without per-key figures (`Store::io_stats`):
/// what an owner shows in its status and metrics (hence `Serialize`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct IoStats {
    pub disk_bytes: u64,
    pub garbage_bytes: u64,
    pub chunks: u64,
    pub user_bytes_written: u64,
    pub gc_bytes_written: u64,
    pub write_amplification: f64,
    pub gc_runs: u64,
    pub gc_chunks_reclaimed: u64,
}

/// (user + GC bytes) / user bytes; 1.0 before anything is written.
fn write_amplification(c: &Counters) -> f64 {
    if c.user_bytes_written == 0 {
        1.0
    } else {
        (c.user_bytes_written + c.gc_bytes_written) as f64 / c.user_bytes_written as f64
    }
}

/// A snapshot of the store's counters.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Keys with a value (metadata keys included).
    pub live_records: u64,
    /// Encoded bytes of those values' records.
    pub live_bytes: u64,
    /// Key tombstones still needed on disk.
    pub tombstones: u64,
    /// Prefix tombstones still needed on disk.
    pub prefix_tombstones: u64,
    /// Sum of chunk file sizes.
    pub disk_bytes: u64,
    /// Garbage bytes over all chunks.
    pub garbage_bytes: u64,
    /// Every chunk, in chunk seq order.
    pub chunks: Vec<ChunkStats>,
    /// Record bytes appended by put/remove/clear_prefix/set_meta.
    pub user_bytes_written: u64,
    /// Bytes written by GC (records and headers).
    pub gc_bytes_written: u64,
    /// (user + GC bytes) / user bytes; 1.0 before anything is written.
    pub write_amplification: f64,
    /// GC cycles that reclaimed something.
    pub gc_runs: u64,
    /// Chunks deleted by GC.
    pub gc_chunks_reclaimed: u64,
    /// Writes that waited for GC under back-pressure, and for how long in total.
    pub backpressure_waits: u64,
    pub backpressure_wait_ms: u64,
}

#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub user_bytes_written: u64,
    pub gc_bytes_written: u64,
    pub gc_runs: u64,
    pub gc_chunks_reclaimed: u64,
    pub backpressure_waits: u64,
    pub backpressure_wait_ns: u64,
}

/// Everything under the store mutex.
pub(crate) struct Inner {
    pub index: Index,
    /// Active writers, by chunk kind: [value, tombstone].
    pub active: [Option<ChunkWriter>; 2],
    /// Full chunks waiting to be fsynced and renamed to their sealed names.
    pub pending: Vec<ChunkWriter>,
    pub next_seq: u64,
    /// Chunk seq → bytes known durable (fsynced) in its `.active` file.
    pub durable: HashMap<u64, u64>,
    /// Bumped on every chunk file creation, so sync() knows when the directory
    /// needs an fsync.
    pub dir_gen: u64,
    pub dir_synced_gen: u64,
    pub counters: Counters,
}

fn kind_slot(k: ChunkKind) -> usize {
    match k {
        ChunkKind::Value => 0,
        ChunkKind::Tombstone => 1,
    }
}

/// State shared between the `Store` handle and the GC thread.
pub(crate) struct Shared {
    pub dir: PathBuf,
    pub cfg: Config,
    pub inner: Mutex<Inner>,
    /// Serialises sync() calls (the renames of sealed chunks must not race).
    pub sync_lock: Mutex<()>,
    /// Serialises GC cycles (thread and `run_gc_cycle`).
    pub gc_lock: Mutex<()>,
    /// Signalled after every GC commit: back-pressured writers wait on it.
    pub progress: Condvar,
    pub poisoned: OnceLock<String>,
    pub stop: AtomicBool,
    pub gc_running: AtomicBool,
    pub gc_crashed: AtomicBool,
    pub chunk_seq: AtomicU64,
    pub gc_wake: Sender<()>,
}

impl Shared {
    pub fn check_poison(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(m) => Err(Error::Poisoned(m.clone())),
            None => Ok(()),
        }
    }

    /// Marks the store poisoned after an I/O failure and returns the error.
    pub fn poison(&self, e: Error) -> Error {
        if matches!(e, Error::Io { .. }) {
            let _ = self.poisoned.set(e.to_string());
            tracing::error!(error = %e, "hot restart store poisoned");
        }
        e
    }

    pub fn backpressure_bytes(&self) -> u64 {
        self.cfg
            .gc
            .backpressure_garbage_chunks
            .saturating_mul(self.cfg.chunk_size_bytes)
    }

    /// Locks the store for a write, waiting first while garbage exceeds the
    /// back-pressure bound and the GC thread is running to bring it down.
    fn lock_for_write(&self) -> Result<MutexGuard<'_, Inner>> {
        let mut g = self.inner.lock();
        let mut waited: Option<Instant> = None;
        loop {
            self.check_poison()?;
            let pressed = self.cfg.gc.enabled
                && self.gc_running.load(Ordering::Acquire)
                && g.index.garbage_bytes_total > self.backpressure_bytes();
            if !pressed {
                break;
            }
            waited.get_or_insert_with(Instant::now);
            let _ = self.gc_wake.try_send(());
            self.progress
                .wait_for(&mut g, Duration::from_millis(BACKPRESSURE_WAIT_SLICE_MS));
        }
        if let Some(t) = waited {
            g.counters.backpressure_waits += 1;
            g.counters.backpressure_wait_ns += t.elapsed().as_nanos() as u64;
        }
        Ok(g)
    }

    /// Appends one record to the active chunk of its kind, sealing and starting
    /// chunks as needed. Returns (record seq, chunk seq, encoded size).
    fn append(
        &self,
        g: &mut Inner,
        kind: RecordKind,
        key: &[u8],
        value: &[u8],
    ) -> Result<(u64, u64, u32)> {
        let ck = kind.chunk_kind();
        let size = format::encoded_len(key.len(), value.len());
        let slot = kind_slot(ck);
        let full = g.active[slot]
            .as_ref()
            .is_some_and(|w| !w.fits(size, self.cfg.chunk_size_bytes));
        if full {
            if let Some(mut w) = g.active[slot].take() {
                w.flush()?;
                g.index.set_chunk_state(w.seq, ChunkState::Sealing);
                g.pending.push(w);
                // A sealed chunk is new GC work.
                let _ = self.gc_wake.try_send(());
            }
        }
        if g.active[slot].is_none() {
            let seq = self.chunk_seq.fetch_add(1, Ordering::Relaxed);
            let w = ChunkWriter::create(&self.dir, seq, ck)?;
            g.index.add_chunk(seq, ck, ChunkState::Active);
            g.dir_gen += 1;
            g.active[slot] = Some(w);
        }
        let seq = g.next_seq;
        g.next_seq += 1;
        let Some(w) = g.active[slot].as_mut() else {
            return Err(Error::InvalidInput("no active chunk".into()));
        };
        w.append(seq, kind, key, value)?;
        g.counters.user_bytes_written += size as u64;
        Ok((seq, w.seq, size as u32))
    }

    fn put_raw(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut g = self.lock_for_write()?;
        let (seq, chunk, size) = self
            .append(&mut g, RecordKind::Value, key, value)
            .map_err(|e| self.poison(e))?;
        g.index.apply_put(key, Value::from(value), seq, chunk, size);
        Ok(())
    }

    /// Flushes the active chunks, fsyncs them and every chunk waiting to be
    /// sealed, renames the latter to their sealed names and fsyncs the directory.
    /// Returns after all of it is durable.
    pub fn sync_all(&self) -> Result<()> {
        let _s = self.sync_lock.lock();
        self.check_poison()?;
        let (actives, pending, dir_gen, dir_synced) = {
            let mut g = self.inner.lock();
            let mut actives = Vec::new();
            for w in g.active.iter_mut().flatten() {
                w.flush().map_err(|e| self.poison(e))?;
                actives.push((w.seq, w.file.clone(), w.path.clone(), w.len));
            }
            (
                actives,
                std::mem::take(&mut g.pending),
                g.dir_gen,
                g.dir_synced_gen,
            )
        };
        let res = (|| -> Result<()> {
            if self.cfg.fsync {
                for (_, f, p, _) in &actives {
                    chunk::fsync_file(f, p)?;
                }
                for w in &pending {
                    chunk::fsync_file(&w.file, &w.path)?;
                }
            }
            for w in &pending {
                let to = chunk::chunk_path(&self.dir, w.seq, w.kind, FileState::Sealed);
                std::fs::rename(&w.path, &to).map_err(|e| Error::io("rename", &w.path, e))?;
            }
            if self.cfg.fsync && (!pending.is_empty() || dir_gen != dir_synced) {
                chunk::fsync_dir(&self.dir)?;
            }
            Ok(())
        })();
        res.map_err(|e| self.poison(e))?;
        let mut g = self.inner.lock();
        for (seq, _, _, len) in actives {
            g.durable.insert(seq, len);
        }
        for w in &pending {
            g.durable.remove(&w.seq);
            g.index.set_chunk_state(w.seq, ChunkState::Sealed);
        }
        g.dir_synced_gen = g.dir_synced_gen.max(dir_gen);
        Ok(())
    }

    fn stop_gc(&self, handle: Option<JoinHandle<()>>) {
        self.stop.store(true, Ordering::Release);
        let _ = self.gc_wake.try_send(());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// The Hot Restart store: an in-memory key → value map persisted as a
/// log-structured set of chunk files. All methods take `&self`; the store is
/// `Send + Sync`.
pub struct Store {
    shared: Arc<Shared>,
    gc_thread: Mutex<Option<JoinHandle<()>>>,
    /// Held (flock) for the store's lifetime.
    _lock: File,
}

fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE_NAME);
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(Error::Locked(dir.to_path_buf()));
    }
    Ok(f)
}

fn check_user_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::InvalidInput(format!(
            "key of {} bytes exceeds {KEY_BYTES_MAX}",
            key.len()
        )));
    }
    if key.starts_with(META_KEY_PREFIX) {
        return Err(Error::InvalidInput(
            "key uses the reserved metadata prefix".into(),
        ));
    }
    Ok(())
}

fn meta_key(name: &[u8]) -> Result<Vec<u8>> {
    let mut k = META_KEY_PREFIX.to_vec();
    k.extend_from_slice(name);
    if k.len() > KEY_BYTES_MAX {
        return Err(Error::InvalidInput("metadata name too long".into()));
    }
    Ok(k)
}

impl Store {
    /// Opens (or creates) the store in `dir`, reloading every chunk with the
    /// parallel pipeline. A torn tail of an active chunk is truncated and
    /// reported; corruption in a sealed chunk is an error.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<(Store, ReloadReport)> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create dir", &dir, e))?;
        let lock = lock_dir(&dir)?;
        let loaded = reload::reload(&dir, &config)?;
        let (tx, rx): (Sender<()>, Receiver<()>) = crossbeam_channel::bounded(1);
        let gc_enabled = config.gc.enabled;
        let shared = Arc::new(Shared {
            dir,
            cfg: config,
            inner: Mutex::new(Inner {
                index: loaded.index,
                active: [None, None],
                pending: Vec::new(),
                next_seq: loaded.next_seq,
                durable: HashMap::new(),
                dir_gen: 0,
                dir_synced_gen: 0,
                counters: Counters::default(),
            }),
            sync_lock: Mutex::new(()),
            gc_lock: Mutex::new(()),
            progress: Condvar::new(),
            poisoned: OnceLock::new(),
            stop: AtomicBool::new(false),
            gc_running: AtomicBool::new(gc_enabled),
            gc_crashed: AtomicBool::new(false),
            chunk_seq: AtomicU64::new(loaded.next_chunk_seq),
            gc_wake: tx,
        });
        let handle = if gc_enabled {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name("hotrestart-gc".into())
                .spawn(move || gc::gc_thread(s, rx))
                .map_err(|e| Error::io("spawn gc thread", &shared.dir, e))?;
            Some(h)
        } else {
            None
        };
        Ok((
            Store {
                shared,
                gc_thread: Mutex::new(handle),
                _lock: lock,
            },
            loaded.report,
        ))
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Puts `key` → `value`. Returns once the record is in the store's write
    /// buffer, before it is durable (see `sync`).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_user_key(key)?;
        if value.len() > VALUE_BYTES_MAX {
            return Err(Error::InvalidInput(format!(
                "value of {} bytes exceeds {VALUE_BYTES_MAX}",
                value.len()
            )));
        }
        self.shared.put_raw(key, value)
    }

    /// Removes `key`, writing a tombstone if it had a value. Returns whether it
    /// had one. Returns before the tombstone is durable (see `sync`).
    pub fn remove(&self, key: &[u8]) -> Result<bool> {
        check_user_key(key)?;
        let sh = &self.shared;
        let mut g = sh.lock_for_write()?;
        if g.index.get_value(key).is_none() {
            // Nothing live to remove: every older record of the key is already
            // shadowed by a tombstone the index still tracks, so none is written.
            return Ok(false);
        }
        let (seq, chunk, size) = sh
            .append(&mut g, RecordKind::Tombstone, key, &[])
            .map_err(|e| sh.poison(e))?;
        g.index.apply_remove(key, seq, chunk, size);
        Ok(true)
    }

    /// Removes every key starting with `prefix` with one prefix tombstone.
    /// Returns the number of values removed. The prefix may not overlap the
    /// reserved metadata space (so the empty prefix is refused).
    pub fn clear_prefix(&self, prefix: &[u8]) -> Result<u64> {
        if prefix.len() > KEY_BYTES_MAX {
            return Err(Error::InvalidInput("prefix too long".into()));
        }
        if META_KEY_PREFIX.starts_with(prefix) || prefix.starts_with(META_KEY_PREFIX) {
            return Err(Error::InvalidInput(
                "prefix overlaps the reserved metadata prefix".into(),
            ));
        }
        let sh = &self.shared;
        let mut g = sh.lock_for_write()?;
        if !g.index.any_with_prefix(prefix) {
            return Ok(0);
        }
        let (seq, chunk, size) = sh
            .append(&mut g, RecordKind::PrefixTombstone, prefix, &[])
            .map_err(|e| sh.poison(e))?;
        Ok(g.index.apply_clear_prefix(prefix, seq, chunk, size))
    }

    /// The value of `key`, from RAM.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_shared(key).map(|v| v.to_vec())
    }

    /// The value of `key` without copying it (a value put with `put_source` is
    /// encoded).
    pub fn get_shared(&self, key: &[u8]) -> Option<Arc<[u8]>> {
        if key.starts_with(META_KEY_PREFIX) {
            return None;
        }
        let v = self.shared.inner.lock().index.get_value(key)?;
        Some(v.to_shared())
    }

    /// Puts `key` → the bytes `source` encodes, and keeps `source` (not the bytes)
    /// in RAM: for an owner that holds the data in memory anyway (the RDB's column
    /// store), so that the store does not hold a second copy. GC encodes the
    /// source again when it copies the record. Returns before the record is
    /// durable (see `sync`).
    pub fn put_source(&self, key: &[u8], source: Arc<dyn ValueSource>) -> Result<()> {
        check_user_key(key)?;
        let mut bytes = Vec::new();
        source.encode_into(&mut bytes);
        if bytes.len() > VALUE_BYTES_MAX {
            return Err(Error::InvalidInput(format!(
                "value of {} bytes exceeds {VALUE_BYTES_MAX}",
                bytes.len()
            )));
        }
        let sh = &self.shared;
        let mut g = sh.lock_for_write()?;
        let (seq, chunk, size) = sh
            .append(&mut g, RecordKind::Value, key, &bytes)
            .map_err(|e| sh.poison(e))?;
        g.index
            .apply_put(key, Value::Source(source), seq, chunk, size);
        Ok(())
    }

    /// Replaces the in-RAM form of `key`'s current value with `source`, writing
    /// nothing: after a reload, the owner rebuilds its data from the reloaded
    /// bytes and then hands the store its own form, so the bytes can be freed.
    /// `source` must encode to exactly the stored bytes (checked in debug
    /// builds). Returns false if `key` has no value.
    pub fn rebind(&self, key: &[u8], source: Arc<dyn ValueSource>) -> Result<bool> {
        check_user_key(key)?;
        let mut g = self.shared.inner.lock();
        let Some(current) = g.index.get_value(key) else {
            return Ok(false);
        };
        if cfg!(debug_assertions) {
            let mut fresh = Vec::new();
            source.encode_into(&mut fresh);
            if fresh.as_slice() != current.bytes().as_ref() {
                return Err(Error::InvalidInput(
                    "rebind: the source does not encode to the stored value".into(),
                ));
            }
        }
        Ok(g.index.replace_value(key, Value::Source(source)))
    }

    /// A snapshot of every (key, value) under `prefix`, in key order. Values are
    /// shared, not copied. Metadata keys are never included.
    pub fn iter_prefix(&self, prefix: &[u8]) -> std::vec::IntoIter<(Key, Value)> {
        let mut v = self.shared.inner.lock().index.values_with_prefix(prefix);
        v.retain(|(k, _)| !k.starts_with(META_KEY_PREFIX));
        v.into_iter()
    }

    /// Sets a named metadata value (e.g. "applied journal sequence"). Ordering
    /// guarantee: it first makes every operation that returned before the call
    /// durable (as `sync` does), then appends the metadata record. So after any
    /// crash, if the reloaded metadata shows this value, every earlier operation
    /// is reloaded too. Returns before the metadata record itself is durable: call
    /// `sync` for that.
    pub fn set_meta(&self, name: &[u8], value: &[u8]) -> Result<()> {
        let key = meta_key(name)?;
        if value.len() > VALUE_BYTES_MAX {
            return Err(Error::InvalidInput("metadata value too large".into()));
        }
        self.shared.sync_all()?;
        self.shared.put_raw(&key, value)
    }

    /// A named metadata value.
    pub fn meta(&self, name: &[u8]) -> Option<Vec<u8>> {
        let key = meta_key(name).ok()?;
        self.shared
            .inner
            .lock()
            .index
            .get_value(&key)
            .map(|v| v.bytes().to_vec())
    }

    /// `set_meta` for a u64 (little endian).
    pub fn set_meta_u64(&self, name: &[u8], value: u64) -> Result<()> {
        self.set_meta(name, &value.to_le_bytes())
    }

    /// `meta` for a u64; `None` if absent or not 8 bytes.
    pub fn meta_u64(&self, name: &[u8]) -> Option<u64> {
        let v = self.meta(name)?;
        let a: [u8; 8] = v.as_slice().try_into().ok()?;
        Some(u64::from_le_bytes(a))
    }

    /// Makes every operation that returned before this call durable: flushes and
    /// fsyncs the active chunks, seals waiting chunks and fsyncs the directory.
    /// Returns after the fsyncs (with `fsync: false`, after the writes to the OS).
    /// Writers are not blocked during the fsyncs.
    pub fn sync(&self) -> Result<()> {
        self.shared.sync_all()
    }

    /// Runs one GC cycle on the calling thread (serialised with the GC thread).
    /// Returns whether it reclaimed or changed anything.
    pub fn run_gc_cycle(&self) -> Result<bool> {
        gc::run_cycle(&self.shared)
    }

    /// A snapshot of the counters and per-chunk accounting.
    pub fn stats(&self) -> Stats {
        let g = self.shared.inner.lock();
        let (live_records, live_bytes, tombstones) = g.index.counts();
        let chunks: Vec<ChunkStats> = g
            .index
            .chunks
            .iter()
            .map(|(&seq, c)| ChunkStats {
                seq,
                kind: c.kind,
                state: c.state,
                file_bytes: c.file_bytes,
                live_bytes: c.live_bytes,
                live_records: c.live_records,
                garbage_bytes: c.garbage_bytes,
                garbage_records: c.garbage_records,
            })
            .collect();
        let c = &g.counters;
        let wa = write_amplification(c);
        Stats {
            live_records,
            live_bytes,
            tombstones,
            prefix_tombstones: g.index.prefix_tombs.len() as u64,
            disk_bytes: chunks.iter().map(|c| c.file_bytes).sum(),
            garbage_bytes: g.index.garbage_bytes_total,
            chunks,
            user_bytes_written: c.user_bytes_written,
            gc_bytes_written: c.gc_bytes_written,
            write_amplification: wa,
            gc_runs: c.gc_runs,
            gc_chunks_reclaimed: c.gc_chunks_reclaimed,
            backpressure_waits: c.backpressure_waits,
            backpressure_wait_ms: c.backpressure_wait_ns / 1_000_000,
        }
    }

    /// The counters and per-store totals of `stats`, without walking the key
    /// index (cheap enough for every `/status` and `/metrics` request).
    pub fn io_stats(&self) -> IoStats {
        let g = self.shared.inner.lock();
        let c = &g.counters;
        IoStats {
            disk_bytes: g.index.chunks.values().map(|c| c.file_bytes).sum(),
            garbage_bytes: g.index.garbage_bytes_total,
            chunks: g.index.chunks.len() as u64,
            user_bytes_written: c.user_bytes_written,
            gc_bytes_written: c.gc_bytes_written,
            write_amplification: write_amplification(c),
            gc_runs: c.gc_runs,
            gc_chunks_reclaimed: c.gc_chunks_reclaimed,
        }
    }

    /// Stops GC, syncs and closes the store. Returns after everything is durable.
    pub fn close(self) -> Result<()> {
        let h = self.gc_thread.lock().take();
        self.shared.stop_gc(h);
        self.shared.sync_all()
    }

    /// Whether the GC thread stopped at a test crash point.
    #[doc(hidden)]
    pub fn gc_crashed(&self) -> bool {
        self.shared.gc_crashed.load(Ordering::Acquire)
    }

    /// Simulates a crash: stops GC where it is, then either hands buffered bytes
    /// to the OS (`flush`: a crash after `write(2)`) or drops them, and returns,
    /// for each `.active` file, the length known durable (fsynced). Tests tear
    /// files only beyond those lengths.
    #[doc(hidden)]
    pub fn simulate_crash(self, flush: bool) -> Vec<(PathBuf, u64)> {
        let h = self.gc_thread.lock().take();
        self.shared.stop_gc(h);
        let mut g = self.shared.inner.lock();
        let mut out = Vec::new();
        let g = &mut *g;
        for w in g.active.iter_mut().flatten().chain(g.pending.iter_mut()) {
            if flush {
                let _ = w.flush();
            }
            w.discard_buffer();
            out.push((w.path.clone(), g.durable.get(&w.seq).copied().unwrap_or(0)));
        }
        out
    }
}

impl Drop for Store {
    /// Stops GC and hands buffered bytes to the OS (no fsync): a dropped store
    /// behaves like a crash, except that nothing already accepted is discarded.
    fn drop(&mut self) {
        let h = self.gc_thread.lock().take();
        self.shared.stop_gc(h);
        let mut g = self.shared.inner.lock();
        for w in g.active.iter_mut().flatten() {
            if let Err(e) = w.flush() {
                tracing::warn!(error = %e, "flush on drop failed");
            }
        }
    }
}
