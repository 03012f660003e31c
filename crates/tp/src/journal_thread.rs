//! The one thread that owns the journal. It drains write requests, appends
//! them (assigning sequence numbers), commits once for the whole group (one
//! fsync under `always`: group commit), then publishes and acknowledges each
//! request in sequence order. After a journal failure it acknowledges nothing
//! ever again (the journal is poisoned) until the tp is restarted.

use crate::error::TpError;
use crate::hub::{Hub, Update};
use crate::sync_gate::SyncGate;
use crate::{now_ns, RECORD_KIND_UPDATE};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tickdb_core::Batch;
use tickdb_journal::Journal;
use tokio::sync::oneshot;

/// Most requests committed as one group; bounds the latency of the first.
pub const GROUP_REQUESTS_MAX: usize = 1024;
/// Most payload bytes committed as one group.
pub const GROUP_BYTES_MAX: usize = 64 * 1024 * 1024;

pub(crate) struct WriteReq {
    pub batches: Vec<Batch>,
    pub payload: Vec<u8>,
    pub rows: usize,
    pub reply: oneshot::Sender<Result<u64, TpError>>,
}

/// What a standby's follower hands the journal: its primary's records,
/// exactly as they lie in the primary's journal, and where the primary
/// started its segments.
#[derive(Debug, Clone)]
pub enum ReplicatedItem {
    /// The primary started a segment here (before the records that follow).
    SegmentStart {
        first_seq: u64,
        created_unix_ns: i64,
    },
    /// Whole records back to back, as in the primary's segment file.
    Records(Vec<u8>),
}

pub(crate) struct ReplicatedReq {
    pub items: Vec<ReplicatedItem>,
    /// Answered with the last sequence appended, once committed.
    pub reply: oneshot::Sender<Result<u64, TpError>>,
}

/// A change of epoch: the journal begins `epoch` (rolling its segment and
/// recording the epoch durably) and rolls segments itself from now on, as
/// a primary does.
pub(crate) struct BeginEpochReq {
    pub epoch: u32,
    pub reply: oneshot::Sender<Result<u64, TpError>>,
}

pub(crate) enum Req {
    Write(WriteReq),
    /// `CREATE TABLE`, `ALTER TABLE ... ADD COLUMN` (`schema_change`).
    SchemaChange(crate::schema_change::SchemaChangeReq),
    Replicated(ReplicatedReq),
    BeginEpoch(BeginEpochReq),
    /// Answered with the last sequence journaled once every request queued
    /// before it is committed (a switchover's "everything in flight").
    Barrier(oneshot::Sender<Result<u64, TpError>>),
}

impl Req {
    fn bytes(&self) -> usize {
        match self {
            Req::Write(w) => w.payload.len(),
            Req::Replicated(r) => r
                .items
                .iter()
                .map(|i| match i {
                    ReplicatedItem::Records(b) => b.len(),
                    ReplicatedItem::SegmentStart { .. } => 0,
                })
                .sum(),
            Req::BeginEpoch(_) | Req::Barrier(_) | Req::SchemaChange(_) => 0,
        }
    }

    fn refuse(self, e: TpError) {
        let _ = match self {
            Req::Write(w) => w.reply.send(Err(e)),
            Req::SchemaChange(c) => c.reply.send(Err(e)),
            Req::Replicated(r) => r.reply.send(Err(e)),
            Req::BeginEpoch(b) => b.reply.send(Err(e)),
            Req::Barrier(b) => b.send(Err(e)),
        };
    }
}

/// One committed update of a group: what is published and who is answered.
struct Appended {
    update: Update,
    reply: Option<oneshot::Sender<Result<u64, TpError>>>,
}

/// A replicated request's records, appended: its updates (published like
/// any other, after the commit) and its reply.
struct ReplAppended {
    updates: Vec<Update>,
    last_seq: u64,
    reply: oneshot::Sender<Result<u64, TpError>>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub seq: AtomicU64,
    pub synced_seq: AtomicU64,
    pub rows: AtomicU64,
    pub updates: AtomicU64,
    pub bytes: AtomicU64,
    pub commits: AtomicU64,
    pub poisoned: parking_lot::Mutex<Option<String>>,
    /// The journal's epoch history, as of the last change.
    pub epochs: parking_lot::Mutex<tickdb_journal::EpochHistory>,
}

/// Where the journal thread sends what it committed.
pub(crate) struct Outputs {
    pub hub: Arc<Hub>,
    pub counters: Arc<Counters>,
    /// The last committed sequence, for replication shippers.
    pub committed: tokio::sync::watch::Sender<u64>,
    /// Semi-sync: committed writes wait here for the standbys.
    pub gate: Option<Arc<SyncGate>>,
    /// Whether writes may be journaled and acknowledged.
    pub role: Arc<crate::role::RoleCell>,
    /// The schema writes are checked under, and its history.
    pub schema: crate::schema_change::SchemaRecorder,
}

/// Appends one replicated request's items, or explains why not (nothing
/// of a refused record is kept; records before it in the request are).
fn append_replicated(
    journal: &mut Journal,
    schema: &mut crate::schema_change::SchemaRecorder,
    items: &[ReplicatedItem],
) -> Result<(Vec<Update>, u64), TpError> {
    let mut updates = Vec::new();
    let mut last = journal.last_seq();
    for item in items {
        match item {
            ReplicatedItem::SegmentStart {
                first_seq,
                created_unix_ns,
            } => journal
                .roll_segment_at(*first_seq, *created_unix_ns)
                .map_err(|e| TpError::BadInput(format!("segment start at seq {first_seq}: {e}")))?,
            ReplicatedItem::Records(bytes) => {
                let mut at = 0usize;
                while at < bytes.len() {
                    let rest = &bytes[at..];
                    if rest.len() < tickdb_journal::format::RECORD_HEADER_BYTES as usize {
                        return Err(TpError::BadInput(format!(
                            "a record after seq {last} is cut short ({} bytes left)",
                            rest.len()
                        )));
                    }
                    let payload_len =
                        u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    let len = tickdb_journal::format::RECORD_HEADER_BYTES as usize + payload_len;
                    let Some(record) = rest.get(..len) else {
                        return Err(TpError::BadInput(format!(
                            "the record after seq {last} says {len} bytes, {} arrived",
                            rest.len()
                        )));
                    };
                    let mut h = [0u8; 32];
                    h.copy_from_slice(&record[..32]);
                    let head = tickdb_journal::format::decode_record_header(&h, payload_len as u32);
                    let payload = bytes::Bytes::copy_from_slice(&record[32..]);
                    // The standby's rdb applies decoded batches; a record
                    // that is not an update (none yet) carries none.
                    let batches = if head.kind == RECORD_KIND_UPDATE {
                        tickdb_core::codec::decode(&payload, None).map_err(|e| {
                            TpError::BadInput(format!(
                                "record seq {} does not decode: {e}",
                                head.seq
                            ))
                        })?
                    } else {
                        Vec::new()
                    };
                    // A schema change is recorded before its marker is
                    // appended, as on the primary (append_raw checks the
                    // seq is the next one).
                    if batches.iter().any(|b| b.schema_change_text().is_some())
                        && head.seq == journal.last_seq() + 1
                    {
                        schema.replicated(head.seq, head.time_ns, &batches)?;
                    }
                    let seq = journal
                        .append_raw(record)
                        .map_err(|e| TpError::BadInput(e.to_string()))?;
                    updates.push(Update {
                        seq,
                        batches,
                        payload,
                        rows: head.rows as usize,
                        time_ns: head.time_ns,
                        epoch: head.epoch,
                    });
                    last = seq;
                    at += len;
                }
            }
        }
    }
    Ok((updates, last))
}

pub(crate) fn run(mut journal: Journal, rx: Receiver<Req>, out: Outputs) {
    let Outputs {
        hub,
        counters,
        committed,
        gate,
        role,
        mut schema,
    } = out;
    let mut epoch_seen = journal.epoch();
    let mut group: Vec<Appended> = Vec::new();
    let mut repl: Vec<ReplAppended> = Vec::new();
    let mut barriers: Vec<oneshot::Sender<Result<u64, TpError>>> = Vec::new();
    loop {
        let first = match journal.sync_due_in() {
            Some(due) => match rx.recv_timeout(due) {
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = journal.sync() {
                        poison(&counters, &e.to_string());
                    } else {
                        counters
                            .synced_seq
                            .store(journal.synced_seq(), Ordering::Relaxed);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(r) => r,
                Err(_) => break,
            },
        };
        let mut bytes = 0usize;
        let mut next = Some(first);
        while let Some(req) = next.take() {
            if let Some(reason) = journal.poisoned() {
                req.refuse(TpError::Journal(reason.to_string()));
            } else {
                bytes += req.bytes();
                match req {
                    // Fenced (or demoted) since the request was queued:
                    // nothing of it is journaled.
                    Req::Write(req) if !role.accepting() => {
                        let e = role.refusal().unwrap_or(TpError::Shutdown);
                        let _ = req.reply.send(Err(e));
                    }
                    Req::SchemaChange(req) if !role.accepting() => {
                        let e = role.refusal().unwrap_or(TpError::Shutdown);
                        let _ = req.reply.send(Err(e));
                    }
                    Req::SchemaChange(req) => {
                        let t = now_ns();
                        let epoch = journal.epoch();
                        match schema.append(&mut journal, &req, t) {
                            Ok(Some((seq, batches, payload))) => {
                                tracing::info!("schema change at seq {seq}: {}", req.what);
                                group.push(Appended {
                                    update: Update {
                                        seq,
                                        batches,
                                        payload: bytes::Bytes::from(payload),
                                        rows: 0,
                                        time_ns: t,
                                        epoch,
                                    },
                                    reply: Some(req.reply),
                                })
                            }
                            // Nothing to change: answered with seq 0.
                            Ok(None) => {
                                let _ = req.reply.send(Ok(0));
                            }
                            Err(e) => {
                                let _ = req.reply.send(Err(e));
                            }
                        }
                    }
                    Req::Barrier(b) => barriers.push(b),
                    Req::BeginEpoch(b) => {
                        let r = journal
                            .commit()
                            .and_then(|_| journal.begin_epoch(b.epoch))
                            .map(|_| {
                                journal.set_roll_policy(tickdb_journal::RollPolicy::Automatic);
                                journal.last_seq()
                            })
                            .map_err(|e| TpError::Journal(e.to_string()));
                        epoch_seen = journal.epoch();
                        *counters.epochs.lock() = journal.epoch_history().clone();
                        let _ = b.reply.send(r);
                    }
                    Req::Write(mut req) => {
                        let t = now_ns();
                        let epoch = journal.epoch();
                        // Checked under the schema before a column was
                        // added, journaled after it: nulls in the new
                        // columns, as every reader of the marker expects.
                        let live = schema.changed.then(|| schema.live.schema());
                        if let Some(live) =
                            live.filter(|l| crate::schema_change::needs_widening(l, &req.batches))
                        {
                            match crate::schema_change::widen(
                                &live,
                                std::mem::take(&mut req.batches),
                            ) {
                                Ok(b) => {
                                    req.payload = tickdb_core::codec::encode_to_vec(&b);
                                    req.batches = b;
                                }
                                Err(e) => {
                                    let _ = req.reply.send(Err(e));
                                    continue;
                                }
                            }
                        }
                        let ends_day = req.batches.iter().any(|b| b.end_of_day_date().is_some());
                        match journal.append(RECORD_KIND_UPDATE, req.rows as u32, t, &req.payload) {
                            Ok(seq) => {
                                if ends_day {
                                    // The day's journal ends with its
                                    // end-of-day marker: the next day starts
                                    // a segment, so trimming the day removes
                                    // whole files. A failed roll poisons the
                                    // journal, and the group's commit then
                                    // refuses every write.
                                    if let Err(e) = journal.roll_segment() {
                                        tracing::error!("rolling the journal at end of day: {e}");
                                    }
                                }
                                group.push(Appended {
                                    update: Update {
                                        seq,
                                        batches: req.batches,
                                        // Shared from here on: every network
                                        // subscriber sends these very bytes.
                                        payload: bytes::Bytes::from(req.payload),
                                        rows: req.rows,
                                        time_ns: t,
                                        epoch,
                                    },
                                    reply: Some(req.reply),
                                })
                            }
                            Err(e) => {
                                let _ = req.reply.send(Err(TpError::Journal(e.to_string())));
                            }
                        }
                    }
                    Req::Replicated(r) => {
                        match append_replicated(&mut journal, &mut schema, &r.items) {
                            Ok((updates, last_seq)) => repl.push(ReplAppended {
                                updates,
                                last_seq,
                                reply: r.reply,
                            }),
                            Err(e) => {
                                // Records appended before the bad one stay
                                // buffered and are committed with the group; the
                                // follower learns where its journal ends from
                                // the tp's sequence.
                                let _ = r.reply.send(Err(e));
                            }
                        }
                    }
                }
            }
            if group.len() + repl.len() < GROUP_REQUESTS_MAX && bytes < GROUP_BYTES_MAX {
                next = rx.try_recv().ok();
            }
        }
        if group.is_empty() && repl.is_empty() {
            for b in barriers.drain(..) {
                let _ = b.send(Ok(journal.last_seq()));
            }
            continue;
        }
        // Returns after the fsync under `always`; after the write() otherwise.
        match journal.commit() {
            Ok(_) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .synced_seq
                    .store(journal.synced_seq(), Ordering::Relaxed);
                for r in repl.drain(..) {
                    for u in r.updates {
                        counters.seq.store(u.seq, Ordering::Relaxed);
                        counters.rows.fetch_add(u.rows as u64, Ordering::Relaxed);
                        counters.updates.fetch_add(1, Ordering::Relaxed);
                        counters
                            .bytes
                            .fetch_add(u.payload.len() as u64, Ordering::Relaxed);
                        hub.publish(Arc::new(u));
                    }
                    let _ = r.reply.send(Ok(r.last_seq));
                }
                for a in group.drain(..) {
                    let seq = a.update.seq;
                    counters.seq.store(seq, Ordering::Relaxed);
                    counters
                        .rows
                        .fetch_add(a.update.rows as u64, Ordering::Relaxed);
                    counters.updates.fetch_add(1, Ordering::Relaxed);
                    counters
                        .bytes
                        .fetch_add(a.update.payload.len() as u64, Ordering::Relaxed);
                    match &gate {
                        // Semi-sync: published and acknowledged once the
                        // standbys have it (or refused at the timeout).
                        Some(g) => g.hold(Arc::new(a.update), a.reply),
                        None => {
                            hub.publish(Arc::new(a.update));
                            if let Some(reply) = a.reply {
                                // Fenced during the commit: journaled here,
                                // never acknowledged.
                                let _ = reply.send(match role.refusal() {
                                    Some(e) => Err(e),
                                    None => Ok(seq),
                                });
                            }
                        }
                    }
                }
                committed.send_replace(counters.seq.load(Ordering::Relaxed));
                if journal.epoch() != epoch_seen {
                    epoch_seen = journal.epoch();
                    *counters.epochs.lock() = journal.epoch_history().clone();
                }
                for b in barriers.drain(..) {
                    let _ = b.send(Ok(journal.last_seq()));
                }
            }
            Err(e) => {
                let reason = e.to_string();
                poison(&counters, &reason);
                for a in group.drain(..) {
                    if let Some(reply) = a.reply {
                        let _ = reply.send(Err(TpError::Journal(reason.clone())));
                    }
                }
                for r in repl.drain(..) {
                    let _ = r.reply.send(Err(TpError::Journal(reason.clone())));
                }
                for b in barriers.drain(..) {
                    let _ = b.send(Err(TpError::Journal(reason.clone())));
                }
            }
        }
    }
    if journal.poisoned().is_none() {
        if let Err(e) = journal.sync() {
            tracing::error!("final journal sync failed: {e}");
        }
    }
    if let Some(g) = &gate {
        g.stop();
    }
    hub.close_all("tickerplant stopped");
}
fn poison(counters: &Counters, reason: &str) {
    let mut p = counters.poisoned.lock();
    if p.is_none() {
        tracing::error!(
            "journal failed, the tp stops acknowledging writes until restarted: {reason}"
        );
        *p = Some(reason.to_string());
    }
}
