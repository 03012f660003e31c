//! The checkpoint: a consistent cut of every table at one journal sequence S,
//! made durable in the Hot Restart store.
//!
//! 1. The cut: under the rdb's apply lock (so between two updates) read S and
//!    pin each table's published state (`Store::pin`: one `Arc` copy per
//!    table, whatever the data size). That is the whole ingest pause, and it
//!    is measured. The raw snapshots (immutable chunks and the active chunk
//!    cut at its published length) are built from the pins after the lock is
//!    released.
//! 2. Without the lock: write the rows added since the last checkpoint. An
//!    append table gets one chunk image per column-store chunk holding rows
//!    not persisted yet (a chunk that was still filling at the last
//!    checkpoint is written again whole, under the same key), and a symbols
//!    record with the names its dictionary gained; a keyed table gets one
//!    row record per key upserted since (the latest row). A table cleared
//!    since, or restored from a store written before chunk images, gets a
//!    new key generation and all its rows.
//! 3. `set_meta("checkpoint", S and the tables' state)`, which first makes
//!    every record above durable, then `sync()`: now the store is durable up
//!    to S (`CheckpointReport` is returned only after this fsync).
//! 4. Only then are the generations of cleared tables removed (one prefix
//!    tombstone each): before the new checkpoint is durable, a crash must find
//!    the old generation that the old checkpoint names.

use super::keys;
use super::meta::{CheckpointMeta, TableMeta};
use super::values::{ImageValue, RowValue, SymbolsValue};
use super::{now_unix_ns, CheckpointCrash, HotRestart, TableState};
use crate::error::RdbError;
use crate::rdb::Rdb;
use arrow_array::{Array, RecordBatch};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::store::TableSnapshot;
use tickdb_core::{TableDef, TableKind};

/// What one checkpoint did. Returned after the store is durable up to `seq`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckpointReport {
    /// The journal sequence the store is now durable up to.
    pub seq: u64,
    pub at_unix_ns: i64,
    /// How long updates could not be applied: the apply lock held for the cut.
    pub pause_us: u64,
    /// How long the checkpoint waited for the update being applied to finish.
    pub wait_us: u64,
    /// The whole checkpoint, fsyncs included.
    pub duration_ms: u64,
    pub rows_written: u64,
    pub records_written: u64,
    /// Record bytes appended to the store (before GC).
    pub bytes_written: u64,
    /// Tables cleared since the previous checkpoint.
    pub tables_cleared: Vec<String>,
}

struct Cut {
    seq: u64,
    /// The store's schema as cut, as TOML (the checkpoint records it).
    schema_toml: String,
    tables: Vec<(Arc<TableDef>, TableSnapshot)>,
    pause: Duration,
    wait: Duration,
}

fn take_cut(rdb: &Rdb) -> Result<Cut, RdbError> {
    let asked = Instant::now();
    let cut = rdb.consistent_cut().map_err(|e| match e {
        tickdb_core::CoreError::DayClosing { .. } => RdbError::Deferred(e.to_string()),
        e => RdbError::Checkpoint(format!("snapshot: {e}")),
    })?;
    let (seq, snaps, pause) = (cut.seq, cut.tables, cut.pause);
    let wait = asked.elapsed().saturating_sub(pause);
    Ok(Cut {
        seq,
        schema_toml: cut.schema.to_toml(),
        tables: snaps.into_iter().map(|s| (s.def.clone(), s)).collect(),
        pause,
        wait,
    })
}

#[derive(Default)]
struct Written {
    rows: u64,
    records: u64,
}

/// Writes an append table's rows `persisted..` as chunk images (every chunk
/// holding such rows, whole, keyed by its first row) and the symbol names
/// from id `symbols_persisted` on. Returns the names persisted now.
fn write_images(
    hot: &HotRestart,
    def: &Arc<TableDef>,
    generation: u64,
    snap: &TableSnapshot,
    persisted: usize,
    symbols_persisted: usize,
    w: &mut Written,
) -> Result<u64, RdbError> {
    let name = def.name.as_str();
    let fail = |e: tickdb_hotrestart::Error| RdbError::Checkpoint(format!("table '{name}': {e}"));
    // Names first: the chunks' ids need them. The dictionary as cut holds
    // every id the cut's chunks use.
    let names = snap.symbols.len();
    if names > symbols_persisted {
        hot.store
            .put_source(
                &keys::symbols_key(name, generation, symbols_persisted as u64),
                Arc::new(SymbolsValue {
                    names: snap.symbols.clone(),
                    from: symbols_persisted,
                    to: names,
                }),
            )
            .map_err(fail)?;
        w.records += 1;
        hot.test_crash_due(w.records)?;
    }
    let mut at = 0usize;
    for c in &snap.chunks {
        let (first, end) = (at, at + c.batch.num_rows());
        at = end;
        if end <= persisted || end == first {
            continue;
        }
        hot.store
            .put_source(
                &keys::image_key(name, generation, first as u64),
                Arc::new(ImageValue {
                    def: def.clone(),
                    chunk: c.clone(),
                }),
            )
            .map_err(fail)?;
        w.rows += (end - first.max(persisted)) as u64;
        w.records += 1;
        hot.test_crash_due(w.records)?;
    }
    Ok(names.max(symbols_persisted) as u64)
}

/// Writes the latest row of each key upserted in raw rows `from..to`.
#[allow(clippy::too_many_arguments)]
fn write_rows(
    hot: &HotRestart,
    name: &Arc<str>,
    generation: u64,
    snap: &TableSnapshot,
    key_columns: &[usize],
    ordinal_base: u64,
    from: usize,
    to: usize,
    w: &mut Written,
) -> Result<(), RdbError> {
    let mut latest: HashMap<Vec<u8>, (usize, usize, u64)> = HashMap::new();
    let chunks: Vec<Arc<RecordBatch>> = snap
        .chunks
        .iter()
        .map(|c| Arc::new(c.batch.clone()))
        .collect();
    let mut at = 0usize;
    let mut key = Vec::new();
    for (ci, c) in chunks.iter().enumerate() {
        let n = c.num_rows();
        for r in from.max(at)..to.min(at + n) {
            key.clear();
            keys::row_key_bytes(c, key_columns, r - at, &mut key);
            latest.insert(key.clone(), (ci, r - at, ordinal_base + r as u64));
        }
        at += n;
        if at >= to {
            break;
        }
    }
    for (k, (ci, row, ordinal)) in latest {
        let value = RowValue {
            table: name.clone(),
            ordinal,
            chunk: chunks[ci].clone(),
            row,
        };
        hot.store
            .put_source(&keys::row_key(name, generation, &k), Arc::new(value))
            .map_err(|e| RdbError::Checkpoint(format!("table '{name}': {e}")))?;
        w.rows += 1;
        w.records += 1;
        hot.test_crash_due(w.records)?;
    }
    Ok(())
}

/// Runs one checkpoint (see the module comment). Returns after the fsync that
/// makes the store durable up to the reported sequence.
pub(super) fn run(hot: &HotRestart, rdb: &Rdb) -> Result<CheckpointReport, RdbError> {
    let started = Instant::now();
    let mut ck = hot.ck.lock();
    let Some(setup) = ck.setup.clone() else {
        return Err(RdbError::Checkpoint(
            "the store was not restored before the first checkpoint".into(),
        ));
    };
    let bytes_before = hot.store.io_stats().user_bytes_written;
    let cut = take_cut(rdb)?;
    let mut next: HashMap<String, TableState> = ck.tables.clone();
    let mut stale: Vec<(String, u64)> = Vec::new();
    let mut w = Written::default();
    let mut metas = Vec::with_capacity(cut.tables.len());
    for (def, snap) in &cut.tables {
        let name: Arc<str> = Arc::from(def.name.as_str());
        let st = next.entry(def.name.clone()).or_default();
        if snap.generation != st.store_generation || st.legacy {
            stale.push((def.name.clone(), st.generation));
            *st = TableState {
                generation: st.generation + 1,
                store_generation: snap.generation,
                ..TableState::default()
            };
        }
        let (from, to) = (st.rows as usize, snap.rows);
        if to < from {
            return Err(RdbError::Checkpoint(format!(
                "table '{}' holds {to} rows, fewer than the {from} already persisted, without a clear",
                def.name
            )));
        }
        match &def.kind {
            TableKind::Append => {
                st.symbols = write_images(
                    hot,
                    def,
                    st.generation,
                    snap,
                    from,
                    st.symbols as usize,
                    &mut w,
                )?
            }
            TableKind::Keyed { key } => write_rows(
                hot,
                &name,
                st.generation,
                snap,
                key,
                st.ordinal_base,
                from,
                to,
                &mut w,
            )?,
        }
        st.rows = to as u64;
        metas.push(TableMeta {
            name: def.name.clone(),
            generation: st.generation,
            rows: st.rows,
            next_ordinal: match def.kind {
                TableKind::Append => 0,
                TableKind::Keyed { .. } => st.ordinal_base + st.rows,
            },
            symbols: st.symbols,
        });
    }
    let crash = *hot.test_crash.lock();
    hot.test_crash_due(w.records)?;
    let at_unix_ns = now_unix_ns();
    let meta = CheckpointMeta {
        seq: cut.seq,
        at_unix_ns,
        // The tables' schema as cut: it grows with run-time schema changes.
        schema_toml: cut.schema_toml.clone(),
        tables_filter: setup.tables_filter.clone(),
        symbols_filter: setup.symbols_filter.clone(),
        tables: metas,
    };
    let durable = |e: tickdb_hotrestart::Error| RdbError::Checkpoint(e.to_string());
    hot.store
        .set_meta(super::meta::META_NAME, &meta.encode())
        .map_err(durable)?;
    hot.store.sync().map_err(durable)?;
    // Durable up to cut.seq from here on.
    ck.tables = next;
    hot.durable_seq
        .store(cut.seq, std::sync::atomic::Ordering::Release);
    if crash == Some(CheckpointCrash::BeforeClear) {
        return Err(RdbError::Checkpoint("test crash before clear".into()));
    }
    for (table, generation) in &stale {
        hot.store
            .clear_prefix(&keys::generation_prefix(table, *generation))
            .map_err(durable)?;
    }
    Ok(CheckpointReport {
        seq: cut.seq,
        at_unix_ns,
        pause_us: cut.pause.as_micros() as u64,
        wait_us: cut.wait.as_micros() as u64,
        duration_ms: started.elapsed().as_millis() as u64,
        rows_written: w.rows,
        records_written: w.records,
        bytes_written: hot.store.io_stats().user_bytes_written - bytes_before,
        tables_cleared: stale.into_iter().map(|(t, _)| t).collect(),
    })
}
