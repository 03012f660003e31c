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
//! - An append table's segments must tile rows 0..rows exactly; anything else
//!   is corruption and stops the restart with the table and rows named.
//! - Tables are restored in parallel, one thread per table (at most
//!   `parallelism`), each applying its records in row order through the same
//!   `Store::apply` as live updates.
//! - Each record's value is then rebound to the restored rows
//!   (`Store::rebind`), so the reloaded bytes are freed and the store holds no
//!   second copy of the data.

use super::keys::{self, RecordKey};
use super::meta::CheckpointMeta;
use super::values::{decode_row, decode_segment, row_pieces, RowValue, SegmentValue};
use super::TableState;
use crate::error::RdbError;
use arrow_array::RecordBatch;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
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
                if let RecordKey::Segment { first_row, .. } = rk {
                    if first_row >= tm.rows {
                        stale_keys.push(k);
                        continue;
                    }
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
                let r = restore_table(hs, store, w, tm.map(|t| (t.rows, t.next_ordinal)), &|n| {
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
                store_generation: 0,
                rows: 0,
                ordinal_base: t.next_ordinal,
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

/// Restores one table; `tm` is the checkpoint's (rows, next_ordinal) for it.
fn restore_table(
    hs: &HotStore,
    store: &ColumnStore,
    w: TableWork,
    tm: Option<(u64, u64)>,
    progress: &dyn Fn(u64),
) -> Result<Restored, RdbError> {
    let def = w.def;
    let name: Arc<str> = Arc::from(def.name.as_str());
    let schema_now = store.schema();
    let schema: &tickdb_core::Schema = &schema_now;
    let (want_rows, next_ordinal) = tm.unwrap_or((0, 0));
    let generation = w
        .records
        .first()
        .and_then(|(k, _)| keys::parse(k).map(|r| r.generation()))
        .unwrap_or(0);
    let fail = |e: tickdb_core::CoreError| {
        RdbError::Restore(format!("table '{}': applying restored rows: {e}", def.name))
    };
    let records = w.records.len() as u64;
    match &def.kind {
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
                    ordinal_base: 0,
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
                },
                rows: n,
                records,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::meta::TableMeta;
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
            }],
        };
        let store = ColumnStore::new(schema, Domains::new(None).unwrap()).unwrap();
        let (_, report) = restore(&hs, Some(&meta), &store, 2, false)?;
        Ok(report.rows["trade"])
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
