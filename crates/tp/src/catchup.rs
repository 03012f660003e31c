//! A network subscriber's catch-up: the journal records from its `from_seq`
//! through the tp's sequence at subscription, read on a blocking thread
//! ahead of its socket. This module owns that read-ahead and keeps it inside
//! the subscriber memory bound.
//!
//! Catch-up readers wait for memory; they never cut anyone off (publishing
//! does that, when it needs the room). The reader's own buffer is reserved
//! before the reader is opened. A record's size is known only once it is
//! read, so before each read the reader reserves what it expects (the size
//! of its previous record; the journal's average for the first), waits
//! until that fits under the global bound and under its own read-ahead
//! bound, and then counts the record at its real size. A record larger than
//! its reservation can take the total past the bound by the difference;
//! readers read one at a time, so never by more than one record.

use crate::hub::{SubFilter, UPDATE_OVERHEAD_BYTES};
use crate::sub_queue::{CatchupHold, SubQueue};
use crate::tickerplant::Tickerplant;
use bytes::Bytes;
use std::sync::Arc;
use tickdb_journal::JournalReader;
use tokio::sync::mpsc;

/// Bytes of journal records read ahead of one subscriber's socket (one
/// record of any size is always allowed when nothing else is ahead).
pub const CATCHUP_AHEAD_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Records read ahead of one subscriber's socket; the byte bounds above are
/// the ones that matter, this only sizes the channel.
pub const CATCHUP_RECORDS_AHEAD_MAX: usize = 1024;
/// Memory a journal reader holds for its read buffer (tickdb-journal's
/// reader reads through a 1 MiB `BufReader`), counted while it is open.
pub const CATCHUP_READER_BYTES: usize = 1024 * 1024;

/// A record ready for the socket, and the hold that counts it until sent.
pub struct CatchupRecord {
    pub seq: u64,
    pub epoch: u32,
    /// What the subscriber gets: the journal payload, or the encoding of
    /// the part its filter passes.
    pub payload: Bytes,
    pub hold: CatchupHold,
}

/// An open journal reader over a subscriber's catch-up range.
pub struct Catchup {
    reader: JournalReader,
    /// Counts the reader's buffer until the reading thread ends.
    reader_hold: CatchupHold,
    records: u64,
}

/// Waits for memory for a journal reader, then opens it over
/// `from..=to`. Blocking: call it off the async runtime. `Err` carries the
/// message for the subscriber (the journal no longer holds `from`, or the
/// queue was closed while waiting).
pub fn open(
    tp: &Tickerplant,
    queue: &Arc<SubQueue>,
    from: u64,
    to: u64,
) -> Result<Catchup, String> {
    let reader_hold = queue.hold_catchup(CATCHUP_READER_BYTES, false, CATCHUP_AHEAD_BYTES_MAX)?;
    let reader = tp
        .open_journal_reader(from, to)
        .map_err(|e| e.to_string())?;
    Ok(Catchup {
        reader,
        reader_hold,
        records: to + 1 - from.max(1),
    })
}

/// Starts the reading thread. Each item is a record to send, in sequence
/// order, or the error that ends the catch-up. The channel ends when the
/// range is read, or early when the queue is closed (the caller then finds
/// the queue closed and must not go on to live updates).
pub fn start(
    c: Catchup,
    queue: Arc<SubQueue>,
    filter: SubFilter,
) -> mpsc::Receiver<Result<CatchupRecord, String>> {
    let (tx, rx) = mpsc::channel(CATCHUP_RECORDS_AHEAD_MAX);
    tokio::task::spawn_blocking(move || read(c, &queue, &filter, &tx));
    rx
}

fn read(
    c: Catchup,
    queue: &Arc<SubQueue>,
    filter: &SubFilter,
    tx: &mpsc::Sender<Result<CatchupRecord, String>>,
) {
    let Catchup {
        mut reader,
        reader_hold,
        records,
    } = c;
    let memory_max = queue.memory_bytes_max();
    let average = usize::try_from(reader.bytes_total() / records.max(1)).unwrap_or(usize::MAX);
    let mut expect = average.min(CATCHUP_AHEAD_BYTES_MAX);
    loop {
        let reserve = (expect + UPDATE_OVERHEAD_BYTES).min(memory_max);
        let Ok(hold) = queue.hold_catchup(reserve, true, CATCHUP_AHEAD_BYTES_MAX) else {
            break; // closed: the writer reports why
        };
        let next = {
            let _one_reader_at_a_time = queue.catchup_read_lock();
            reader.next()
        };
        let rec = match next {
            None => break,
            Some(Err(e)) => {
                let _ = tx.blocking_send(Err(format!("journal replay failed: {e}")));
                break;
            }
            Some(Ok(rec)) => rec,
        };
        hold.resize(rec.payload.len() + UPDATE_OVERHEAD_BYTES);
        expect = rec.payload.len();
        let payload = if filter.is_all() {
            Bytes::from(rec.payload)
        } else {
            let batches = match tickdb_core::codec::decode(&rec.payload, None) {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.blocking_send(Err(format!("journal record {}: {e}", rec.seq)));
                    break;
                }
            };
            let encoded = tickdb_core::codec::encode_to_vec(&filter.select(&batches));
            drop((batches, rec.payload));
            hold.resize(encoded.len() + UPDATE_OVERHEAD_BYTES);
            Bytes::from(encoded)
        };
        let item = CatchupRecord {
            seq: rec.seq,
            epoch: rec.epoch,
            payload,
            hold,
        };
        if tx.blocking_send(Ok(item)).is_err() {
            break;
        }
    }
    drop(reader);
    drop(reader_hold);
}
