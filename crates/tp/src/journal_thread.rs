//! The one thread that owns the journal. It drains write requests, appends
//! them (assigning sequence numbers), commits once for the whole group (one
//! fsync under `always`: group commit), then publishes and acknowledges each
//! request in sequence order. After a journal failure it acknowledges nothing
//! ever again (the journal is poisoned) until the tp is restarted.

use crate::error::TpError;
use crate::hub::{Hub, Update};
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

#[derive(Default)]
pub(crate) struct Counters {
    pub seq: AtomicU64,
    pub synced_seq: AtomicU64,
    pub rows: AtomicU64,
    pub updates: AtomicU64,
    pub bytes: AtomicU64,
    pub commits: AtomicU64,
    pub poisoned: parking_lot::Mutex<Option<String>>,
}

pub(crate) fn run(
    mut journal: Journal,
    rx: Receiver<WriteReq>,
    hub: Arc<Hub>,
    counters: Arc<Counters>,
) {
    let mut group: Vec<(WriteReq, u64)> = Vec::new();
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
                let _ = req.reply.send(Err(TpError::Journal(reason.to_string())));
            } else {
                bytes += req.payload.len();
                match journal.append(RECORD_KIND_UPDATE, req.rows as u32, now_ns(), &req.payload) {
                    Ok(seq) => group.push((req, seq)),
                    Err(e) => {
                        let _ = req.reply.send(Err(TpError::Journal(e.to_string())));
                    }
                }
            }
            if group.len() < GROUP_REQUESTS_MAX && bytes < GROUP_BYTES_MAX {
                next = rx.try_recv().ok();
            }
        }
        if group.is_empty() {
            continue;
        }
        // Returns after the fsync under `always`; after the write() otherwise.
        match journal.commit() {
            Ok(_) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .synced_seq
                    .store(journal.synced_seq(), Ordering::Relaxed);
                let t = now_ns();
                for (req, seq) in group.drain(..) {
                    counters.seq.store(seq, Ordering::Relaxed);
                    counters.rows.fetch_add(req.rows as u64, Ordering::Relaxed);
                    counters.updates.fetch_add(1, Ordering::Relaxed);
                    counters
                        .bytes
                        .fetch_add(req.payload.len() as u64, Ordering::Relaxed);
                    hub.publish(Arc::new(Update {
                        seq,
                        batches: req.batches,
                        // Shared from here on: every network subscriber
                        // sends these very bytes.
                        payload: bytes::Bytes::from(req.payload),
                        rows: req.rows,
                        time_ns: t,
                    }));
                    let _ = req.reply.send(Ok(seq));
                }
            }
            Err(e) => {
                let reason = e.to_string();
                poison(&counters, &reason);
                for (req, _) in group.drain(..) {
                    let _ = req.reply.send(Err(TpError::Journal(reason.clone())));
                }
            }
        }
    }
    if journal.poisoned().is_none() {
        if let Err(e) = journal.sync() {
            tracing::error!("final journal sync failed: {e}");
        }
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
