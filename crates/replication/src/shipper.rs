//! Ships one standby its records. A reader thread reads them from the
//! journal files (exact bytes, checked) a bounded number of frames ahead
//! of the socket: a slow or stalled standby only slows its own reader,
//! never the primary's journal thread, and holds at most
//! `SHIP_FRAMES_AHEAD` frames of memory; whatever it has not taken yet
//! stays on disk. Caught up, the reader waits for the next commit
//! (streaming) or for the next interval (the log forwarder of Zero-Impact
//! Crash Recovery for kdb+ ships every 10 seconds). An acknowledgement task
//! reads the standby's durable and applied sequences and reports them to
//! the semi-sync gate.

use crate::protocol::{self, Message, Mode, HANDSHAKE_FRAME_BYTES_MAX};
use crate::status::{LinkState, StandbyLink};
use crate::ReplError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_journal::RawReader;
use tickdb_net::stream::{StreamRead, StreamWrite};
use tickdb_tp::Tickerplant;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Records per frame, in bytes (a larger record gets a frame of its own).
pub const SHIP_FRAME_BYTES: usize = 1024 * 1024;
/// Frames read ahead of the socket per standby.
pub const SHIP_FRAMES_AHEAD: usize = 4;
/// A heartbeat goes out after this long without a frame.
pub const HEARTBEAT_MS: u64 = 500;
/// A standby acknowledges at least every second; silent this long, the
/// link is taken for down (a cut cable sends no reset) and closed.
pub const ACK_SILENCE_MS: u64 = 3_000;

/// How records are shipped.
#[derive(Debug, Clone, Copy)]
pub struct ShipOptions {
    pub mode: Mode,
    /// Interval mode's period.
    pub interval: Duration,
}

/// What the reader thread hands the socket.
enum Frame {
    Message(Message, Option<(u64, u64)>),
    /// Everything committed has been shipped.
    CaughtUp,
}

/// Ships records from `from_seq` until the standby leaves or a failure.
pub async fn ship(
    tp: Arc<Tickerplant>,
    link: Arc<StandbyLink>,
    from_seq: u64,
    rd: StreamRead,
    mut wr: StreamWrite,
    opts: ShipOptions,
) -> Result<(), ReplError> {
    let (tx, mut rx) = mpsc::channel::<Result<Frame, ReplError>>(SHIP_FRAMES_AHEAD);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (tp, stop, handle) = (tp.clone(), stop.clone(), tokio::runtime::Handle::current());
        std::thread::Builder::new()
            .name(format!("repl-ship-{}", link.id))
            .spawn(move || read_frames(&tp, from_seq, opts, &tx, &stop, &handle))
            .map_err(|e| {
                ReplError::Io(std::io::Error::new(
                    e.kind(),
                    format!("spawning a shipper: {e}"),
                ))
            })?
    };
    let mut acks = tokio::spawn(read_acks(rd, tp.clone(), link.clone()));
    let result: Result<(), ReplError> = async {
        loop {
            let next = tokio::select! {
                f = rx.recv() => f,
                r = &mut acks => {
                    return match r {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(ReplError::Protocol(format!("acknowledgement task: {e}"))),
                    };
                }
                _ = tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS)) => {
                    protocol::write_message(&mut wr, &Message::Heartbeat {
                        primary_seq: tp.seq(),
                        primary_time_ns: crate::now_ns(),
                    }).await?;
                    continue;
                }
            };
            match next {
                None => return Err(ReplError::Journal("the shipper's reader stopped".into())),
                Some(Err(e)) => return Err(e),
                Some(Ok(Frame::CaughtUp)) => {
                    if link.state() == LinkState::CatchingUp {
                        link.set_state(LinkState::Streaming, None);
                    }
                }
                Some(Ok(Frame::Message(m, shipped))) => {
                    wr.write_all(&m.encode()?).await?;
                    // Out now over TLS too (a no-op on plain TCP): the
                    // standby acknowledges what it has, and semi-sync
                    // writes wait on that.
                    wr.flush().await?;
                    if let Some((seq, bytes)) = shipped {
                        link.shipped(seq, bytes);
                    }
                }
            }
        }
    }
    .await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    acks.abort();
    drop(rx);
    let _ = tokio::task::spawn_blocking(move || reader.join()).await;
    result
}

/// Reads the standby's acknowledgements until it closes the connection.
async fn read_acks(
    mut rd: StreamRead,
    tp: Arc<Tickerplant>,
    link: Arc<StandbyLink>,
) -> Result<(), ReplError> {
    loop {
        let next = tokio::time::timeout(
            Duration::from_millis(ACK_SILENCE_MS),
            protocol::read_message(&mut rd, HANDSHAKE_FRAME_BYTES_MAX),
        )
        .await
        .map_err(|_| {
            ReplError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no acknowledgement from the standby for {ACK_SILENCE_MS} ms: the link is down"
                ),
            ))
        })?;
        match next? {
            None => return Ok(()),
            Some(Message::Ack {
                received_seq,
                durable_seq,
                applied_seq,
            }) => {
                link.acked(received_seq, durable_seq, applied_seq);
                if let Some(g) = tp.sync_gate() {
                    g.report(link.id, durable_seq);
                }
            }
            Some(Message::Refuse { reason }) => {
                return Err(ReplError::Refused(format!("the standby stopped: {reason}")))
            }
            Some(other) => {
                return Err(ReplError::Protocol(format!(
                    "the standby sent {} after the handshake",
                    other.name()
                )))
            }
        }
    }
}

/// The reader thread: frames from the journal files, a bounded number
/// ahead, until `stop` or the channel closes.
fn read_frames(
    tp: &Tickerplant,
    from_seq: u64,
    opts: ShipOptions,
    tx: &mpsc::Sender<Result<Frame, ReplError>>,
    stop: &std::sync::atomic::AtomicBool,
    handle: &tokio::runtime::Handle,
) {
    let dir = tp.config().journal_dir.clone();
    let mut committed = tp.committed();
    let mut reader = match RawReader::open(&dir, from_seq, tp.seq()) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.blocking_send(Err(ReplError::Journal(e.to_string())));
            return;
        }
    };
    let mut next_tick = Instant::now() + opts.interval;
    let mut records = Vec::with_capacity(SHIP_FRAME_BYTES);
    // One record at a time, copied into the frame.
    let mut one = Vec::new();
    let mut first_caught_up = true;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        let to = tp.seq();
        reader.extend_to(to);
        if reader.next_seq() > to {
            if first_caught_up || opts.mode != Mode::Interval {
                if tx.blocking_send(Ok(Frame::CaughtUp)).is_err() {
                    return;
                }
                first_caught_up = false;
            }
            // Wait for the next commit (or, in interval mode, the next
            // tick), waking now and then to notice `stop`.
            let wait = async {
                if opts.mode == Mode::Interval {
                    tokio::time::sleep_until(next_tick.into()).await;
                } else {
                    let _ = committed.changed().await;
                }
            };
            let _ = handle.block_on(async {
                tokio::time::timeout(Duration::from_millis(HEARTBEAT_MS), wait).await
            });
            if opts.mode == Mode::Interval && Instant::now() >= next_tick {
                next_tick = Instant::now() + opts.interval;
            }
            continue;
        }
        if opts.mode == Mode::Interval && !first_caught_up && Instant::now() < next_tick {
            let _ = handle.block_on(async {
                tokio::time::timeout(
                    Duration::from_millis(HEARTBEAT_MS),
                    tokio::time::sleep_until(next_tick.into()),
                )
                .await
            });
            continue;
        }
        // One frame: records up to SHIP_FRAME_BYTES, cut before a segment
        // start (which goes first, in its own message).
        records.clear();
        let mut last_seq = 0;
        let mut frame_bytes = 0u64;
        while reader.next_seq() <= to && records.len() < SHIP_FRAME_BYTES {
            match reader.read_into(&mut one) {
                Ok(Some(meta)) => {
                    if let Some(h) = meta.segment_start {
                        if !records.is_empty() {
                            let out = std::mem::replace(
                                &mut records,
                                Vec::with_capacity(SHIP_FRAME_BYTES),
                            );
                            if send_records(tx, out, last_seq, frame_bytes).is_err() {
                                return;
                            }
                            frame_bytes = 0;
                        }
                        let seg = Message::SegmentStart {
                            first_seq: h.first_seq,
                            created_ns: h.created_unix_ns,
                        };
                        if tx.blocking_send(Ok(Frame::Message(seg, None))).is_err() {
                            return;
                        }
                    }
                    records.extend_from_slice(&one);
                    last_seq = meta.seq;
                    frame_bytes += meta.len;
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.blocking_send(Err(ReplError::Journal(e.to_string())));
                    return;
                }
            }
        }
        if !records.is_empty() {
            let out = std::mem::replace(&mut records, Vec::with_capacity(SHIP_FRAME_BYTES));
            if send_records(tx, out, last_seq, frame_bytes).is_err() {
                return;
            }
        }
    }
}

fn send_records(
    tx: &mpsc::Sender<Result<Frame, ReplError>>,
    bytes: Vec<u8>,
    last_seq: u64,
    len: u64,
) -> Result<(), ()> {
    tx.blocking_send(Ok(Frame::Message(
        Message::Records { bytes },
        Some((last_seq, len)),
    )))
    .map_err(|_| ())
}
