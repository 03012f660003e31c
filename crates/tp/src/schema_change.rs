//! Schema changes at run time on the tp: the schema it runs under now
//! (`LiveSchema`, read by every ingest path), and what the journal thread
//! does with a `CREATE TABLE` or `ALTER TABLE ... ADD COLUMN`.
//!
//! A change is one update of its own in the journal: a schema-change
//! marker (`Batch::schema_change`: the whole new schema as TOML, and the
//! statement), written by the journal thread, the tp's one writer, at the
//! next sequence number. So every reader (an rdb replaying, a subscriber,
//! a standby, `tickdb journal dump`) meets it exactly where it happened:
//! the records before it were written under the old schema, the ones after
//! it under the new one. The journal's schema history (`SCHEMA`) records
//! the new schema from the marker's seq on, durably, before the marker is
//! appended; a marker that never made it to the journal leaves an entry
//! covering no record, which the next start drops (`schema_binding`).
//!
//! Nothing is half-applied: the statement is checked completely against
//! the current schema first (`tickdb_core::schema_change::apply`), a
//! failed history write or append changes nothing the tp serves, and the
//! tp's ingest paths see the new schema only once the marker is in the
//! journal's order, so no row written under the new schema can be
//! journaled before it. A write checked under the old schema and journaled
//! after the marker gets nulls in the new columns (`widen`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use tickdb_core::schema_change::SchemaOp;
use tickdb_core::{Batch, Schema};
use tickdb_journal::{Journal, SchemaEntry, SchemaHistory, Storage};
use tokio::sync::oneshot;

use crate::error::TpError;

/// The schema the tp runs under and its TOML text (what subscribers get at
/// subscribe). Replaced whole by a schema change.
pub struct LiveSchema {
    cell: RwLock<(Arc<Schema>, Arc<str>)>,
}

impl LiveSchema {
    pub fn new(schema: Arc<Schema>, toml: &str) -> LiveSchema {
        LiveSchema {
            cell: RwLock::new((schema, Arc::from(toml))),
        }
    }

    pub fn schema(&self) -> Arc<Schema> {
        self.cell.read().0.clone()
    }

    pub fn toml(&self) -> Arc<str> {
        self.cell.read().1.clone()
    }

    fn set(&self, schema: Arc<Schema>, toml: &str) {
        *self.cell.write() = (schema, Arc::from(toml));
    }
}

/// A schema change asked of the journal thread.
pub(crate) struct SchemaChangeReq {
    pub ops: Vec<SchemaOp>,
    /// The statement, as the change is described in the journal and logs.
    pub what: String,
    /// The marker's sequence once committed (and published, like any
    /// update); 0 when nothing changed (`IF NOT EXISTS` of what exists):
    /// no record has seq 0.
    pub reply: oneshot::Sender<Result<u64, TpError>>,
}

/// A schema-change marker appended to the journal: its seq, its batch and
/// its encoding.
pub(crate) type Marker = (u64, Vec<Batch>, Vec<u8>);

/// What the journal thread keeps to record schema changes.
pub(crate) struct SchemaRecorder {
    pub live: Arc<LiveSchema>,
    pub history: Option<SchemaHistory>,
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    /// Set by the first change since start: from then on a write may have
    /// been checked under an older schema than the one it is journaled
    /// under (`needs_widening`), so the journal thread looks.
    pub changed: bool,
}

impl SchemaRecorder {
    /// Reads the journal's history (written at open by `schema_binding`).
    pub fn open(
        live: Arc<LiveSchema>,
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<SchemaRecorder, String> {
        let history = SchemaHistory::read(&*storage, dir).map_err(|e| e.to_string())?;
        Ok(SchemaRecorder {
            live,
            history,
            storage,
            dir: dir.to_path_buf(),
            changed: false,
        })
    }

    /// Records `toml` in force from `seq` on (recorded at `time_ns`, the
    /// marker's journal time, so a standby that records the same marker
    /// writes the same bytes as its primary). Returns after the history is
    /// durable. An entry already there for `seq` with this text is kept,
    /// with every entry after it.
    fn record(&mut self, seq: u64, time_ns: i64, toml: &str) -> Result<(), String> {
        let mut entries: Vec<SchemaEntry> = match &self.history {
            Some(h) => h.entries().to_vec(),
            None => Vec::new(),
        };
        // A standby that took its primary's history at start holds the
        // entries of changes it has yet to receive: nothing to record.
        if entries.iter().any(|e| e.first_seq == seq && e.text == toml) {
            return Ok(());
        }
        // An entry from `seq` on covers no record yet: the marker replaces it.
        entries.retain(|e| e.first_seq < seq);
        entries.push(SchemaEntry {
            first_seq: seq,
            recorded_unix_ns: time_ns,
            text: toml.to_string(),
        });
        let h = SchemaHistory::new(entries).map_err(|e| e.to_string())?;
        h.write(&*self.storage, &self.dir)
            .map_err(|e| format!("recording the schema change: {e}"))?;
        self.history = Some(h);
        Ok(())
    }

    /// The primary's side: checks `req` against the current schema and, if
    /// it changes anything, records the new schema and appends its marker
    /// at the next seq. Returns the marker's (seq, payload, schema) to be
    /// committed and published with the group; `Ok(None)` when nothing
    /// changes. Nothing is changed on an error.
    pub fn append(
        &mut self,
        journal: &mut Journal,
        req: &SchemaChangeReq,
        time_ns: i64,
    ) -> Result<Option<Marker>, TpError> {
        let current = self.live.schema();
        let next = tickdb_core::schema_change::apply(&current, &req.ops)
            .map_err(|e| TpError::BadInput(e.to_string()))?;
        let Some(next) = next else {
            return Ok(None);
        };
        let toml = next.to_toml();
        let batches = vec![Batch::schema_change(&toml, &req.what)];
        let payload = tickdb_core::codec::encode_to_vec(&batches);
        let seq = journal.last_seq() + 1;
        self.record(seq, time_ns, &toml).map_err(TpError::Io)?;
        let got = journal
            .append(crate::RECORD_KIND_UPDATE, 0, time_ns, &payload)
            .map_err(|e| TpError::Journal(e.to_string()))?;
        debug_assert_eq!(got, seq);
        // From here on every write is checked under the new schema, and is
        // queued after the marker.
        self.live.set(Arc::new(next), &toml);
        self.changed = true;
        Ok(Some((seq, batches, payload)))
    }

    /// A standby's side: a replicated record at `seq` holding a schema
    /// marker: its history records the schema as its primary's did, and the
    /// schema it would take writes under (once promoted) follows.
    pub fn replicated(&mut self, seq: u64, time_ns: i64, batches: &[Batch]) -> Result<(), TpError> {
        for b in batches {
            if let Some((toml, _)) = b.schema_change_text() {
                let schema = Schema::parse(toml, &format!("the schema change at seq {seq}"))
                    .map_err(|e| TpError::BadInput(e.to_string()))?;
                self.record(seq, time_ns, toml).map_err(TpError::Io)?;
                self.live.set(Arc::new(schema), toml);
                self.changed = true;
            }
        }
        Ok(())
    }
}

/// Whether any batch of an update holds fewer columns than its table has
/// now: it was checked under the schema before an `ADD COLUMN`.
pub(crate) fn needs_widening(schema: &Schema, batches: &[Batch]) -> bool {
    batches.iter().any(|b| {
        !b.is_marker()
            && !b.is_clear_marker()
            && schema
                .table(&b.table)
                .is_some_and(|t| t.columns.len() > b.columns.len())
    })
}

/// The update with nulls in the columns added since it was checked.
pub(crate) fn widen(schema: &Schema, batches: Vec<Batch>) -> Result<Vec<Batch>, TpError> {
    batches
        .into_iter()
        .map(|b| match schema.table(&b.table) {
            Some(t) if !b.is_marker() => b.widen(t).map_err(TpError::BadInput),
            _ => Ok(b),
        })
        .collect()
}
