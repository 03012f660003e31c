//! The rdb inside `tickdb up`: it subscribes to the in-process tp (no
//! network hop), replays the journal up to the tp's sequence at
//! subscription, then applies live updates. If it is ever cut off as too
//! slow it subscribes again from its last applied sequence.

use crate::lifecycle::Lifecycle;
use std::sync::Arc;
use std::time::Instant;
use tickdb_rdb::Rdb;
use tickdb_tp::{SubFilter, Tickerplant};

/// Applies journal records and live updates forever (until the tp stops).
/// The node is ready once the first replay is done; a later catch-up (after
/// being cut off as too slow) serves the consistent prefix it has, and its
/// lag shows in `/status`.
pub fn run(tp: Arc<Tickerplant>, rdb: Arc<Rdb>, life: Lifecycle) {
    loop {
        let from = rdb.applied_seq() + 1;
        let sub = match tp.subscribe("rdb(embedded)", SubFilter::default(), from) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("embedded rdb cannot subscribe: {e}");
                life.failed(&format!("the rdb cannot subscribe to the tp: {e}"));
                return;
            }
        };
        rdb.note_tp_seq(sub.current_seq);
        if let Some(reader) = sub.catchup {
            let total = sub.current_seq + 1 - from;
            let started = Instant::now();
            let mut last_log = Instant::now();
            tracing::info!("replaying journal records {from}..={}", sub.current_seq);
            if !life.is_ready() {
                life.loading("replaying the journal (records)", total);
            }
            for rec in reader {
                let rec = match rec {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!("journal replay failed: {e}");
                        life.failed(&format!("journal replay failed: {e}"));
                        tp.unsubscribe(sub.queue.id());
                        return;
                    }
                };
                if let Err(e) = rdb.apply_payload(rec.seq, &rec.payload) {
                    tracing::error!("journal replay: {e}");
                    life.failed(&format!("journal replay: {e}"));
                    tp.unsubscribe(sub.queue.id());
                    return;
                }
                life.progress(rec.seq + 1 - from);
                if last_log.elapsed().as_secs() >= 2 {
                    last_log = Instant::now();
                    tracing::info!("replaying: {}/{total} records", rec.seq + 1 - from);
                }
            }
            tracing::info!(
                "replayed {total} records in {:.2}s",
                started.elapsed().as_secs_f64()
            );
        }
        life.ready();
        'live: loop {
            match sub.queue.next_blocking() {
                Ok(updates) => {
                    for u in updates {
                        if let Err(e) = rdb.apply(u.seq, &u.batches) {
                            tracing::warn!("embedded rdb: {e}; re-subscribing");
                            break 'live;
                        }
                    }
                }
                Err(reason) => {
                    if reason.contains("stopped") {
                        return;
                    }
                    tracing::warn!(
                        "embedded rdb: {reason}; re-subscribing from {}",
                        rdb.applied_seq() + 1
                    );
                    break 'live;
                }
            }
        }
        tp.unsubscribe(sub.queue.id());
    }
}
