//! Reload: rebuilds the index from the chunk files with a pipeline of
//! `parallelism` mapper threads (each maps whole chunk files, populated: the
//! disk reads), `parallelism` reader threads (each checks and decodes the
//! files mapped, while the mappers read the next) and `partitions` partition
//! threads (each owns the keys that hash to it and resolves them by record
//! seq). Prefix tombstones go to the coordinating thread and are applied by
//! every partition once all records are in. Nothing depends on arrival
//! order, so the result is identical for any parallelism.
//!
//! It also repairs what a crash can leave: unfinished GC output (`.gctmp`) is
//! deleted; an `.active` chunk with a torn tail is truncated to its last valid
//! record, fsynced, reported and sealed. Corruption in a sealed chunk is an error.

use std::collections::{BTreeMap, HashSet};

// Per-chunk accounting is updated once per superseded record and once per live
// key: hashbrown's default hasher (foldhash) costs a fraction of std's SipHash
// there, and chunk seqs come from our own files, not from the network.
use hashbrown::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use indicatif::{ProgressBar, ProgressStyle};

use crate::chunk;
use crate::error::{Error, Result};
use crate::format::{self, ChunkKind, FileState, RecordKind, CHUNK_HEADER_BYTES};
use crate::index::{
    partition_of, ChunkInfo, ChunkState, Entry, Index, Key, KeyMap, MappedBytes, PrefixTomb, Slot,
    Value,
};
use crate::store::Config;

/// Most records per batch sent from a reader to a partition: large enough that
/// handing a batch over (a channel send, often a thread wake-up) is rare next
/// to decoding its records, small enough to keep partitions busy early.
pub const RELOAD_BATCH_RECORDS: usize = 4096;
/// A batch is also sent once its records' encoded bytes reach this, so that
/// large records (the rdb's segments) do not pile up in a batch.
pub const RELOAD_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Batches queued per partition before readers block. With the batch bounds
/// this bounds reload memory in flight: about `PARTITION_QUEUE_BATCHES ×
/// RELOAD_BATCH_BYTES` per partition (plus one record per batch).
pub const PARTITION_QUEUE_BATCHES: usize = 16;
/// A value at least this large is not copied at reload: the index keeps it
/// where it lies, in the chunk file mapped into memory (`Value::Mapped`),
/// and an owner can use the bytes in place (the rdb's chunk images become
/// Arrow buffers over them). Smaller values are copied out, so that a file
/// of small records is not kept mapped for them.
pub const RELOAD_MAP_VALUE_BYTES_MIN: usize = 64 * 1024;
/// Emptied batches a partition hands back for readers to refill: recycling
/// them spares a reader growing a fresh `Vec` per batch and a partition
/// freeing memory another thread's malloc arena owns (a contended lock).
pub const RELOAD_SPARE_BATCHES: usize = 16;
/// Most entries a partition reserves up front from its estimate (below): the
/// estimate comes from file sizes, so a store of tiny records must not make
/// reload reserve more than this before it has seen the keys. An estimate
/// that is too large (a store mostly garbage) costs address space more than
/// RAM: the map writes its control bytes (one per slot) at once, but the
/// slots' pages only as entries land in them.
pub const RELOAD_RESERVE_ENTRIES_MAX: usize = 16 * 1024 * 1024;

/// A torn tail found (and cut) at reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub file: PathBuf,
    /// Offset of the first byte dropped (the end of the last valid record).
    pub offset: u64,
    pub bytes_dropped: u64,
    pub reason: String,
}

/// What reload found and did.
#[derive(Clone, Debug, Default)]
pub struct ReloadReport {
    pub chunks_loaded: u64,
    pub records_loaded: u64,
    pub bytes_loaded: u64,
    /// Live values after reload (metadata included).
    pub live_records: u64,
    pub torn_tails: Vec<TornTail>,
    /// Unfinished GC output deleted.
    pub gc_temp_files_removed: Vec<PathBuf>,
    /// `.active` chunks that held no complete record and were deleted.
    pub empty_active_removed: Vec<PathBuf>,
    pub parallelism: usize,
    pub partitions: usize,
    pub elapsed: Duration,
}

impl ReloadReport {
    /// Bytes loaded per second.
    pub fn bytes_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes_loaded as f64 / s
        } else {
            0.0
        }
    }
}

pub(crate) struct Loaded {
    pub index: Index,
    pub next_seq: u64,
    pub next_chunk_seq: u64,
    pub report: ReloadReport,
}

struct Job {
    path: PathBuf,
    seq: u64,
    kind: ChunkKind,
    active: bool,
    size: u64,
}

/// A key record on its way to a partition.
struct Rec {
    key: Key,
    value: Option<Value>,
    seq: u64,
    chunk: u64,
    size: u32,
}

struct PtRec {
    prefix: Key,
    seq: u64,
    chunk: u64,
    size: u32,
}

struct FileResult {
    seq: u64,
    kind: ChunkKind,
    active: bool,
    path: PathBuf,
    valid_len: u64,
    records: u64,
    record_bytes: u64,
    max_rec_seq: u64,
    torn: Option<TornTail>,
}

enum PartMsg {
    Batch(Vec<Rec>),
    /// All records are in; apply these live prefix tombstones (newest first).
    Finish(Arc<Vec<(Key, u64)>>),
}

#[derive(Default)]
struct PartOut {
    map: KeyMap,
    /// chunk → (garbage bytes, garbage records)
    garbage: HashMap<u64, (u64, u64)>,
    live_lists: HashMap<u64, Vec<(Key, u64)>>,
    pt_shadow: Vec<Vec<u64>>,
}

fn corrupt(path: &Path, offset: u64, reason: impl ToString) -> Error {
    Error::Corrupt {
        file: path.to_path_buf(),
        offset,
        reason: reason.to_string(),
    }
}

fn list_dir(dir: &Path, report: &mut ReloadReport) -> Result<(Vec<Job>, u64)> {
    let mut jobs = Vec::new();
    let mut max_chunk_seq = 0u64;
    let mut seen = HashSet::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("read dir", dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("read dir", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((seq, kind, state)) = format::parse_chunk_file_name(name) else {
            continue;
        };
        let path = entry.path();
        max_chunk_seq = max_chunk_seq.max(seq);
        if state == FileState::GcTemp {
            std::fs::remove_file(&path).map_err(|e| Error::io("remove gc temp", &path, e))?;
            report.gc_temp_files_removed.push(path);
            continue;
        }
        if !seen.insert(seq) {
            return Err(corrupt(
                &path,
                0,
                "two chunk files carry the same chunk seq",
            ));
        }
        let size = entry
            .metadata()
            .map_err(|e| Error::io("stat", &path, e))?
            .len();
        jobs.push(Job {
            path,
            seq,
            kind,
            active: state == FileState::Active,
            size,
        });
    }
    // Biggest first, so that readers finish at about the same time.
    jobs.sort_by(|a, b| b.size.cmp(&a.size).then(a.seq.cmp(&b.seq)));
    Ok((jobs, max_chunk_seq))
}

/// A chunk file mapped read-only, in whole (`None` when it is empty). Its
/// pages are the page cache's: reading them copies nothing, and a large
/// value can stay where it is. This is how a reload reads every chunk file;
/// `tickdb bench restart` times it alone, as the reload's floor.
///
/// The mapping asks for transparent huge pages before it is populated, so
/// that where the file system keeps the file in large folios (ext4 and XFS
/// on recent kernels) each 2 MiB of it is mapped by one page-table entry
/// instead of 512: populating a 64 MiB chunk then takes 32 faults instead of
/// 16,384, and reading the file this way runs at or above the speed of
/// `read()` into a reused buffer. Where huge pages are not available the
/// advice is refused and the mapping uses small pages.
///
/// # Safety
///
/// No byte of the file within its length at the call may change or be cut
/// off while the mapping lives: reading a truncated page raises SIGBUS. A
/// store's chunk files meet this while it holds their directory's LOCK.
pub unsafe fn map_chunk_file(path: &Path) -> Result<Option<memmap2::Mmap>> {
    let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len() as usize;
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: the caller's promise (above).
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }
        .map_err(|e| Error::io("map", path, e))?;
    // Advice only: a kernel without transparent huge pages refuses it.
    let _ = map.advise(memmap2::Advice::HugePage);
    match map.advise(memmap2::Advice::PopulateRead) {
        Ok(()) => Ok(Some(map)),
        // Kernels before 5.14 have no MADV_POPULATE_READ: populate at map
        // time instead (small pages).
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            drop(map);
            // SAFETY: as above.
            unsafe { memmap2::MmapOptions::new().len(len).populate().map(&file) }
                .map(Some)
                .map_err(|e| Error::io("map", path, e))
        }
        // Any other error is the file's.
        Err(e) => Err(Error::io("read (populate the mapping of)", path, e)),
    }
}

/// Decodes one mapped chunk file, handing records to `emit` and prefix tombstones to `pts`.
fn parse_file(
    job: &Job,
    map: Option<Arc<memmap2::Mmap>>,
    pb: &ProgressBar,
    mut emit: impl FnMut(Rec),
    pts: &mut Vec<PtRec>,
) -> Result<FileResult> {
    let data: &[u8] = map.as_deref().map(|m| &m[..]).unwrap_or(&[]);
    let mut res = FileResult {
        seq: job.seq,
        kind: job.kind,
        active: job.active,
        path: job.path.clone(),
        valid_len: 0,
        records: 0,
        record_bytes: 0,
        max_rec_seq: 0,
        torn: None,
    };
    let header = match format::decode_header(data) {
        Ok(h) => h,
        Err(e) if job.active => {
            // A crash right after creating the chunk: nothing in it was durable.
            res.torn = Some(TornTail {
                file: job.path.clone(),
                offset: 0,
                bytes_dropped: job.size,
                reason: format!("header: {e}"),
            });
            return Ok(res);
        }
        Err(e) => return Err(corrupt(&job.path, 0, format!("header: {e}"))),
    };
    if header.chunk_seq != job.seq || header.kind != job.kind {
        return Err(corrupt(
            &job.path,
            0,
            format!(
                "header says chunk {} {:?}, file name says {} {:?}",
                header.chunk_seq, header.kind, job.seq, job.kind
            ),
        ));
    }
    let mut at = CHUNK_HEADER_BYTES;
    pb.inc(at as u64);
    while at < data.len() {
        let decoded = format::decode_record_in(&data[at..], header.version).and_then(|(r, len)| {
            if header.kind.holds(r.kind) {
                Ok((r, len))
            } else {
                Err(format::DecodeError::WrongChunkKind {
                    chunk: header.kind,
                    record: r.kind,
                })
            }
        });
        let (r, len) = match decoded {
            Ok(x) => x,
            Err(e) if job.active => {
                // Everything from the first bad record on was never synced.
                res.torn = Some(TornTail {
                    file: job.path.clone(),
                    offset: at as u64,
                    bytes_dropped: job.size.saturating_sub(at as u64),
                    reason: e.to_string(),
                });
                break;
            }
            Err(e) => return Err(corrupt(&job.path, at as u64, e)),
        };
        let size = len as u32;
        res.records += 1;
        res.record_bytes += size as u64;
        res.max_rec_seq = res.max_rec_seq.max(r.seq);
        match r.kind {
            RecordKind::PrefixTombstone => pts.push(PtRec {
                prefix: Key::from(r.key),
                seq: r.seq,
                chunk: job.seq,
                size,
            }),
            RecordKind::Value => {
                let value = match &map {
                    Some(map) if r.value.len() >= RELOAD_MAP_VALUE_BYTES_MIN => {
                        let offset = r.value.as_ptr() as usize - map.as_ptr() as usize;
                        Value::Mapped(MappedBytes::new(map.clone(), offset, r.value.len()))
                    }
                    _ => Value::from(r.value),
                };
                emit(Rec {
                    key: Key::from(r.key),
                    value: Some(value),
                    seq: r.seq,
                    chunk: job.seq,
                    size,
                })
            }
            RecordKind::Tombstone => emit(Rec {
                key: Key::from(r.key),
                value: None,
                seq: r.seq,
                chunk: job.seq,
                size,
            }),
        }
        at += len;
        pb.inc(len as u64);
    }
    res.valid_len = match &res.torn {
        Some(t) => t.offset,
        None => at as u64,
    };
    Ok(res)
}

/// A chunk file read by a mapper thread, on its way to a reader: the job's
/// index and its mapping (or why it could not be read).
type MappedJob = (usize, Result<Option<Arc<memmap2::Mmap>>>);

struct ReaderCtx<'a> {
    jobs: &'a [Job],
    records: &'a AtomicU64,
    pb: &'a ProgressBar,
}

/// Maps (reads) chunk files in job order, taking each from the shared
/// cursor, and hands them to the readers: this thread waits for the disk
/// while the readers check and decode the files read before.
fn mapper(jobs: &[Job], next: &AtomicUsize, out: Sender<MappedJob>) {
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(job) = jobs.get(i) else { return };
        // SAFETY: the store holds the directory's LOCK, and no chunk file
        // is ever changed in place: sealed files are immutable, an active
        // file is only appended to (beyond this mapping's length), and the
        // only truncation, of a torn tail, cuts bytes no record handed out
        // lies in. So no mapped byte changes or disappears while mapped.
        let mapped = unsafe { map_chunk_file(&job.path) }.map(|m| m.map(Arc::new));
        // The readers are gone (one failed, the reload stops): stop too.
        if out.send((i, mapped)).is_err() {
            return;
        }
    }
}

fn reader(
    ctx: &ReaderCtx<'_>,
    mapped: Receiver<MappedJob>,
    txs: Vec<Sender<PartMsg>>,
    spares: Receiver<Vec<Rec>>,
) -> Result<(Vec<FileResult>, Vec<PtRec>)> {
    let n = txs.len();
    // A batch is refilled from an emptied one when a partition has handed one
    // back, and allocated at its full size otherwise (never grown push by push).
    let fresh = || {
        spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(RELOAD_BATCH_RECORDS))
    };
    let mut batches: Vec<Vec<Rec>> = (0..n).map(|_| fresh()).collect();
    let mut batch_bytes = vec![0usize; n];
    let mut files = Vec::new();
    let mut pts = Vec::new();
    let mut send_err = false;
    // Until every mapper is done and the queue is empty.
    while let Ok((i, map)) = mapped.recv() {
        let job = &ctx.jobs[i];
        let map = map?;
        let res = parse_file(
            job,
            map,
            ctx.pb,
            |r| {
                let p = partition_of(&r.key, n);
                batch_bytes[p] += r.size as usize;
                batches[p].push(r);
                if batches[p].len() >= RELOAD_BATCH_RECORDS || batch_bytes[p] >= RELOAD_BATCH_BYTES
                {
                    batch_bytes[p] = 0;
                    let b = std::mem::replace(&mut batches[p], fresh());
                    send_err |= txs[p].send(PartMsg::Batch(b)).is_err();
                }
            },
            &mut pts,
        )?;
        if send_err {
            return Err(Error::InvalidInput(
                "reload partition thread exited early".into(),
            ));
        }
        let total = ctx.records.fetch_add(res.records, Ordering::Relaxed) + res.records;
        ctx.pb.set_message(format!("{total} records"));
        files.push(res);
    }
    for (p, b) in batches.into_iter().enumerate() {
        if !b.is_empty() && txs[p].send(PartMsg::Batch(b)).is_err() {
            return Err(Error::InvalidInput(
                "reload partition thread exited early".into(),
            ));
        }
    }
    Ok((files, pts))
}

fn add_garbage(g: &mut HashMap<u64, (u64, u64)>, chunk: u64, size: u32) {
    let e = g.entry(chunk).or_insert((0, 0));
    e.0 += size as u64;
    e.1 += 1;
}

/// `bytes_total`: the bytes of every chunk file, from which the first batch
/// estimates how many records reach this partition (`nparts` of them), so that
/// the map is sized once instead of rehashing every key log2(n) times as it
/// grows. Records include superseded ones, so the estimate errs on the large side.
fn partition(
    rx: Receiver<PartMsg>,
    spares: Sender<Vec<Rec>>,
    bytes_total: u64,
    nparts: usize,
) -> Option<PartOut> {
    let mut out = PartOut::default();
    let mut reserved = false;
    loop {
        match rx.recv() {
            Ok(PartMsg::Batch(mut recs)) => {
                if !reserved {
                    reserved = true;
                    let batch_bytes: u64 = recs.iter().map(|r| r.size as u64).sum();
                    if let Some(est) = bytes_total
                        .saturating_mul(recs.len() as u64)
                        .checked_div(batch_bytes)
                    {
                        let per_part = est / nparts.max(1) as u64;
                        let per_part = usize::try_from(per_part).unwrap_or(usize::MAX);
                        out.map.reserve(per_part.min(RELOAD_RESERVE_ENTRIES_MAX));
                    }
                }
                for r in recs.drain(..) {
                    upsert(&mut out, r);
                }
                // Full or not wanted any more: the reader allocates another.
                let _ = spares.try_send(recs);
            }
            Ok(PartMsg::Finish(pts)) => {
                finish(&mut out, &pts);
                return Some(out);
            }
            // The coordinator gave up (a reader failed).
            Err(_) => return None,
        }
    }
}

/// Keeps the record with the highest (seq, chunk seq); the loser is garbage and, if
/// it is a value, its chunk joins the winner's shadow list. The chunk seq breaks
/// ties between two copies of one record (left by a GC that crashed after renaming
/// its output), so the choice does not depend on arrival order.
fn upsert(out: &mut PartOut, r: Rec) {
    match out.map.entry(r.key) {
        hashbrown::hash_map::Entry::Vacant(v) => {
            let slot = match r.value {
                Some(v) => Slot::Value(v),
                None => Slot::Tombstone,
            };
            v.insert(Entry {
                seq: r.seq,
                chunk: r.chunk,
                size: r.size,
                slot,
                shadow: Vec::new(),
                watch: None,
            });
        }
        hashbrown::hash_map::Entry::Occupied(mut o) => {
            let e = o.get_mut();
            if (r.seq, r.chunk) > (e.seq, e.chunk) {
                add_garbage(&mut out.garbage, e.chunk, e.size);
                if matches!(e.slot, Slot::Value(_)) {
                    e.shadow.push(e.chunk);
                }
                e.seq = r.seq;
                e.chunk = r.chunk;
                e.size = r.size;
                e.slot = match r.value {
                    Some(v) => Slot::Value(v),
                    None => Slot::Tombstone,
                };
            } else {
                add_garbage(&mut out.garbage, r.chunk, r.size);
                if r.value.is_some() {
                    e.shadow.push(r.chunk);
                }
            }
        }
    }
}

/// Applies the live prefix tombstones (newest first), drops tombstones that shadow
/// nothing, and lists each chunk's live records. An entry under several live
/// prefix tombstones newer than it goes to the newest, as if they were applied
/// newest first; one pass over the map serves them all.
fn finish(out: &mut PartOut, pts: &[(Key, u64)]) {
    out.pt_shadow = vec![Vec::new(); pts.len()];
    if !pts.is_empty() {
        let PartOut {
            map,
            garbage,
            pt_shadow,
            ..
        } = out;
        map.retain(|k, e| {
            let Some(i) = pts
                .iter()
                .position(|(prefix, pseq)| e.seq < *pseq && k.starts_with(prefix))
            else {
                return true;
            };
            add_garbage(garbage, e.chunk, e.size);
            if matches!(e.slot, Slot::Value(_)) {
                pt_shadow[i].push(e.chunk);
            }
            pt_shadow[i].append(&mut e.shadow);
            false
        });
    }
    let garbage = &mut out.garbage;
    out.map.retain(|_, e| {
        if matches!(e.slot, Slot::Tombstone) && e.shadow.is_empty() {
            add_garbage(garbage, e.chunk, e.size);
            return false;
        }
        e.shadow.sort_unstable();
        e.shadow.dedup();
        true
    });
    for (k, e) in &out.map {
        out.live_lists
            .entry(e.chunk)
            .or_default()
            .push((k.clone(), e.seq));
    }
    for s in &mut out.pt_shadow {
        s.sort_unstable();
        s.dedup();
    }
}

/// Splits prefix tombstones into live ones (newest first) and superseded ones: a
/// prefix tombstone is superseded by a newer one whose prefix covers its own, and
/// a second copy of one record (same seq) is garbage.
fn resolve_prefix_tombs(mut pts: Vec<PtRec>) -> (Vec<PtRec>, Vec<PtRec>) {
    pts.sort_by(|a, b| b.seq.cmp(&a.seq).then(b.chunk.cmp(&a.chunk)));
    let mut live: Vec<PtRec> = Vec::new();
    let mut dead = Vec::new();
    for p in pts {
        if live
            .iter()
            .any(|l| l.seq == p.seq || (l.seq > p.seq && p.prefix.starts_with(&l.prefix)))
        {
            dead.push(p);
        } else {
            live.push(p);
        }
    }
    (live, dead)
}

fn progress_bar(cfg: &Config, total: u64) -> ProgressBar {
    if !cfg.progress {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "hot restart reload [{bar:30}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}) {msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

type PipelineOut = (Vec<FileResult>, Vec<PtRec>, Vec<PtRec>, Vec<PartOut>);

fn run_pipeline(dir: &Path, jobs: &[Job], cfg: &Config, pb: &ProgressBar) -> Result<PipelineOut> {
    let nparts = cfg.partitions;
    let bytes_total: u64 = jobs.iter().map(|j| j.size).sum();
    let next = AtomicUsize::new(0);
    let records = AtomicU64::new(0);
    let ctx = ReaderCtx {
        jobs,
        records: &records,
        pb,
    };
    let spawn_err = |e| Error::io("spawn a reload thread", dir, e);
    std::thread::scope(|s| {
        let mut txs = Vec::with_capacity(nparts);
        let mut parts = Vec::with_capacity(nparts);
        let (spare_tx, spare_rx) = crossbeam_channel::bounded::<Vec<Rec>>(RELOAD_SPARE_BATCHES);
        for i in 0..nparts {
            let (tx, rx) = crossbeam_channel::bounded::<PartMsg>(PARTITION_QUEUE_BATCHES);
            txs.push(tx);
            let spare_tx = spare_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("hr-reload-part-{i}"))
                .spawn_scoped(s, move || partition(rx, spare_tx, bytes_total, nparts))
                .map_err(spawn_err)?;
            parts.push(h);
        }
        // Files read ahead of the readers: at most this many wait, mapped,
        // besides the one each mapper is reading.
        let (mapped_tx, mapped_rx) = crossbeam_channel::bounded::<MappedJob>(cfg.parallelism);
        for i in 0..cfg.parallelism {
            let mapped_tx = mapped_tx.clone();
            let next = &next;
            std::thread::Builder::new()
                .name(format!("hr-reload-map-{i}"))
                .spawn_scoped(s, move || mapper(jobs, next, mapped_tx))
                .map_err(spawn_err)?;
        }
        drop(mapped_tx);
        let mut readers = Vec::with_capacity(cfg.parallelism);
        for i in 0..cfg.parallelism {
            let txs = txs.clone();
            let spare_rx = spare_rx.clone();
            let mapped_rx = mapped_rx.clone();
            let ctx = &ctx;
            let h = std::thread::Builder::new()
                .name(format!("hr-reload-read-{i}"))
                .spawn_scoped(s, move || reader(ctx, mapped_rx, txs, spare_rx))
                .map_err(spawn_err)?;
            readers.push(h);
        }
        // Only the readers receive: when they are all gone, the mappers stop.
        drop(mapped_rx);
        let mut files = Vec::new();
        let mut pts = Vec::new();
        let mut err: Option<Error> = None;
        for h in readers {
            match h.join() {
                Ok(Ok((f, p))) => {
                    files.extend(f);
                    pts.extend(p);
                }
                Ok(Err(e)) => {
                    err.get_or_insert(e);
                }
                Err(_) => {
                    err.get_or_insert(Error::InvalidInput("reload reader thread panicked".into()));
                }
            }
        }
        if let Some(e) = err {
            // Closing the channels makes the partitions give up.
            drop(txs);
            for h in parts {
                let _ = h.join();
            }
            return Err(e);
        }
        let (live_pts, dead_pts) = resolve_prefix_tombs(pts);
        let msg: Arc<Vec<(Key, u64)>> =
            Arc::new(live_pts.iter().map(|p| (p.prefix.clone(), p.seq)).collect());
        for tx in &txs {
            // A partition that is gone is reported by its join below.
            let _ = tx.send(PartMsg::Finish(msg.clone()));
        }
        drop(txs);
        let mut outs = Vec::with_capacity(nparts);
        for h in parts {
            match h.join() {
                Ok(Some(o)) => outs.push(o),
                _ => return Err(Error::InvalidInput("reload partition thread failed".into())),
            }
        }
        Ok((files, live_pts, dead_pts, outs))
    })
}

/// Repairs active chunks after the pipeline: truncates torn tails, deletes
/// chunks without a complete record, fsyncs and seals the rest. Returns the
/// results of the chunks that remain.
fn seal_active(
    dir: &Path,
    cfg: &Config,
    files: Vec<FileResult>,
    report: &mut ReloadReport,
) -> Result<Vec<FileResult>> {
    let mut kept = Vec::with_capacity(files.len());
    let mut dir_changed = false;
    for mut f in files {
        if let Some(t) = f.torn.take() {
            tracing::warn!(file = %t.file.display(), offset = t.offset, bytes = t.bytes_dropped, reason = %t.reason,
                "hot restart: torn tail of an active chunk truncated");
            report.torn_tails.push(t);
            if f.records > 0 {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&f.path)
                    .map_err(|e| Error::io("open", &f.path, e))?;
                file.set_len(f.valid_len)
                    .map_err(|e| Error::io("truncate", &f.path, e))?;
                if cfg.fsync {
                    chunk::fsync_file(&file, &f.path)?;
                }
            }
        }
        if !f.active {
            kept.push(f);
            continue;
        }
        dir_changed = true;
        if f.records == 0 {
            std::fs::remove_file(&f.path).map_err(|e| Error::io("remove", &f.path, e))?;
            report.empty_active_removed.push(f.path);
            continue;
        }
        if cfg.fsync {
            let file = std::fs::File::open(&f.path).map_err(|e| Error::io("open", &f.path, e))?;
            chunk::fsync_file(&file, &f.path)?;
        }
        let to = chunk::chunk_path(dir, f.seq, f.kind, FileState::Sealed);
        std::fs::rename(&f.path, &to).map_err(|e| Error::io("rename", &f.path, e))?;
        f.path = to;
        f.active = false;
        kept.push(f);
    }
    if cfg.fsync && (dir_changed || !report.gc_temp_files_removed.is_empty()) {
        chunk::fsync_dir(dir)?;
    }
    report.torn_tails.sort_by(|a, b| a.file.cmp(&b.file));
    report.empty_active_removed.sort();
    Ok(kept)
}

/// Reloads the store in `dir`.
pub(crate) fn reload(dir: &Path, cfg: &Config) -> Result<Loaded> {
    let t0 = Instant::now();
    let mut report = ReloadReport {
        parallelism: cfg.parallelism,
        partitions: cfg.partitions,
        ..Default::default()
    };
    let (jobs, max_chunk_seq) = list_dir(dir, &mut report)?;
    let total: u64 = jobs.iter().map(|j| j.size).sum();
    let pb = progress_bar(cfg, total);
    let (files, live_pts, dead_pts, outs) = run_pipeline(dir, &jobs, cfg, &pb)?;
    pb.finish_and_clear();

    report.chunks_loaded = files.len() as u64;
    report.records_loaded = files.iter().map(|f| f.records).sum();
    report.bytes_loaded = total;
    let next_seq = files.iter().map(|f| f.max_rec_seq).max().unwrap_or(0) + 1;
    let files = seal_active(dir, cfg, files, &mut report)?;

    // Per-chunk accounting: garbage from the partitions and the prefix tombstones,
    // live = everything else.
    let mut garbage: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut live_lists: HashMap<u64, Vec<(Key, u64)>> = HashMap::new();
    let mut parts = Vec::with_capacity(outs.len());
    let mut pt_shadow: Vec<Vec<u64>> = vec![Vec::new(); live_pts.len()];
    for o in outs {
        for (c, (b, n)) in o.garbage {
            let e = garbage.entry(c).or_insert((0, 0));
            e.0 += b;
            e.1 += n;
        }
        for (c, l) in o.live_lists {
            live_lists.entry(c).or_default().extend(l);
        }
        for (i, s) in o.pt_shadow.into_iter().enumerate() {
            pt_shadow[i].extend(s);
        }
        parts.push(o.map);
    }
    for p in &dead_pts {
        add_garbage(&mut garbage, p.chunk, p.size);
    }
    let mut prefix_tombs = Vec::new();
    for (p, mut shadow) in live_pts.into_iter().zip(pt_shadow) {
        shadow.sort_unstable();
        shadow.dedup();
        if shadow.is_empty() {
            add_garbage(&mut garbage, p.chunk, p.size);
        } else {
            live_lists
                .entry(p.chunk)
                .or_default()
                .push((p.prefix.clone(), p.seq));
            prefix_tombs.push(PrefixTomb {
                prefix: p.prefix,
                seq: p.seq,
                chunk: p.chunk,
                size: p.size,
                shadow,
            });
        }
    }
    prefix_tombs.sort_by_key(|p| p.seq);
    let mut chunks = BTreeMap::new();
    for f in &files {
        let (gb, gn) = garbage.get(&f.seq).copied().unwrap_or((0, 0));
        let mut info = ChunkInfo::new(f.kind, ChunkState::Sealed);
        info.file_bytes = f.valid_len;
        info.garbage_bytes = gb;
        info.garbage_records = gn;
        info.live_bytes = f.record_bytes.saturating_sub(gb);
        info.live_records = f.records.saturating_sub(gn);
        info.max_rec_seq = f.max_rec_seq;
        let mut recs = live_lists.remove(&f.seq).unwrap_or_default();
        recs.sort_by_key(|r| r.1);
        info.records = recs;
        chunks.insert(f.seq, info);
    }
    let index = Index::from_parts(parts, prefix_tombs, chunks);
    report.live_records = index.counts().0;
    report.elapsed = t0.elapsed();
    tracing::info!(
        chunks = report.chunks_loaded,
        records = report.records_loaded,
        bytes = report.bytes_loaded,
        live = report.live_records,
        secs = report.elapsed.as_secs_f64(),
        "hot restart reload done"
    );
    Ok(Loaded {
        index,
        next_seq,
        next_chunk_seq: max_chunk_seq + 1,
        report,
    })
}
