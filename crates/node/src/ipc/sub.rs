//! `.u.sub` as kdb+tick's `u.q` serves it: after the call, the subscriber
//! gets an async `(`upd; t; table)` for each update of the tables it
//! asked for, filtered by its symbols, and `(`.u.end; date)` when the
//! tables are cleared for the end of the day.
//!
//! A connection holds one subscription at the tp (every table), so that a
//! second `.u.sub` on it starts with no gap; the per-table symbol filters
//! are applied here. It is the same bounded queue as the subscription
//! port's: a subscriber that does not read is cut off (and its connection
//! closed) once it holds more than the tp's subscriber memory bound.

use super::convert::table_from_batch;
use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tickdb_core::batch::Batch;
use tickdb_core::schema::Schema;
use tickdb_ipc::{Atom, Kind, MsgType, K};
use tickdb_tp::{SubFilter, SubQueue, Tickerplant};
use tokio::sync::mpsc;

/// Per table subscribed: the symbols (None: every symbol).
type Filters = HashMap<String, Option<HashSet<String>>>;

pub struct Subscriber {
    filters: Arc<Mutex<Filters>>,
    queue: Arc<SubQueue>,
    pump: tokio::task::JoinHandle<()>,
    tp: Arc<Tickerplant>,
}

impl Subscriber {
    /// Registers at the tp from the next update on, and starts sending to
    /// `out` (the connection's writer). `cut_off` is told why the tp
    /// dropped this subscriber, if it does.
    pub fn start(
        tp: Arc<Tickerplant>,
        peer: &str,
        out: mpsc::Sender<Vec<u8>>,
        may_compress: bool,
        cut_off: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Subscriber, String> {
        let sub = tp
            .subscribe(&format!("ipc {peer}"), SubFilter::default(), u64::MAX)
            .map_err(|e| e.to_string())?;
        let filters: Arc<Mutex<Filters>> = Arc::default();
        let (f2, q2, mut schema) = (filters.clone(), sub.queue.clone(), tp.schema());
        let pump = tokio::spawn(async move {
            let why = pump(&q2, &f2, &mut schema, &out, may_compress).await;
            let _ = cut_off.send(why);
        });
        Ok(Subscriber {
            filters,
            queue: sub.queue,
            pump,
            tp,
        })
    }

    /// Adds (or replaces) the filter of `table`.
    pub fn add(&self, table: &str, syms: Option<Vec<String>>) {
        self.filters
            .lock()
            .insert(table.to_string(), syms.map(|s| s.into_iter().collect()));
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.pump.abort();
        self.tp.unsubscribe(self.queue.id());
    }
}

/// Sends updates until the queue is closed (returns why) or the connection
/// is gone. Everything queued when the pump looks goes out together, one
/// message per table: each update at once when the tp publishes at once
/// (kdb+tick's zero-latency mode), or what arrived in each interval when it
/// runs with `--publish-interval-ms` (its `-t` batch mode).
async fn pump(
    q: &Arc<SubQueue>,
    filters: &Mutex<Filters>,
    schema: &mut Arc<Schema>,
    out: &mpsc::Sender<Vec<u8>>,
    may_compress: bool,
) -> String {
    loop {
        let held = match q.next().await {
            Ok(items) => items,
            Err(reason) => return reason,
        };
        let msgs = {
            let updates: Vec<&tickdb_tp::Update> = held.iter().map(|d| &**d.update()).collect();
            messages(&updates, filters, schema)
        };
        for m in msgs {
            let bytes = match tickdb_ipc::encode_message(MsgType::Async, &m, may_compress) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("kdb+ IPC: an update could not be encoded: {e}");
                    continue;
                }
            };
            if out.send(bytes).await.is_err() {
                return "the connection closed".into();
            }
        }
        // `held` is dropped here: the tp counts its updates written.
    }
}

/// The messages some updates make for this subscriber, in order: one
/// `upd` per table (its rows from every update, filtered by symbol), and a
/// `.u.end` where the day ended.
/// Days from 1970-01-01 to kdb+'s epoch, 2000-01-01.
const KDB_EPOCH_DAYS: i32 = 10_957;

/// `schema` follows the schema changes the updates carry (CREATE TABLE,
/// ALTER TABLE ... ADD COLUMN): the rows after a change are sent with its
/// columns.
fn messages(
    updates: &[&tickdb_tp::Update],
    filters: &Mutex<Filters>,
    schema: &mut Arc<Schema>,
) -> Vec<K> {
    let filters = filters.lock();
    let mut out = Vec::new();
    // Per table, in order of first appearance.
    // A table's only part is borrowed from the update: most updates carry
    // one batch per table, and copying it per subscriber would be waste.
    let mut pending: Vec<(String, Vec<Cow<Batch>>)> = Vec::new();
    fn flush(schema: &Schema, pending: &mut Vec<(String, Vec<Cow<Batch>>)>, out: &mut Vec<K>) {
        for (table, mut parts) in pending.drain(..) {
            let Some(def) = schema.table(&table) else {
                continue;
            };
            let whole = match parts.len() {
                1 => parts.pop(),
                _ => Batch::concat(&parts).map(Cow::Owned),
            };
            let Some(b) = whole else {
                continue;
            };
            out.push(K::List(vec![
                K::symbol("upd"),
                K::symbol(&table),
                table_from_batch(def, &b),
            ]));
        }
    }
    for u in updates {
        for b in &u.batches {
            if let Some((toml, _)) = b.schema_change_text() {
                // The rows before the change go with the columns they have.
                flush(schema, &mut pending, &mut out);
                match Schema::parse(toml, &format!("the schema change at seq {}", u.seq)) {
                    Ok(s) => *schema = Arc::new(s),
                    Err(e) => tracing::warn!("kdb+ IPC subscription: {e}"),
                }
                continue;
            }
            if let Some(date) = b.end_of_day_date() {
                // kdb+'s `.u.end[date]`, after everything before it.
                if !filters.is_empty() {
                    flush(schema, &mut pending, &mut out);
                    out.push(K::List(vec![
                        K::symbol(".u.end"),
                        K::Atom(Atom::Int(Kind::Date, date - KDB_EPOCH_DAYS)),
                    ]));
                }
                continue;
            }
            if b.is_clear_marker() {
                // An operator's clear is not an end of day: a kdb+
                // subscriber would save its tables on `.u.end`.
                continue;
            }
            let Some(want) = filters.get(&b.table) else {
                continue;
            };
            let Some(def) = schema.table(&b.table) else {
                continue;
            };
            let part = match (want, def.sym_column) {
                (Some(syms), Some(sc)) => {
                    let keep: Vec<usize> = (0..b.rows)
                        .filter(|i| {
                            b.columns[sc]
                                .data
                                .symbol(*i)
                                .is_some_and(|s| syms.contains(s))
                        })
                        .collect();
                    if keep.len() == b.rows {
                        Cow::Borrowed(b)
                    } else {
                        Cow::Owned(b.select(&keep))
                    }
                }
                // Every symbol, or a table without a symbol column.
                _ => Cow::Borrowed(b),
            };
            if part.rows == 0 {
                continue;
            }
            match pending.iter_mut().find(|(t, _)| *t == b.table) {
                Some((_, parts)) => parts.push(part),
                None => pending.push((b.table.clone(), vec![part])),
            }
        }
    }
    flush(schema, &mut pending, &mut out);
    out
}
