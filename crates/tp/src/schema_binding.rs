//! Binds the schema to its journal: at open, the tp compares the schema it
//! was given with the journal's schema history (`SCHEMA`, kept by
//! tickdb-journal) and decides whether it may write under it.
//!
//! Records hold columns by position and type only, so a record means
//! something only under the schema it was written under. Without this
//! check a tp started with another schema replays nothing (every old record
//! fails to decode in the rdb), yet journals new records in the new layout,
//! and going back to the old schema then stops at the first of those.
//!
//! The rule (docs/journal.md, "Schema history"; the comparison itself is
//! `tickdb_core::schema_diff`):
//! - a new journal records the schema from seq 1;
//! - the same schema (by meaning: comments, formatting, table order and
//!   memory domains do not matter) opens and records nothing;
//! - a compatible change (tables added; a designated timestamp or index
//!   column changed) is recorded from the next seq, and logged;
//! - an incompatible one is refused, naming every difference, and nothing
//!   is written;
//! - a schema that covers no record yet (the journal ended before its
//!   first_seq, after a restart with no write or a cut by repair) can be
//!   replaced: nothing depends on it;
//! - a journal written before schemas were recorded (no `SCHEMA`) opens
//!   only if every record it holds decodes under the given schema, and then
//!   the schema is recorded from its first seq;
//! - a damaged history is refused, never replaced.
//!
//! Because a compatible change only adds tables, every record decodes under
//! the newest schema too: an rdb replays the whole journal under the schema
//! the tp sends it. The history is what tools (`tickdb journal verify`,
//! `dump`) decode each record with.

use std::path::Path;

use tickdb_core::schema_diff::{diff, SchemaChange};
use tickdb_core::{Batch, Schema};
use tickdb_journal::{JournalError, SchemaEntry, SchemaHistory, Storage};

use crate::error::OpenError;
use crate::RECORD_KIND_UPDATE;

// A schema the tp accepted must fit in a history entry.
const _: () = assert!(
    tickdb_core::schema::SCHEMA_FILE_BYTES_MAX
        <= tickdb_journal::schema_history::SCHEMA_TEXT_BYTES_MAX as usize
);

/// What binding did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// A new journal (or one whose schema covered no record): the schema is
    /// recorded from `first_seq`.
    Recorded { first_seq: u64 },
    /// The journal's current schema means the same: nothing recorded.
    Same,
    /// A compatible change, recorded from `first_seq`.
    Changed {
        first_seq: u64,
        differences: Vec<String>,
    },
    /// A journal without a history: `records` records were checked to
    /// decode under the schema, which is recorded from `first_seq`.
    Adopted { first_seq: u64, records: u64 },
    /// The journal's schema is the given one with tables or columns added
    /// at run time (`CREATE TABLE`, `ALTER TABLE ... ADD COLUMN`): the tp
    /// runs under the journal's schema (the history's current entry), and
    /// nothing is recorded.
    Grown { added: Vec<String> },
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Recorded { first_seq } => {
                write!(f, "schema recorded in the journal from seq {first_seq}")
            }
            Bound::Same => write!(f, "schema matches the journal's"),
            Bound::Changed {
                first_seq,
                differences,
            } => write!(
                f,
                "compatible schema change recorded from seq {first_seq}: {}",
                differences.join("; ")
            ),
            Bound::Adopted { first_seq, records } => write!(
                f,
                "the journal had no schema history: its {records} record(s) decode under the given schema, recorded from seq {first_seq}"
            ),
            Bound::Grown { added } => write!(
                f,
                "the journal's schema has run-time changes the given schema lacks; running under the journal's schema ({})",
                added.join("; ")
            ),
        }
    }
}

/// Binds `schema` (whose text is `text`, read from `origin`) to the journal
/// in `dir`, which the caller has opened (so holds its lock) and which ends
/// at `last_seq`, before anything is appended. Returns after any new history
/// is durable (see `SchemaHistory::write`).
pub fn bind(
    storage: &dyn Storage,
    dir: &Path,
    schema: &Schema,
    text: &str,
    origin: &str,
    last_seq: u64,
    standby: bool,
) -> Result<Bound, OpenError> {
    let history_path = SchemaHistory::path(dir);
    let history = SchemaHistory::read(storage, dir).map_err(|e| match e {
        JournalError::Corrupt { .. } | JournalError::UnsupportedVersion { .. } => {
            OpenError::Corrupt(format!(
                "{e}. The schema history says which schema the journal's records were written \
                 under; it is not rebuilt from a guess. Nothing was written. Restore {} from a \
                 backup, or move the journal aside and start a new one",
                history_path.display()
            ))
        }
        e => OpenError::Io(format!("reading the schema history: {e}")),
    })?;
    let now = storage.now_unix_ns();
    let entry = |first_seq| SchemaEntry {
        first_seq,
        recorded_unix_ns: now,
        text: text.to_string(),
    };
    let write = |entries: Vec<SchemaEntry>| -> Result<(), OpenError> {
        let h = SchemaHistory::new(entries)
            .map_err(|e| OpenError::BadInput(format!("schema {origin}: {e}")))?;
        h.write(storage, dir)
            .map_err(|e| OpenError::Io(format!("recording the schema: {e}")))
    };
    // No history that covers the records: a new journal records the schema
    // from seq 1; records already there are checked against it and adopt it.
    let record_or_adopt = || -> Result<Bound, OpenError> {
        if last_seq == 0 {
            write(vec![entry(1)])?;
            return Ok(Bound::Recorded { first_seq: 1 });
        }
        let (first_seq, records) = adopt(dir, schema, origin)?;
        write(vec![entry(first_seq)])?;
        Ok(Bound::Adopted { first_seq, records })
    };
    let Some(history) = history else {
        return record_or_adopt();
    };
    let parse = |e: &SchemaEntry| {
        Schema::parse(
            &e.text,
            &format!(
                "{} (entry from seq {})",
                history_path.display(),
                e.first_seq
            ),
        )
        .map_err(|err| {
            OpenError::Corrupt(format!(
                "the journal's schema history holds a schema this tickdb cannot read: {err}. \
                 Nothing was written"
            ))
        })
    };
    let current = history.current();
    // The usual restart: the current schema again, in force from a seq the
    // journal has reached.
    if current.first_seq <= last_seq + 1 && diff(&parse(current)?, schema) == SchemaChange::Same {
        return Ok(Bound::Same);
    }
    // A standby runs under its primary's history (`adopt_schema` installed
    // it): entries past its last record describe records still on their
    // way from the primary, which were written under them. Nothing is
    // dropped or recorded.
    if standby && diff(&parse(current)?, schema) == SchemaChange::Same {
        return Ok(Bound::Same);
    }
    // Entries after last_seq cover no record (nothing was written under
    // them, or repair or point-in-time recovery cut those records): nothing
    // depends on them, and one starting after last_seq + 1 would claim the
    // next records for the schema before it. The given schema is compared
    // with the last entry that covers records.
    let mut kept: Vec<SchemaEntry> = history
        .entries()
        .iter()
        .filter(|e| e.first_seq <= last_seq)
        .cloned()
        .collect();
    let Some(base) = kept.last() else {
        // The history starts after the records held (only a hand-made
        // directory gets here): check them like a journal without one.
        return record_or_adopt();
    };
    match diff(&parse(base)?, schema) {
        SchemaChange::Same => {
            // The given schema is the one the last records were written
            // under; the entries after it go.
            if kept.len() != history.entries().len() {
                write(kept)?;
            }
            Ok(Bound::Same)
        }
        SchemaChange::Compatible(d) => {
            kept.push(entry(last_seq + 1));
            write(kept)?;
            Ok(Bound::Changed {
                first_seq: last_seq + 1,
                differences: d.iter().map(|x| x.to_string()).collect(),
            })
        }
        SchemaChange::Incompatible(_)
            if tickdb_core::schema_change::extension(schema, &parse(base)?).is_ok() =>
        {
            // The records were written under the given schema grown at run
            // time: the journal's schema is the one to run under.
            let added = tickdb_core::schema_change::extension(schema, &parse(base)?)
                .unwrap_or_default()
                .iter()
                .map(|x| x.to_string())
                .collect();
            if kept.len() != history.entries().len() {
                write(kept)?;
            }
            Ok(Bound::Grown { added })
        }
        SchemaChange::Incompatible(d) => {
            let list: Vec<String> = d.iter().map(|x| format!("  - {x}")).collect();
            Err(OpenError::SchemaMismatch(format!(
                "the schema {origin} does not fit the journal {dir}: its records up to seq {last_seq} \
                 were written under the schema recorded in {hist} (in force since seq {since}), \
                 and {origin} changes it incompatibly:\n{list}\n\
                 Records already journaled would no longer decode, or would decode into other columns. \
                 Nothing was written. Start with the schema the journal was written under \
                 (`tickdb journal schema {dir}` prints it), or start a new journal in another \
                 --data-dir. Adding tables is a compatible change: it is recorded and accepted; \
                 columns are added at run time with ALTER TABLE ... ADD COLUMN \
                 (docs/journal.md, \"Schema history\").",
                dir = dir.display(),
                hist = history_path.display(),
                since = base.first_seq,
                list = list.join("\n"),
            )))
        }
    }
}

/// A journal without a schema history: checks that every record it holds
/// decodes under `schema`. Returns (first seq held, records checked).
fn adopt(dir: &Path, schema: &Schema, origin: &str) -> Result<(u64, u64), OpenError> {
    let mut first_bad: Option<(u64, String)> = None;
    let rep = tickdb_journal::verify_payloads(dir, &mut |seq, kind, payload| {
        let r = check_payload(schema, kind, payload).map(|_| ());
        if let (Err(e), None) = (&r, &first_bad) {
            first_bad = Some((seq, e.clone()));
        }
        r
    })
    .map_err(|e| OpenError::Io(format!("checking the journal's records: {e}")))?;
    if let Some((seq, _)) = first_bad {
        let p = rep
            .problems
            .iter()
            .find(|p| p.what.contains(&format!("record seq {seq} ")))
            .map(|p| p.to_string())
            .unwrap_or_else(|| format!("record seq {seq}"));
        let bad = rep.problems.len();
        return Err(OpenError::SchemaMismatch(format!(
            "the schema {origin} does not fit the journal {}: the journal has no schema history \
             (it was written by a tickdb that did not record schemas), so its {} record(s) were \
             checked against {origin}, and {bad} of them do not decode; the first: {p}. Nothing was written. \
             Start with the schema the journal was written under (it is then recorded), or start a \
             new journal in another --data-dir",
            dir.display(),
            rep.records,
        )));
    }
    // Recovery ran before this, so the journal is consistent; any other
    // problem (a concurrent writer) is still no reason to record a schema.
    if let Some(p) = rep.problems.first() {
        return Err(OpenError::Io(format!(
            "checking the journal's records: {p}"
        )));
    }
    Ok((rep.first_seq.max(1), rep.records))
}

fn check_payload(schema: &Schema, kind: u8, payload: &[u8]) -> Result<Vec<Batch>, String> {
    // A schema-change marker holds the schema from its own seq on, which
    // the history records at that seq: it decodes under any schema.
    if kind != RECORD_KIND_UPDATE {
        return Err(format!(
            "unknown record kind {kind} (this tickdb writes kind {RECORD_KIND_UPDATE})"
        ));
    }
    tickdb_core::codec::decode(payload, Some(schema)).map_err(|e| e.to_string())
}

/// Decodes journal records under the schema in force at each one's seq, as
/// the journal's schema history says (for `tickdb journal verify` and
/// `dump`).
pub struct RecordDecoder {
    /// (first_seq, schema), first_seq increasing.
    schemas: Vec<(u64, Schema)>,
}

impl RecordDecoder {
    /// Parses every schema of the history. Err names an entry this build
    /// cannot read.
    pub fn new(history: &SchemaHistory) -> Result<RecordDecoder, String> {
        let mut schemas = Vec::with_capacity(history.entries().len());
        for e in history.entries() {
            let s = Schema::parse(
                &e.text,
                &format!("schema history entry from seq {}", e.first_seq),
            )
            .map_err(|err| err.to_string())?;
            schemas.push((e.first_seq, s));
        }
        Ok(RecordDecoder { schemas })
    }

    /// The schema in force at `seq` (None before the first entry).
    pub fn schema_at(&self, seq: u64) -> Option<&Schema> {
        let n = self.schemas.partition_point(|(first, _)| *first <= seq);
        n.checked_sub(1).map(|i| &self.schemas[i].1)
    }

    /// Decodes a record's payload under the schema in force at `seq`.
    pub fn decode(&self, seq: u64, kind: u8, payload: &[u8]) -> Result<Vec<Batch>, String> {
        let schema = self.schema_at(seq).ok_or_else(|| {
            format!(
                "no schema recorded for seq {seq} (the history starts at seq {})",
                self.schemas.first().map(|s| s.0).unwrap_or(0)
            )
        })?;
        check_payload(schema, kind, payload)
    }

    /// `decode`, keeping only the verdict.
    pub fn check(&self, seq: u64, kind: u8, payload: &[u8]) -> Result<(), String> {
        self.decode(seq, kind, payload).map(|_| ())
    }
}
