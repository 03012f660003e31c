//! Restoring the column store from the Hot Restart store after a restart.
//!
//! The store has already been reloaded (the parallel pipeline of
//! tickdb-hotrestart); its checkpoint record says which journal sequence S the
//! records stand for, and each table's key generation and row count. Here:
//!
//! - Records that the checkpoint does not cover are dropped from the store: a
//!   generation other than the checkpoint's (a clear whose checkpoint never
//!   became durable, or an old generation whose prefix tombstone was lost) and
//!   append segments at or beyond the checkpoint's row count (written by a
//!   checkpoint that crashed before its record). Keyed rows written by such a
//!   checkpoint are kept: each came from an update after S, which the journal
//!   replay applies again, so the final state is the same.
//! - An append table's chunk images must tile rows 0..rows exactly, and its
//!   symbols records names 0..symbols; anything else is corruption and stops
//!   the restart with the table and rows named. Each image becomes a sealed
//!   chunk as it is (`store::image`): a DRAM table's arrays point into the
//!   reloaded bytes, an fsmem table's buffers are copied once into fsmem.
//!   Images are decoded on `parallelism` threads; no row is appended.
//! - Stores written before chunk images hold codec segments instead; those
//!   are decoded and applied in row order through `Store::apply`, as live
//!   updates are, and the next checkpoint writes the table again as images.
//! - Tables are restored in parallel, one thread per table (at most
//!   `parallelism`).
//! - A record whose bytes the restored rows no longer share (an fsmem
//!   chunk's copy, a segment, a keyed row) is rebound to them
//!   (`Store::rebind`), so the reloaded bytes are freed and the store holds
//!   no second copy of the data.

use super::keys::{self, RecordKey};
use super::meta::CheckpointMeta;
use super::meta::TableMeta;
use super::values::{
    decode_row, decode_segment, decode_symbols, row_pieces, ImageValue, RowValue, SegmentValue,
};
use super::TableState;
use crate::error::RdbError;
use arrow_array::RecordBatch;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tickdb_core::store::image::RestoredChunk;
use tickdb_core::store::Store as ColumnStore;
use tickdb_core::{Batch, TableDef, TableKind};
use tickdb_hotrestart::{Key, Store as HotStore, Value};

/// Keyed rows applied per batch while restoring.
const RESTORE_ROWS_PER_APPLY: usize = tickdb_core::store::CHUNK_ROWS_MAX;
/// Segments an append table's decoder thread may run ahead of the thread
/// applying them (each at most `SEGMENT_BYTES_MAX` of rows). Decoding a
/// segment (allocating and filling a `Batch`) costs about what applying it
/// does, so with the decoder one segment ahead the two overlap; a few more
/// absorb the variation between segments without holding much memory.
const RESTORE_DECODE_AHEAD_SEGMENTS: usize = 4;

/// What a restore did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RestoreReport {
    /// The journal sequence the restored state stands for (0: nothing stored).
    pub seq: u64,
    /// Rows restored per table.
    pub rows: BTreeMap<String, u64>,
    pub records: u64,
    pub seconds: f64,
    /// Records the checkpoint did not cover, removed.
    pub stale_records_removed: u64,
    /// Table generations the checkpoint did not name, cleared.
    pub stale_generations_cleared: u64,
}

struct TableWork {
    def: Arc<TableDef>,
    records: Vec<(Key, Value)>,
}

struct Restored {
    state: TableState,
    rows: u64,
    records: u64,
}

/// Restores `store` (empty, built from the checkpoint's schema) from `hs`.
/// Returns each table's persistence state and the report.
pub(super) fn restore(
    hs: &HotStore,
    meta: Option<&CheckpointMeta>,
    store: &ColumnStore,
    parallelism: usize,
    progress: bool,
) -> Result<(HashMap<String, TableState>, RestoreReport), RdbError> {
    let started = Instant::now();
    let mut report = RestoreReport {
        seq: meta.map(|m| m.seq).unwrap_or(0),
        ..RestoreReport::default()
    };
    let all: Vec<(Key, Value)> = hs.iter_prefix(keys::TABLES_PREFIX).collect();
    let mut work: BTreeMap<String, TableWork> = BTreeMap::new();
    let mut stale_gens: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut stale_keys: Vec<Key> = Vec::new();
    let schema = store.schema();
    for (k, v) in all {
        let Some(rk) = keys::parse(&k) else {
            stale_keys.push(k);
            continue;
        };
        let tm = meta.and_then(|m| m.table(rk.table()));
        let def = schema.table(rk.table());
        match (tm, def) {
            (Some(tm), Some(def)) if tm.generation == rk.generation() => {
                // Written by a checkpoint that never became durable.
                let beyond = match rk {
                    RecordKey::Segment { first_row, .. } | RecordKey::Image { first_row, .. } => {
                        first_row >= tm.rows
                    }
                    RecordKey::Symbols { first_id, .. } => first_id >= tm.symbols,
                    RecordKey::Row { .. } => false,
                };
                if beyond {
                    stale_keys.push(k);
                    continue;
                }
                work.entry(def.name.clone())
                    .or_insert_with(|| TableWork {
                        def: Arc::new(def.clone()),
                        records: Vec::new(),
                    })
                    .records
                    .push((k, v));
            }
            _ => {
                stale_gens.insert(keys::generation_prefix(rk.table(), rk.generation()));
            }
        }
    }

    let total_rows: u64 = meta
        .map(|m| m.tables.iter().map(|t| t.rows).sum())
        .unwrap_or(0);
    let pb = progress_bar(progress, total_rows);
    let done_rows = AtomicU64::new(0);
    let queue: parking_lot::Mutex<Vec<TableWork>> =
        parking_lot::Mutex::new(work.into_values().collect());
    let results: parking_lot::Mutex<Vec<(String, Result<Restored, RdbError>)>> = Default::default();
    let threads = parallelism.clamp(1, queue.lock().len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some(w) = queue.lock().pop() else { break };
                let name = w.def.name.clone();
                let tm = meta.and_then(|m| m.table(&name));
                let r = restore_table(hs, store, w, tm, parallelism, &|n| {
                    let d = done_rows.fetch_add(n, Ordering::Relaxed) + n;
                    pb.set_position(d);
                });
                results.lock().push((name, r));
            });
        }
    });
    pb.finish_and_clear();
    let mut states = HashMap::new();
    for (name, r) in results.into_inner() {
        let r = r?;
        report.rows.insert(name.clone(), r.rows);
        report.records += r.records;
        states.insert(name, r.state);
    }
    // Tables the checkpoint names but that had no records (empty when it was
    // taken) keep their generation, so their next records use it. One that
    // had rows then must have records: anything else is data lost.
    if let Some(m) = meta {
        for t in &m.tables {
            if t.rows > 0 && !states.contains_key(&t.name) {
                return Err(RdbError::Restore(format!(
                    "table '{}': the checkpoint at seq {} holds {} rows but the hot restart store has no record of them",
                    t.name, m.seq, t.rows
                )));
            }
            states.entry(t.name.clone()).or_insert(TableState {
                generation: t.generation,
                ordinal_base: t.next_ordinal,
                ..TableState::default()
            });
            report.rows.entry(t.name.clone()).or_insert(0);
        }
    }
    let fail = |e: tickdb_hotrestart::Error| RdbError::Restore(e.to_string());
    for p in &stale_gens {
        hs.clear_prefix(p).map_err(fail)?;
    }
    for k in &stale_keys {
        hs.remove(k).map_err(fail)?;
    }
    report.stale_generations_cleared = stale_gens.len() as u64;
    report.stale_records_removed = stale_keys.len() as u64;
    if !stale_gens.is_empty() || !stale_keys.is_empty() {
        hs.sync().map_err(fail)?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok((states, report))
}

fn progress_bar(show: bool, total: u64) -> ProgressBar {
    if !show || total == 0 {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "restoring tables [{bar:30}] {human_pos}/{human_len} rows ({per_sec}, {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Restores one table; `tm` is the checkpoint's entry for it.
fn restore_table(
    hs: &HotStore,
    store: &ColumnStore,
    w: TableWork,
    tm: Option<&TableMeta>,
    parallelism: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Restored, RdbError> {
    let def = w.def;
    let name: Arc<str> = Arc::from(def.name.as_str());
    let schema_now = store.schema();
    let schema: &tickdb_core::Schema = &schema_now;
    let (want_rows, next_ordinal) = tm.map(|t| (t.rows, t.next_ordinal)).unwrap_or((0, 0));
    let generation = w
        .records
        .first()
        .and_then(|(k, _)| keys::parse(k).map(|r| r.generation()))
        .unwrap_or(0);
    let fail = |e: tickdb_core::CoreError| {
        RdbError::Restore(format!("table '{}': applying restored rows: {e}", def.name))
    };
    let records = w.records.len() as u64;
    let segments = w
        .records
        .iter()
        .filter(|(k, _)| matches!(keys::parse(k), Some(RecordKey::Segment { .. })))
        .count();
    match &def.kind {
        TableKind::Append if segments < w.records.len() => {
            if segments > 0 {
                return Err(RdbError::Restore(format!(
                    "table '{}' holds both codec segments and chunk images in one generation",
                    def.name
                )));
            }
            let symbols = tm.map(|t| t.symbols).unwrap_or(0);
            let restored = restore_images(
                hs,
                store,
                &def,
                w.records,
                want_rows,
                symbols,
                parallelism,
                progress,
            )?;
            Ok(Restored {
                state: TableState {
                    generation,
                    store_generation: restored.store_generation,
                    rows: want_rows,
                    symbols,
                    ..TableState::default()
                },
                rows: want_rows,
                records,
            })
        }
        TableKind::Append => {
            // Key order is row order (big-endian first_row).
            // (key, first row, rows, widened): a widened record keeps its
            // reloaded bytes (see `values::one_batch`).
            let mut spans: Vec<(Key, u64, u64, bool)> = Vec::with_capacity(w.records.len());
            let mut expected = 0u64;
            let (rec_keys, values): (Vec<Key>, Vec<Value>) = w.records.into_iter().unzip();
            // Segments are decoded on a thread of their own, in order, while
            // this one applies them (apply must see rows in order). Errors
            // arrive in record order, so the first bad record is reported as
            // before; if this thread stops early, dropping the receiver ends
            // the decoder at its next send.
            std::thread::scope(|s| -> Result<(), RdbError> {
                let (tx, rx) = crossbeam_channel::bounded(RESTORE_DECODE_AHEAD_SEGMENTS);
                let table = def.name.as_str();
                s.spawn(move || {
                    for v in values {
                        let decoded = decode_segment(table, &v.bytes(), schema);
                        // The reloaded bytes are not needed once decoded.
                        drop(v);
                        if tx.send(decoded).is_err() {
                            break;
                        }
                    }
                });
                for k in rec_keys {
                    let Some(RecordKey::Segment { first_row, .. }) = keys::parse(&k) else {
                        return Err(RdbError::Restore(format!(
                            "table '{}' is an append table but holds a keyed row record",
                            def.name
                        )));
                    };
                    if first_row != expected {
                        return Err(RdbError::Restore(format!(
                            "table '{}': rows {expected}..{first_row} are missing from the hot restart store",
                            def.name
                        )));
                    }
                    let batch = rx.recv().map_err(|_| {
                        RdbError::Restore(format!(
                            "table '{}': the segment decoder stopped early",
                            def.name
                        ))
                    })??;
                    let (batch, widened) = batch;
                    let n = batch.rows as u64;
                    store.apply(&batch).map_err(fail)?;
                    drop(batch);
                    spans.push((k, first_row, n, widened));
                    expected += n;
                    progress(n);
                }
                Ok(())
            })?;
            if expected != want_rows {
                return Err(RdbError::Restore(format!(
                    "table '{}': the checkpoint holds {want_rows} rows, the store {expected}",
                    def.name
                )));
            }
            let snap = store.raw_snapshot(&def.name).map_err(fail)?;
            for (k, first, n, widened) in spans {
                if widened {
                    continue;
                }
                let pieces = row_pieces(&snap, first as usize, (first + n) as usize);
                let value = SegmentValue {
                    table: name.clone(),
                    pieces,
                };
                hs.rebind(&k, Arc::new(value))
                    .map_err(|e| RdbError::Restore(format!("table '{}': {e}", def.name)))?;
            }
            Ok(Restored {
                state: TableState {
                    generation,
                    store_generation: snap.generation,
                    rows: expected,
                    // Written again as chunk images by the next checkpoint.
                    legacy: records > 0,
                    ..TableState::default()
                },
                rows: expected,
                records,
            })
        }
        TableKind::Keyed { .. } => {
            let mut rows: Vec<(u64, Key, Batch, bool)> = Vec::with_capacity(w.records.len());
            for (k, v) in w.records {
                if !matches!(keys::parse(&k), Some(RecordKey::Row { .. })) {
                    return Err(RdbError::Restore(format!(
                        "table '{}' is a keyed table but holds a segment record",
                        def.name
                    )));
                }
                let (ordinal, b, widened) = decode_row(&def.name, &v.bytes(), schema)?;
                rows.push((ordinal, k, b, widened));
            }
            rows.sort_unstable_by_key(|r| r.0);
            for group in rows.chunks(RESTORE_ROWS_PER_APPLY) {
                let parts: Vec<Batch> = group.iter().map(|r| r.2.clone()).collect();
                if let Some(b) = Batch::concat(&parts) {
                    store.apply(&b).map_err(fail)?;
                }
                progress(group.len() as u64);
            }
            let snap = store.raw_snapshot(&def.name).map_err(fail)?;
            let chunks: Vec<Arc<RecordBatch>> = snap
                .chunks
                .iter()
                .map(|c| Arc::new(c.batch.clone()))
                .collect();
            let mut ci = 0usize;
            let mut at = 0usize;
            for (i, (ordinal, k, _, widened)) in rows.iter().enumerate() {
                while ci < chunks.len() && i >= at + chunks[ci].num_rows() {
                    at += chunks[ci].num_rows();
                    ci += 1;
                }
                let Some(chunk) = chunks.get(ci) else {
                    return Err(RdbError::Restore(format!(
                        "table '{}': restored rows and records differ in number",
                        def.name
                    )));
                };
                if *widened {
                    // Written before a column was added: keeps its bytes.
                    continue;
                }
                let value = RowValue {
                    table: name.clone(),
                    ordinal: *ordinal,
                    chunk: chunk.clone(),
                    row: i - at,
                };
                hs.rebind(k, Arc::new(value))
                    .map_err(|e| RdbError::Restore(format!("table '{}': {e}", def.name)))?;
            }
            let n = rows.len() as u64;
            let max_next = rows.last().map(|r| r.0 + 1).unwrap_or(0).max(next_ordinal);
            Ok(Restored {
                state: TableState {
                    generation,
                    store_generation: snap.generation,
                    rows: n,
                    ordinal_base: max_next - n,
                    ..TableState::default()
                },
                rows: n,
                records,
            })
        }
    }
}

struct ImagesRestored {
    store_generation: u64,
}

/// Restores an append table from its symbols records and chunk images:
/// names 0..`symbols` into its dictionary, then the images of rows
/// 0..`rows`, decoded on `parallelism` threads and installed as sealed
/// chunks. Checks that both tile their ranges exactly; the first gap or
/// undecodable record in row order is the one reported.
#[allow(clippy::too_many_arguments)]
fn restore_images(
    hs: &HotStore,
    store: &ColumnStore,
    def: &Arc<TableDef>,
    records: Vec<(Key, Value)>,
    rows: u64,
    symbols: u64,
    parallelism: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ImagesRestored, RdbError> {
    let table = def.name.as_str();
    let err = |why: String| RdbError::Restore(format!("table '{table}': {why}"));
    let mut names: Vec<(u64, Value)> = Vec::new();
    let mut images: Vec<(u64, Key, Value)> = Vec::new();
    for (k, v) in records {
        match keys::parse(&k) {
            Some(RecordKey::Symbols { first_id, .. }) => names.push((first_id, v)),
            Some(RecordKey::Image { first_row, .. }) => images.push((first_row, k, v)),
            _ => return Err(err("an append table holds a keyed row record".into())),
        }
    }
    names.sort_unstable_by_key(|n| n.0);
    let mut next_id = 0u64;
    for (first_id, v) in &names {
        if *first_id != next_id {
            return Err(err(format!(
                "symbol names {next_id}..{first_id} are missing from the hot restart store"
            )));
        }
        let bytes = v.bytes();
        let list = decode_symbols(table, &bytes)?;
        let first = u32::try_from(*first_id).map_err(|_| err(format!("symbol id {first_id}")))?;
        store
            .restore_symbols(table, first, list.iter().copied())
            .map_err(|e| err(format!("restoring symbol names: {e}")))?;
        next_id += list.len() as u64;
    }
    if next_id != symbols {
        return Err(err(format!(
            "the checkpoint holds {symbols} symbol names, the store {next_id}"
        )));
    }

    // Key order is row order (big-endian first_row); check the tiling
    // first, so that a gap is reported whatever decodes.
    images.sort_unstable_by_key(|i| i.0);
    let restorer = store
        .chunk_restorer(table)
        .map_err(|e| err(e.to_string()))?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let decoded: Vec<parking_lot::Mutex<Option<Result<RestoredChunk, tickdb_core::CoreError>>>> =
        images
            .iter()
            .map(|_| parking_lot::Mutex::new(None))
            .collect();
    // Rows each image is to give: up to the next image's first row (or the
    // checkpoint's rows for the last).
    let takes: Vec<usize> = images
        .iter()
        .enumerate()
        .map(|(i, (first, _, _))| {
            let end = images.get(i + 1).map(|n| n.0).unwrap_or(rows).min(rows);
            end.saturating_sub(*first) as usize
        })
        .collect();
    std::thread::scope(|s| {
        for _ in 0..parallelism.clamp(1, images.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, _, v)) = images.get(i) else {
                    break;
                };
                // The image's bytes stay where the reload put them: a DRAM
                // table's arrays point into them.
                let r = match v {
                    Value::Bytes(b) => restorer.decode(b.clone(), takes[i]),
                    Value::Mapped(m) => restorer.decode(m.clone(), takes[i]),
                    // Only a reloaded record reaches a restore.
                    Value::Source(_) => restorer.decode(v.to_shared(), takes[i]),
                };
                if let Ok(c) = &r {
                    progress(c.rows as u64);
                }
                *decoded[i].lock() = Some(r);
            });
        }
    });
    let mut expected = 0u64;
    let mut chunks = Vec::with_capacity(images.len());
    let mut rebinds = Vec::new();
    for (i, ((first_row, k, _), slot)) in images.iter().zip(decoded).enumerate() {
        if *first_row != expected {
            return Err(err(format!(
                "rows {expected}..{first_row} are missing from the hot restart store"
            )));
        }
        let r = slot
            .into_inner()
            .ok_or_else(|| err("a chunk image was not decoded".into()))?
            .map_err(|e| err(format!("the chunk image of rows {first_row}..: {e}")))?;
        if r.rows != takes[i] {
            return Err(err(format!(
                "the chunk image of rows {first_row}.. holds {} rows, the next starts at row {}",
                r.rows,
                first_row + takes[i] as u64
            )));
        }
        expected += r.rows as u64;
        // A cut image (written whole by a checkpoint that never became
        // durable) is written again as restored; a copied one is swapped for
        // the restored chunk; a widened one keeps its bytes.
        if r.truncated || (r.copied && !r.widened) {
            rebinds.push((k.clone(), r.truncated, r.chunk.clone()));
        }
        chunks.push(r.chunk);
    }
    if expected != rows {
        return Err(err(format!(
            "the checkpoint holds {rows} rows, the store {expected}"
        )));
    }
    store
        .adopt_chunks(table, chunks)
        .map_err(|e| err(format!("installing restored chunks: {e}")))?;
    let fail = |e: tickdb_hotrestart::Error| err(e.to_string());
    let mut rewritten = false;
    for (k, truncated, chunk) in rebinds {
        let value = Arc::new(ImageValue {
            def: def.clone(),
            chunk,
        });
        if truncated {
            hs.put_source(&k, value).map_err(fail)?;
            rewritten = true;
        } else {
            hs.rebind(&k, value).map_err(fail)?;
        }
    }
    if rewritten {
        hs.sync().map_err(fail)?;
    }
    let snap = store.raw_snapshot(table).map_err(|e| err(e.to_string()))?;
    Ok(ImagesRestored {
        store_generation: snap.generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_core::batch::{BatchBuilder, Value as Cell};
    use tickdb_core::codec;
    use tickdb_core::domain::Domains;
    use tickdb_core::Schema;
    use tickdb_hotrestart::{Config, GcConfig};

    const SCHEMA: &str = r#"
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "price", type = "f64" },
]
"#;

    /// A segment value of `rows` rows starting at `first`.
    fn segment(schema: &Schema, first: u64, rows: u64) -> Vec<u8> {
        let mut b = BatchBuilder::new(schema.table("trade").unwrap());
        for r in first..first + rows {
            b.set(0, Cell::Timestamp(r as i64));
            b.set(1, Cell::Symbol(if r % 2 == 0 { "A" } else { "B" }));
            b.set(2, Cell::F64(r as f64));
            b.end_row();
        }
        let mut out = Vec::new();
        codec::encode(&[b.finish()], &mut out);
        out
    }

    /// Restores a store holding `segments` ((first_row, value)) under a
    /// checkpoint of `rows` rows of `trade`.
    fn restore_segments(segments: &[(u64, Vec<u8>)], rows: u64) -> Result<u64, RdbError> {
        let schema = Arc::new(Schema::parse(SCHEMA, "test").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            fsync: false,
            gc: GcConfig {
                enabled: false,
                ..GcConfig::default()
            },
            ..Config::default()
        };
        let (hs, _) = HotStore::open(dir.path(), cfg).unwrap();
        for (first, v) in segments {
            hs.put(&keys::segment_key("trade", 1, *first), v).unwrap();
        }
        let meta = CheckpointMeta {
            seq: 7,
            at_unix_ns: 0,
            schema_toml: SCHEMA.into(),
            tables_filter: vec![],
            symbols_filter: vec![],
            tables: vec![TableMeta {
                name: "trade".into(),
                generation: 1,
                rows,
                next_ordinal: 0,
                symbols: 0,
            }],
        };
        let store = ColumnStore::new(schema, Domains::new(None).unwrap()).unwrap();
        let (_, report) = restore(&hs, Some(&meta), &store, 2, false)?;
        Ok(report.rows["trade"])
    }

    /// A store written before chunk images (codec segments, a version 1
    /// checkpoint record) restores, and its first checkpoint writes the
    /// table again as chunk images under a new generation and removes the
    /// segments; a restore from that gives the same rows.
    #[test]
    fn a_store_of_codec_segments_restores_and_moves_to_chunk_images() {
        use crate::rdb::Rdb;
        let schema = Arc::new(Schema::parse(SCHEMA, "test").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let mut opts = super::super::HotOptions::new(dir.path());
        opts.fsync = false;
        {
            let cfg = Config {
                fsync: false,
                ..Config::default()
            };
            let (hs, _) = HotStore::open(dir.path(), cfg).unwrap();
            for first in [0u64, 1000, 2000] {
                let v = segment(&schema, first, 1000);
                hs.put(&keys::segment_key("trade", 0, first), &v).unwrap();
            }
            let meta = CheckpointMeta {
                seq: 3,
                at_unix_ns: 0,
                schema_toml: schema.to_toml(),
                tables_filter: vec![],
                symbols_filter: vec![],
                tables: vec![TableMeta {
                    name: "trade".into(),
                    generation: 0,
                    rows: 3000,
                    next_ordinal: 0,
                    symbols: 0,
                }],
            };
            // Version 1: the same fields without `symbols`.
            let mut v1 = meta.encode();
            v1.truncate(v1.len() - 8);
            v1[0] = 1;
            hs.set_meta(super::super::meta::META_NAME, &v1).unwrap();
            hs.close().unwrap();
        }
        let restart = || {
            let hot = super::super::HotRestart::open(&opts).unwrap();
            let store =
                Arc::new(ColumnStore::new(schema.clone(), Domains::new(None).unwrap()).unwrap());
            let r = hot.restore(&store, &[], &[]).unwrap();
            let rdb = Rdb::restored(store, r.seq);
            let hot = Arc::new(hot);
            rdb.attach_hot_restart(hot.clone());
            (rdb, hot)
        };
        let (rdb, hot) = restart();
        let before = rdb.store().raw_snapshot("trade").unwrap();
        assert_eq!(before.rows, 3000);
        let more = decode_segment("trade", &segment(&schema, 3000, 10), &schema)
            .unwrap()
            .0;
        rdb.apply(4, &[more]).unwrap();
        let ck = rdb.checkpoint().unwrap().unwrap();
        assert_eq!(ck.tables_cleared, vec!["trade".to_string()]);
        let kinds: Vec<char> = hot
            .store
            .iter_prefix(keys::TABLES_PREFIX)
            .map(|(k, _)| match keys::parse(&k) {
                Some(RecordKey::Image { generation: 1, .. }) => 'a',
                Some(RecordKey::Symbols { generation: 1, .. }) => 'd',
                other => panic!("{other:?} left after the checkpoint"),
            })
            .collect();
        assert!(kinds.contains(&'a') && kinds.contains(&'d'), "{kinds:?}");
        drop((rdb, hot));
        let (rdb, _hot) = restart();
        let after = rdb.store().raw_snapshot("trade").unwrap();
        assert_eq!(after.rows, 3010);
        let rows = |s: &tickdb_core::store::TableSnapshot| -> Vec<RecordBatch> {
            s.chunks.iter().map(|c| c.batch.clone()).collect()
        };
        let (a, b) = (
            arrow_select::concat::concat_batches(&before.schema, &rows(&before)).unwrap(),
            arrow_select::concat::concat_batches(&after.schema, &rows(&after)).unwrap(),
        );
        assert_eq!(b.slice(0, 3000), a);
    }

    #[test]
    fn segments_decoded_ahead_restore_in_row_order() {
        let schema = Schema::parse(SCHEMA, "test").unwrap();
        // More segments than the decoder may run ahead, so that it waits.
        let n = RESTORE_DECODE_AHEAD_SEGMENTS as u64 * 3;
        let segs: Vec<_> = (0..n)
            .map(|i| (i * 10, segment(&schema, i * 10, 10)))
            .collect();
        assert_eq!(restore_segments(&segs, n * 10).unwrap(), n * 10);
    }

    #[test]
    fn the_first_bad_record_is_reported_whatever_the_decoder_has_seen() {
        let schema = Schema::parse(SCHEMA, "test").unwrap();
        // A gap before a corrupt segment: the gap comes first in row order.
        let segs = vec![
            (0, segment(&schema, 0, 10)),
            (20, segment(&schema, 20, 10)),
            (30, b"not a codec update".to_vec()),
        ];
        let e = restore_segments(&segs, 40).unwrap_err().to_string();
        assert!(e.contains("rows 10..20 are missing"), "{e}");
        // A corrupt segment before a gap: the corrupt one is reported.
        let segs = vec![
            (0, segment(&schema, 0, 10)),
            (10, b"not a codec update".to_vec()),
            (30, segment(&schema, 30, 10)),
        ];
        let e = restore_segments(&segs, 40).unwrap_err().to_string();
        assert!(e.contains("does not decode"), "{e}");
    }
}
