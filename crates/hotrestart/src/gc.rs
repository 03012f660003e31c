//! The garbage collector: the GC thread, the cost-benefit choice of chunks, and one
//! GC cycle (plan from RAM, write outputs to temporary files, rename, commit,
//! delete sources).
//!
//! Crash safety of a cycle, step by step:
//! 1. Outputs are written under `.gctmp` names and fsynced. A crash here leaves
//!    temporary files that reload deletes: unfinished GC output is ignored.
//! 2. Outputs are renamed to their sealed names and the directory is fsynced. A
//!    crash after this leaves each live record in two chunks with the same seq;
//!    reload keeps one copy and counts the other as garbage.
//! 3. `sync()` makes every record that superseded something in the sources
//!    durable: only then may the superseded copies disappear.
//! 4. The index is committed, then the sources are unlinked and the directory
//!    fsynced. Tombstones shadowing the sources are dropped only by the next
//!    cycle's sweep, after these unlinks are durable.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::chunk::{self, WRITE_BUFFER_BYTES};
use crate::error::{Error, Result};
use crate::format::{self, ChunkKind, FileState, HEADER_FLAG_GC_OUTPUT};
use crate::index::{Candidate, LiveRec, OutChunk, OutRec};
use crate::store::{GcConfig, GcCrashPoint, Shared};

/// Most fully-garbage chunks deleted in one cycle. They cost no copying, so the
/// bound only keeps one cycle's unlink burst (and lock hold) short.
pub const EMPTY_CHUNKS_PER_CYCLE_MAX: usize = 256;

/// Cost-benefit score of collecting a chunk: (garbage / live) × age, as in
/// Sprite LFS. Age is measured in record sequence numbers since the chunk's
/// youngest record, so old, stable data is left alone unless it is mostly garbage
/// and young, hot chunks are given time to die further.
pub(crate) fn score(c: &Candidate, now_seq: u64) -> f64 {
    let age = now_seq.saturating_sub(c.max_rec_seq) as f64 + 1.0;
    if c.live_bytes == 0 {
        return f64::INFINITY;
    }
    c.garbage_bytes as f64 / c.live_bytes as f64 * age
}

/// Chooses this cycle's chunks: every chunk without live records (up to
/// `EMPTY_CHUNKS_PER_CYCLE_MAX`), plus the `chunks_per_cycle` best-scoring chunks
/// whose garbage ratio reaches `garbage_ratio_min`. Under back-pressure (`urgent`)
/// the ratio threshold is ignored so that any garbage can be reclaimed.
pub(crate) fn choose(cands: &[Candidate], now_seq: u64, cfg: &GcConfig, urgent: bool) -> Vec<u64> {
    let mut out: Vec<u64> = cands
        .iter()
        .filter(|c| c.live_records == 0)
        .map(|c| c.seq)
        .take(EMPTY_CHUNKS_PER_CYCLE_MAX)
        .collect();
    let mut scored: Vec<(f64, u64)> = cands
        .iter()
        .filter(|c| c.live_records > 0 && c.garbage_bytes > 0)
        .filter(|c| {
            let ratio = c.garbage_bytes as f64 / (c.garbage_bytes + c.live_bytes) as f64;
            urgent || ratio >= cfg.garbage_ratio_min
        })
        .map(|c| (score(c, now_seq), c.seq))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    out.extend(
        scored
            .into_iter()
            .take(cfg.chunks_per_cycle)
            .map(|(_, s)| s),
    );
    out
}

/// The GC thread: runs cycles back to back while they find work, otherwise
/// sleeps until woken (a chunk sealed, back-pressure) or `interval_ms` passes.
pub(crate) fn gc_thread(shared: Arc<Shared>, wake: Receiver<()>) {
    let interval = Duration::from_millis(shared.cfg.gc.interval_ms.max(1));
    while !shared.stop.load(Ordering::Acquire) {
        match run_cycle(&shared) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(Error::GcTestCrash) => {
                shared.gc_crashed.store(true, Ordering::Release);
                break;
            }
            Err(e) => {
                let e = shared.poison(e);
                tracing::error!(error = %e, "hot restart GC stopped");
                break;
            }
        }
        match wake.recv_timeout(interval) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    shared.gc_running.store(false, Ordering::Release);
    // Writers waiting under back-pressure must not wait for a GC that is gone.
    shared.progress.notify_all();
}

fn crash_point(shared: &Shared, p: GcCrashPoint) -> Result<()> {
    if shared.cfg.test_gc_crash == Some(p) {
        return Err(Error::GcTestCrash);
    }
    Ok(())
}

/// One output chunk being written under its temporary name.
struct OutWriter {
    seq: u64,
    kind: ChunkKind,
    tmp: PathBuf,
    file: File,
    buf: Vec<u8>,
    len: u64,
    max_rec_seq: u64,
    recs: Vec<OutRec>,
}

impl OutWriter {
    fn create(shared: &Shared, kind: ChunkKind) -> Result<OutWriter> {
        let seq = shared.chunk_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = chunk::chunk_path(&shared.dir, seq, kind, FileState::GcTemp);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io("create gc output", &tmp, e))?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER_BYTES);
        buf.extend_from_slice(&format::encode_header(kind, HEADER_FLAG_GC_OUTPUT, seq));
        let len = buf.len() as u64;
        Ok(OutWriter {
            seq,
            kind,
            tmp,
            file,
            buf,
            len,
            max_rec_seq: 0,
            recs: Vec::new(),
        })
    }

    fn write_buf(&mut self) -> Result<()> {
        self.file
            .write_all(&self.buf)
            .map_err(|e| Error::io("write", &self.tmp, e))?;
        self.buf.clear();
        Ok(())
    }

    fn finish(mut self, fsync: bool) -> Result<(OutChunk, PathBuf)> {
        self.write_buf()?;
        if fsync {
            chunk::fsync_file(&self.file, &self.tmp)?;
        }
        let out = OutChunk {
            seq: self.seq,
            kind: self.kind,
            file_bytes: self.len,
            max_rec_seq: self.max_rec_seq,
            recs: self.recs,
        };
        Ok((out, self.tmp))
    }
}

/// Writes the live records, oldest first, into new chunks of their kind. Returns
/// `None` if the store is stopping (temporary files are removed).
fn write_outputs(shared: &Shared, live: &[LiveRec]) -> Result<Option<Vec<(OutChunk, PathBuf)>>> {
    let chunk_max = shared.cfg.chunk_size_bytes;
    let mut done: Vec<(OutChunk, PathBuf)> = Vec::new();
    let mut written = 0usize;
    let half = live.len() / 2;
    let cleanup = |done: &Vec<(OutChunk, PathBuf)>, cur: &Option<OutWriter>| {
        for (_, p) in done {
            let _ = std::fs::remove_file(p);
        }
        if let Some(w) = cur {
            let _ = std::fs::remove_file(&w.tmp);
        }
    };
    for kind in [ChunkKind::Value, ChunkKind::Tombstone] {
        let mut cur: Option<OutWriter> = None;
        for r in live.iter().filter(|r| r.kind.chunk_kind() == kind) {
            // A value its owner keeps in its own form is encoded again here:
            // GC copies from RAM, never from the source chunk's file.
            let bytes = r.value.as_ref().map(|v| v.bytes());
            let value: &[u8] = bytes.as_deref().unwrap_or(&[]);
            let size = format::encoded_len(r.key.len(), value.len());
            let full = cur.as_ref().is_some_and(|w| {
                w.len > format::CHUNK_HEADER_BYTES as u64 && w.len + size as u64 > chunk_max
            });
            if full {
                if let Some(w) = cur.take() {
                    done.push(w.finish(shared.cfg.fsync)?);
                }
                if shared.stop.load(Ordering::Acquire) {
                    cleanup(&done, &cur);
                    return Ok(None);
                }
            }
            if cur.is_none() {
                cur = Some(OutWriter::create(shared, kind)?);
            }
            let Some(w) = cur.as_mut() else { continue };
            format::encode_record(&mut w.buf, r.seq, r.kind, &r.key, value);
            w.len += size as u64;
            w.max_rec_seq = w.max_rec_seq.max(r.seq);
            w.recs.push(OutRec {
                key: r.key.clone(),
                seq: r.seq,
                size: size as u32,
                kind: r.kind,
                src: r.src,
            });
            if w.buf.len() >= WRITE_BUFFER_BYTES {
                w.write_buf()?;
            }
            written += 1;
            if written == half.max(1) && shared.cfg.test_gc_crash == Some(GcCrashPoint::MidOutput) {
                // Leave a partial temporary file on disk, as a crash would.
                w.write_buf()?;
                return Err(Error::GcTestCrash);
            }
        }
        if let Some(w) = cur.take() {
            done.push(w.finish(shared.cfg.fsync)?);
        }
    }
    Ok(Some(done))
}

/// Runs one GC cycle. Returns whether it reclaimed or changed anything.
pub(crate) fn run_cycle(shared: &Shared) -> Result<bool> {
    let _cycle = shared.gc_lock.lock();
    shared.check_poison()?;
    // Chunks become collectable only once sealed durably under their final names.
    let has_pending = !shared.inner.lock().pending.is_empty();
    if has_pending {
        shared.sync_all()?;
    }

    // Plan from RAM under the lock: sweep tombstones, choose chunks, and take the
    // live records (keys and values are shared, not copied).
    let (sources, mut live, swept) = {
        let mut g = shared.inner.lock();
        let swept = g.index.sweep_tombstones();
        let urgent = g.index.garbage_bytes_total > shared.backpressure_bytes();
        let chosen = choose(&g.index.candidates(), g.next_seq, &shared.cfg.gc, urgent);
        let mut live = Vec::new();
        let mut sources = Vec::with_capacity(chosen.len());
        for seq in chosen {
            g.index.snapshot_live(seq, &mut live);
            if let Some(c) = g.index.chunks.get(&seq) {
                sources.push((seq, c.kind));
            }
        }
        (sources, live, swept)
    };
    if swept {
        shared.progress.notify_all();
    }
    if sources.is_empty() || shared.stop.load(Ordering::Acquire) {
        return Ok(swept);
    }
    // Oldest first: records of similar age land in the same output chunk, so
    // chunks drift towards all-live (old, stable) or all-garbage (young, hot).
    live.sort_unstable_by_key(|r| r.seq);

    let Some(outputs) = write_outputs(shared, &live)? else {
        return Ok(false);
    };
    let mut out_chunks = Vec::with_capacity(outputs.len());
    let mut gc_bytes = 0u64;
    for (o, tmp) in outputs {
        let to = chunk::chunk_path(&shared.dir, o.seq, o.kind, FileState::Sealed);
        std::fs::rename(&tmp, &to).map_err(|e| Error::io("rename", &tmp, e))?;
        gc_bytes += o.file_bytes;
        out_chunks.push(o);
    }
    if shared.cfg.fsync && !out_chunks.is_empty() {
        chunk::fsync_dir(&shared.dir)?;
    }
    crash_point(shared, GcCrashPoint::AfterRename)?;

    // Whatever made the sources' dead records dead must be durable before the
    // sources go.
    shared.sync_all()?;

    {
        let mut g = shared.inner.lock();
        let seqs: Vec<u64> = sources.iter().map(|s| s.0).collect();
        g.index.commit_gc(&seqs, out_chunks);
        g.counters.gc_runs += 1;
        g.counters.gc_bytes_written += gc_bytes;
        g.counters.gc_chunks_reclaimed += sources.len() as u64;
    }
    shared.progress.notify_all();
    crash_point(shared, GcCrashPoint::BeforeUnlink)?;

    for (seq, kind) in &sources {
        let p = chunk::chunk_path(&shared.dir, *seq, *kind, FileState::Sealed);
        std::fs::remove_file(&p).map_err(|e| Error::io("unlink", &p, e))?;
    }
    if shared.cfg.fsync {
        chunk::fsync_dir(&shared.dir)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(seq: u64, live: u64, garbage: u64, max_rec_seq: u64) -> Candidate {
        Candidate {
            seq,
            live_bytes: live,
            live_records: if live > 0 { 1 } else { 0 },
            garbage_bytes: garbage,
            max_rec_seq,
        }
    }

    #[test]
    fn cost_benefit_prefers_old_garbage_and_empty_chunks() {
        let cfg = GcConfig {
            chunks_per_cycle: 2,
            garbage_ratio_min: 0.5,
            ..GcConfig::default()
        };
        let cands = [
            cand(1, 100, 100, 10),  // old, half garbage
            cand(2, 100, 100, 990), // young, half garbage
            cand(3, 0, 200, 500),   // all garbage
            cand(4, 100, 20, 5),    // old but mostly live: below the ratio
            cand(5, 10, 190, 900),  // young but almost all garbage
        ];
        let chosen = choose(&cands, 1000, &cfg, false);
        assert_eq!(chosen, vec![3, 5, 1]);
        // Under back-pressure the ratio threshold is ignored.
        let cfg1 = GcConfig {
            chunks_per_cycle: 10,
            ..cfg
        };
        assert!(choose(&cands, 1000, &cfg1, true).contains(&4));
        assert!(!choose(&cands, 1000, &cfg1, false).contains(&4));
    }
}
