//! Applying updates in sequence. Every update carries the tp's sequence
//! number; the rdb applies exactly `applied + 1`, skips anything at or below
//! `applied` (a duplicate from an overlapping replay), and reports a gap for
//! anything beyond, so the caller re-subscribes from `applied + 1`.

use crate::error::RdbError;
use crate::hot::{CheckpointReport, HotRestart, HotStatus};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tickdb_core::store::{MemoryStats, Store};
use tickdb_core::Batch;

/// Every table as of one applied sequence (`Rdb::consistent_cut`).
pub struct TablesCut {
    pub seq: u64,
    /// The store's schema as of `seq` (the tables' columns as cut).
    pub schema: Arc<tickdb_core::Schema>,
    pub tables: Vec<tickdb_core::store::TableSnapshot>,
    /// How long updates waited while the cut was taken.
    pub pause: std::time::Duration,
}

pub struct Rdb {
    store: Arc<Store>,
    applied: AtomicU64,
    tp_seq: AtomicU64,
    apply_lock: parking_lot::Mutex<()>,
    hot: OnceLock<Arc<HotRestart>>,
    /// Woken when an end-of-day marker is applied (the node's end-of-day
    /// writer waits on it).
    day_ended: tokio::sync::Notify,
    /// Whether end-of-day markers move the day out of the tables (the node
    /// writes history). Without a historical database the day stays.
    ends_days: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TableStatus {
    pub rows: u64,
    /// Bytes the table holds in DRAM and in fsmem (`Store::table_memory`).
    pub dram_bytes: u64,
    pub fsmem_bytes: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RdbStatus {
    /// Last applied sequence number.
    pub seq: u64,
    /// The tp's sequence as last heard (at subscription, then each update).
    pub tp_seq: u64,
    pub tables: BTreeMap<String, TableStatus>,
    pub memory: MemoryStats,
    /// Present when the rdb persists its tables (`--hot-restart`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_restart: Option<HotStatus>,
}

impl Rdb {
    pub fn new(store: Arc<Store>) -> Arc<Rdb> {
        Self::restored(store, 0)
    }

    /// An rdb whose store already holds every update up to `applied` (restored
    /// from Hot Restart): it applies from `applied + 1`.
    pub fn restored(store: Arc<Store>, applied: u64) -> Arc<Rdb> {
        Arc::new(Rdb {
            store,
            applied: AtomicU64::new(applied),
            tp_seq: AtomicU64::new(applied),
            apply_lock: parking_lot::Mutex::new(()),
            hot: OnceLock::new(),
            day_ended: tokio::sync::Notify::new(),
            ends_days: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Persists this rdb's tables in `hot` from now on (checkpoints).
    pub fn attach_hot_restart(&self, hot: Arc<HotRestart>) {
        let _ = self.hot.set(hot);
    }

    pub fn hot_restart(&self) -> Option<&Arc<HotRestart>> {
        self.hot.get()
    }

    /// Takes a checkpoint now. `Ok(None)` if the rdb has no Hot Restart store.
    /// Returns after the store is durable up to the reported sequence.
    pub fn checkpoint(&self) -> Result<Option<CheckpointReport>, RdbError> {
        match self.hot.get() {
            Some(h) => h.checkpoint(self).map(Some),
            None => Ok(None),
        }
    }

    /// Runs `f` with the applied sequence while no update is being applied: a
    /// consistent cut. Updates wait for as long as `f` runs, so `f` must only
    /// take snapshots.
    pub fn paused<T>(&self, f: impl FnOnce(u64) -> T) -> T {
        let _one_writer = self.apply_lock.lock();
        f(self.applied_seq())
    }

    /// A consistent cut of every table: the applied sequence and each
    /// table's rows as of it. Refused (`CoreError::DayClosing`) while an
    /// ended day's Parquet is not committed: the cut would miss its rows. Updates wait only while one reference per
    /// table is taken (`pause`; the snapshots are built after); a checkpoint
    /// and a standby's reseed both start from one.
    pub fn consistent_cut(&self) -> Result<TablesCut, tickdb_core::CoreError> {
        let (seq, schema, pins, pause) = self.paused(|seq| {
            let held = std::time::Instant::now();
            let schema = self.store.schema();
            if let Some(d) = self.store.days().closing().first() {
                return (
                    seq,
                    schema,
                    Err(tickdb_core::CoreError::DayClosing {
                        date: tickdb_core::store::date_string(d.date),
                        seq: d.seq,
                    }),
                    held.elapsed(),
                );
            }
            let pins: Result<Vec<_>, _> = schema
                .tables
                .iter()
                .map(|t| self.store.pin(&t.name))
                .collect();
            (seq, schema, pins, held.elapsed())
        });
        let tables = pins?
            .iter()
            .map(|p| p.raw_snapshot())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TablesCut {
            seq,
            schema,
            tables,
            pause,
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn applied_seq(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub fn note_tp_seq(&self, seq: u64) {
        self.tp_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// Applies update `seq`. Returns Ok(false) for a duplicate.
    pub fn apply(&self, seq: u64, batches: &[Batch]) -> Result<bool, RdbError> {
        let _one_writer = self.apply_lock.lock();
        let applied = self.applied.load(Ordering::Acquire);
        if seq <= applied {
            return Ok(false);
        }
        if seq != applied + 1 {
            return Err(RdbError::Gap {
                expected: applied + 1,
                got: seq,
            });
        }
        let mut day_ended = false;
        for b in batches {
            if let Some((toml, what)) = b.schema_change_text() {
                self.change_schema(seq, toml, what)?;
                continue;
            }
            let done = match b.end_of_day_date() {
                Some(date) if self.ends_days.load(Ordering::Relaxed) => {
                    day_ended = true;
                    self.store.end_day(date, seq).map(|_| ())
                }
                Some(date) => {
                    tracing::info!(
                        "end of day {} at seq {seq}: no historical database (--hdb), so the day stays in memory",
                        tickdb_core::store::date_string(date)
                    );
                    Ok(())
                }
                // Every batch of the update is published before any
                // table's upkeep runs (below).
                None => self.store.apply_before_upkeep(b),
            };
            done.map_err(|e| RdbError::Apply {
                seq,
                reason: e.to_string(),
            })?;
        }
        self.applied.store(seq, Ordering::Release);
        self.note_tp_seq(seq);
        if day_ended {
            self.day_ended.notify_one();
        }
        // The update is applied and visible; an upkeep that fails (it could
        // not allocate a chunk) is reported like a failed apply.
        self.store.upkeep().map_err(|e| RdbError::Apply {
            seq,
            reason: e.to_string(),
        })?;
        Ok(true)
    }

    /// Applies a schema-change marker met at `seq` (see
    /// `Batch::schema_change`): the store takes the new tables and columns,
    /// the rows already there reading as nulls in them. A marker the store
    /// already holds (a replay under a newer schema) changes nothing.
    fn change_schema(&self, seq: u64, toml: &str, what: &str) -> Result<(), RdbError> {
        let schema = tickdb_core::Schema::parse(toml, &format!("the schema change at seq {seq}"))
            .map_err(|e| RdbError::Corrupt {
            seq,
            reason: e.to_string(),
        })?;
        let changed = self
            .store
            .change_schema(&schema)
            .map_err(|e| RdbError::Apply {
                seq,
                reason: format!("schema change ({what}): {e}"),
            })?;
        if changed {
            tracing::info!("schema changed at seq {seq}: {what}");
        }
        Ok(())
    }

    /// From now on an end-of-day marker moves the day out of the tables
    /// into `store().days()`, for the node to write to its historical
    /// database; set before the first update is applied.
    pub fn end_days(&self) {
        self.ends_days.store(true, Ordering::Relaxed);
    }

    /// Resolves once an end-of-day marker has been applied since the last
    /// call (the day is then in `store().days().closing()`).
    pub async fn day_ended(&self) {
        self.day_ended.notified().await
    }

    /// Loads a consistent cut of the tables as of `seq` (a standby reseeded
    /// from its primary): applies every batch, then records `seq` as
    /// applied, so updates continue from `seq + 1`. Only on an rdb that has
    /// applied nothing yet.
    /// `load` is handed a function that applies one batch, and calls it for
    /// each batch of the cut in turn (so a cut streams from a spool without
    /// being held in memory twice).
    pub fn load_cut(
        &self,
        seq: u64,
        load: impl FnOnce(&mut dyn FnMut(&Batch) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<(), RdbError> {
        let _one_writer = self.apply_lock.lock();
        let applied = self.applied.load(Ordering::Acquire);
        if applied != 0 {
            return Err(RdbError::Apply {
                seq,
                reason: format!("a cut can only be loaded into an empty rdb; this one applied up to seq {applied}"),
            });
        }
        let store = &self.store;
        let mut apply = |b: &Batch| store.apply(b).map_err(|e| e.to_string());
        load(&mut apply).map_err(|reason| RdbError::Apply { seq, reason })?;
        self.applied.store(seq, Ordering::Release);
        self.note_tp_seq(seq);
        Ok(())
    }

    /// Decodes (checking against the schema) and applies an encoded update.
    pub fn apply_payload(&self, seq: u64, payload: &[u8]) -> Result<bool, RdbError> {
        if seq <= self.applied_seq() {
            return Ok(false);
        }
        // Under the newest schema this rdb knows: a record written before a
        // column was added holds a prefix of the table's columns.
        let batches =
            tickdb_core::codec::decode_widened(payload, &self.store.schema()).map_err(|e| {
                RdbError::Corrupt {
                    seq,
                    reason: e.to_string(),
                }
            })?;
        self.apply(seq, &batches)
    }

    pub fn status(&self) -> RdbStatus {
        let memory: BTreeMap<String, tickdb_core::store::TableMemory> =
            self.store.table_memory().into_iter().collect();
        RdbStatus {
            seq: self.applied_seq(),
            tp_seq: self.tp_seq.load(Ordering::Relaxed).max(self.applied_seq()),
            tables: self
                .store
                .row_counts()
                .into_iter()
                .map(|(name, rows)| {
                    let m = memory.get(&name).copied().unwrap_or_default();
                    let status = TableStatus {
                        rows,
                        dram_bytes: m.dram,
                        fsmem_bytes: m.fsmem,
                    };
                    (name, status)
                })
                .collect(),
            memory: self.store.memory(),
            hot_restart: self.hot.get().map(|h| h.status()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_core::batch::{BatchBuilder, Value};
    use tickdb_core::domain::Domains;
    use tickdb_core::Schema;

    fn one_trade(schema: &Schema, i: i64) -> Batch {
        let mut b = BatchBuilder::new(schema.table("trade").unwrap());
        b.set(0, Value::Timestamp(i));
        b.set(1, Value::Symbol("A"));
        b.set(2, Value::F64(1.0));
        b.set(3, Value::I64(i));
        b.end_row();
        b.finish()
    }

    #[test]
    fn applies_in_order_skips_duplicates_reports_gaps() {
        let schema = Arc::new(Schema::default_schema());
        let rdb = Rdb::new(Arc::new(
            Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap(),
        ));
        assert!(rdb.apply(1, &[one_trade(&schema, 1)]).unwrap());
        assert!(!rdb.apply(1, &[one_trade(&schema, 1)]).unwrap());
        let e = rdb.apply(3, &[one_trade(&schema, 3)]).unwrap_err();
        assert!(matches!(
            e,
            RdbError::Gap {
                expected: 2,
                got: 3
            }
        ));
        assert!(rdb.apply(2, &[one_trade(&schema, 2)]).unwrap());
        assert_eq!(rdb.status().tables["trade"].rows, 2);
        assert_eq!(rdb.applied_seq(), 2);
    }

    #[test]
    fn a_schema_change_applies_in_sequence_and_old_records_widen() {
        use tickdb_core::schema_change::{apply, NewColumn, SchemaOp};
        let schema = Arc::new(Schema::default_schema());
        let rdb = Rdb::new(Arc::new(
            Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap(),
        ));
        let enc = |b: &[Batch]| tickdb_core::codec::encode_to_vec(b);
        assert!(rdb
            .apply_payload(1, &enc(&[one_trade(&schema, 1)]))
            .unwrap());
        let next = apply(
            &schema,
            &[SchemaOp::AddColumn {
                table: "trade".into(),
                column: NewColumn {
                    name: "venue".into(),
                    ty: tickdb_core::ColumnType::Symbol,
                },
                if_not_exists: false,
            }],
        )
        .unwrap()
        .unwrap();
        let marker =
            Batch::schema_change(&next.to_toml(), "ALTER TABLE trade ADD COLUMN venue symbol");
        assert!(rdb
            .apply_payload(2, &enc(std::slice::from_ref(&marker)))
            .unwrap());
        assert_eq!(
            rdb.store().schema().table("trade").unwrap().columns.len(),
            5
        );
        // A record written under the old layout (a replay) reads as null in
        // the new column; one under the new layout has its value.
        assert!(rdb
            .apply_payload(3, &enc(&[one_trade(&schema, 3)]))
            .unwrap());
        let mut b = BatchBuilder::new(next.table("trade").unwrap());
        b.set(0, Value::Timestamp(4));
        b.set(1, Value::Symbol("A"));
        b.set(2, Value::F64(1.0));
        b.set(3, Value::I64(4));
        b.set(4, Value::Symbol("XNYS"));
        b.end_row();
        assert!(rdb.apply_payload(4, &enc(&[b.finish()])).unwrap());
        // The same change met again (a replay under the newer schema)
        // changes nothing.
        assert!(rdb.apply_payload(5, &enc(&[marker])).unwrap());
        let snap = rdb.store().snapshot("trade").unwrap();
        assert_eq!(snap.rows, 3);
        use arrow_array::Array;
        let venue: Vec<bool> = snap
            .chunks
            .iter()
            .flat_map(|c| {
                let a = c.batch.column(4);
                (0..a.len()).map(|i| a.is_valid(i)).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(venue, [false, false, true]);
    }
}
