//! Following a tp over the network. `link` subscribes from a sequence and
//! returns the tp's current sequence S and schema; `follow` applies the
//! catch-up records (≤ S) and then live updates, and after any break
//! (network, tp restart, being cut off as too slow) re-subscribes from the
//! last applied sequence + 1. The journal fills whatever was missed.

use crate::error::RdbError;
use crate::rdb::Rdb;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_net::proto::{read_message, Message};
use tickdb_net::stream::Stream;
use tokio::io::BufReader;

/// Wait between reconnect attempts, doubling up to the max.
pub const RECONNECT_DELAY_MS_MIN: u64 = 50;
pub const RECONNECT_DELAY_MS_MAX: u64 = 2000;
/// How often replay progress is logged.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);

pub struct TpLink {
    pub addr: String,
    pub current_seq: u64,
    pub schema_toml: String,
    from_seq: u64,
    stream: BufReader<Stream>,
}

#[derive(Debug, Clone, Default)]
pub struct Interest {
    pub tables: Vec<String>,
    pub symbols: Vec<String>,
}

/// The epoch of the last record applied, as the tp's Epoch messages tell
/// it: sent when re-subscribing, so a tp that never had that record (a
/// new primary promoted before it reached its standby) refuses instead of
/// handing a gap or a duplicate.
#[derive(Debug)]
pub struct EpochTrack {
    applied: std::sync::atomic::AtomicU32,
    /// (epoch, first seq) announced and not yet reached.
    pending: parking_lot::Mutex<Option<(u32, u64)>>,
}

impl Default for EpochTrack {
    /// Not known until the tp says (a rdb restored from a checkpoint).
    fn default() -> Self {
        EpochTrack {
            applied: std::sync::atomic::AtomicU32::new(tickdb_net::proto::EPOCH_UNKNOWN),
            pending: parking_lot::Mutex::new(None),
        }
    }
}

impl EpochTrack {
    pub fn applied_epoch(&self) -> u32 {
        self.applied.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn announce(&self, epoch: u32, first_seq: u64) {
        *self.pending.lock() = Some((epoch, first_seq));
    }

    fn applied_seq(&self, seq: u64) {
        let mut p = self.pending.lock();
        if let Some((epoch, first)) = *p {
            if seq >= first {
                self.applied
                    .store(epoch, std::sync::atomic::Ordering::Relaxed);
                *p = None;
            }
        }
    }
}

/// Connects to the primary among `addrs` (a comma-separated list; a
/// standby when no address is the primary) and subscribes from
/// `from_seq`, the record before it held from `epoch`.
pub async fn link(
    addrs: &str,
    from_seq: u64,
    epoch: u32,
    interest: &Interest,
) -> Result<TpLink, RdbError> {
    match tickdb_net::follow::subscribe_any(
        addrs,
        from_seq,
        &interest.tables,
        &interest.symbols,
        epoch,
    )
    .await
    {
        Ok(s) => Ok(TpLink {
            addr: s.addr,
            current_seq: s.current_seq,
            schema_toml: s.schema_toml,
            from_seq,
            stream: s.stream,
        }),
        Err(e) if e.fatal => Err(RdbError::Diverged(e.reason)),
        Err(e) => Err(RdbError::Link {
            addr: addrs.to_string(),
            reason: e.reason,
        }),
    }
}

/// Applies everything a link delivers until it breaks.
async fn drain(rdb: &Rdb, mut l: TpLink, epochs: &EpochTrack) -> Result<(), RdbError> {
    let err = |reason: String| RdbError::Link {
        addr: l.addr.clone(),
        reason,
    };
    rdb.note_tp_seq(l.current_seq);
    let backlog = l.current_seq.saturating_sub(l.from_seq.saturating_sub(1));
    if backlog > 0 {
        tracing::info!(
            "replaying {backlog} journal records {}..={} from the tp",
            l.from_seq,
            l.current_seq
        );
    }
    let started = Instant::now();
    let mut last_log = Instant::now();
    let mut replay_done = backlog == 0;
    loop {
        let msg = read_message(&mut l.stream)
            .await
            .map_err(|e| err(e.to_string()))?;
        match msg {
            Some(Message::Epoch { epoch, first_seq }) => epochs.announce(epoch, first_seq),
            Some(Message::Update { seq, payload }) => {
                rdb.apply_payload(seq, &payload)?;
                epochs.applied_seq(seq);
                if !replay_done {
                    if seq >= l.current_seq {
                        replay_done = true;
                        tracing::info!(
                            "replay done: {backlog} records in {:.2}s; now live from {}",
                            started.elapsed().as_secs_f64(),
                            l.current_seq + 1
                        );
                    } else if last_log.elapsed() >= PROGRESS_EVERY {
                        last_log = Instant::now();
                        tracing::info!("replaying: {}/{} records", seq + 1 - l.from_seq, backlog);
                    }
                }
            }
            Some(Message::Heartbeat { current_seq }) => rdb.note_tp_seq(current_seq),
            Some(Message::Error { message }) => return Err(err(message)),
            Some(other) => return Err(err(format!("unexpected message {other:?}"))),
            None => return Err(err("closed the connection".into())),
        }
    }
}

/// Follows the tp forever, starting with an established link if given.
/// Returns only on an error that reconnecting cannot fix (an update that
/// does not fit the schema).
pub async fn follow(
    rdb: Arc<Rdb>,
    addr: String,
    interest: Interest,
    first: Option<TpLink>,
    epochs: Arc<EpochTrack>,
) -> RdbError {
    let mut next = first;
    let mut delay = RECONNECT_DELAY_MS_MIN;
    loop {
        let l = match next.take() {
            Some(l) => l,
            None => match link(
                &addr,
                rdb.applied_seq() + 1,
                epochs.applied_epoch(),
                &interest,
            )
            .await
            {
                Ok(l) => {
                    tracing::info!(
                        "subscribed to tp {} from seq {}",
                        l.addr,
                        rdb.applied_seq() + 1
                    );
                    delay = RECONNECT_DELAY_MS_MIN;
                    l
                }
                Err(e @ RdbError::Diverged(_)) => return e,
                Err(e) => {
                    tracing::warn!("{e}; retrying in {delay} ms");
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    delay = (delay * 2).min(RECONNECT_DELAY_MS_MAX);
                    continue;
                }
            },
        };
        match drain(&rdb, l, &epochs).await {
            Err(e @ RdbError::Apply { .. })
            | Err(e @ RdbError::Corrupt { .. })
            | Err(e @ RdbError::Diverged(_)) => return e,
            Err(e) => {
                tracing::warn!("{e}; re-subscribing from seq {}", rdb.applied_seq() + 1);
            }
            Ok(()) => {}
        }
    }
}
