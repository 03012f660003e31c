//! The follower: a standby's link to its primary. It connects, proves the
//! shared secret and checks the primary's proof, says where its journal
//! ends (seq and that record's CRC), and appends what arrives to its own
//! journal byte for byte: the same records (CRC and sequence checked on
//! arrival, by the journal), rolled into segments where the primary rolled
//! them. Each append is published to the standby's own subscribers (its rdb,
//! chained standbys), and acknowledged with the sequences now received,
//! durable (fsynced) and applied.
//!
//! A lost connection is retried with back-off from wherever the journal
//! ends. A refusal that retrying cannot fix (diverged journals, a primary
//! behind its standby, a wrong secret, a schema change) stops replication
//! with the reason in /status and the log; the node keeps answering
//! queries from what it has.

use crate::auth::{self, Secret};
use crate::protocol::{
    self, Message, Mode, FLAG_CAN_RESEED, FRAME_BYTES_MAX, HANDSHAKE_FRAME_BYTES_MAX,
    PROTOCOL_VERSION,
};
use crate::status::{FollowerStatus, LinkState};
use crate::ReplError;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_net::stream::{Stream, StreamWrite};
use tickdb_net::tls::ClientTls;
use tickdb_tp::{ReplicatedItem, Tickerplant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Time to connect and complete the handshake.
pub const CONNECT_TIMEOUT_S: u64 = 10;
/// Back-off between reconnection attempts, first and most.
pub const RECONNECT_DELAY_MS_MIN: u64 = 100;
pub const RECONNECT_DELAY_MS_MAX: u64 = 5_000;
/// An acknowledgement goes out at least this often while durable or applied
/// progress changes (fsync interval, the rdb applying after the append).
pub const ACK_INTERVAL_MS: u64 = 50;
/// An acknowledgement goes out at least this often anyway: the primary
/// takes a silent standby's link for down.
pub const ACK_KEEPALIVE_MS: u64 = 1_000;
/// The primary heartbeats every half second; silent this long, its link is
/// taken for down (a cut cable sends no reset) and reconnected.
pub const LINK_SILENCE_MS: u64 = 3_000;
/// Frames received ahead of the journal appending them.
const RECEIVE_FRAMES_AHEAD: usize = 8;

/// Where and how to follow.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// The primary's replication address, HOST:PORT.
    pub primary: String,
    /// This standby's name, as the primary reports it.
    pub name: String,
    pub secret: Secret,
    /// This standby's HTTP address (host:port), which the primary uses to
    /// hand over in a switchover; empty when unknown.
    pub http: String,
    /// `--primary-tls-ca`: speak TLS to the primary, trusting these CAs.
    pub tls: Option<ClientTls>,
}

/// A completed handshake.
pub struct Connected {
    sock: Stream,
    pub primary_seq: u64,
    pub first_seq_held: u64,
    pub mode: Mode,
    /// The primary's epoch history.
    pub epochs: tickdb_journal::EpochHistory,
    /// What the peer is: ROLE_PRIMARY, or a standby that chains.
    pub role: u8,
    /// The address this connection reached.
    pub addr: String,
    /// Where clients write to the peer (HTTP, ILP TCP).
    pub http: String,
    pub ilp: String,
    /// The primary's journal/SCHEMA file.
    pub schema_history: Vec<u8>,
    /// A reseed follows (the tables as of `seq`, then the journal from
    /// `journal_from`): receive it with `receive_reseed`.
    pub reseed: Option<ReseedHeader>,
}

#[derive(Debug, Clone, Copy)]
pub struct ReseedHeader {
    pub seq: u64,
    pub journal_from: u64,
    pub tables: u32,
    pub rows: u64,
}

impl Connected {
    /// Receives the reseed announced in the handshake, spooling the tables
    /// in `data_dir`.
    pub async fn receive_reseed(
        &mut self,
        data_dir: &Path,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Option<crate::reseed::Reseeded>, ReplError> {
        let Some(h) = self.reseed else {
            return Ok(None);
        };
        crate::reseed::receive(
            &mut self.sock,
            h.seq,
            h.journal_from,
            h.rows,
            data_dir,
            progress,
        )
        .await
        .map(Some)
    }
}

/// Connects and completes the handshake for a journal ending at
/// `last_seq` (whose record has CRC `last_crc`) with the epoch history
/// `epochs`. `can_reseed`: this standby has not opened its journal yet and
/// can start from the primary's tables. A primary of an older epoch than
/// this journal's is refused (it was deposed); a primary that finds this
/// journal holds records it never had answers `ReplError::Diverged`.
pub async fn connect(
    opts: &FollowOptions,
    last_seq: u64,
    last_crc: u32,
    epochs: &tickdb_journal::EpochHistory,
    can_reseed: bool,
) -> Result<Connected, ReplError> {
    let go = async {
        let sock = TcpStream::connect(&opts.primary).await?;
        let _ = sock.set_nodelay(true);
        let mut sock = match &opts.tls {
            None => Stream::Plain(sock),
            Some(tls) => tls
                .connect(&opts.primary, sock)
                .await
                .map_err(ReplError::Tls)?,
        };
        let challenge = protocol::read_message(&mut sock, HANDSHAKE_FRAME_BYTES_MAX)
            .await?
            .ok_or_else(|| ReplError::Protocol("the primary closed before its challenge".into()))?;
        // A primary refuses before its challenge only what no retry fixes:
        // a plaintext standby on its TLS port.
        if let Message::Refuse { reason } = &challenge {
            return Err(ReplError::Refused(format!(
                "the primary {} refused: {reason}",
                opts.primary
            )));
        }
        let Message::Challenge {
            version,
            nonce,
            name,
        } = challenge
        else {
            return Err(ReplError::Protocol(format!(
                "expected a Challenge from {}, got {}: is this a tickdb replication port (--repl-port)?",
                opts.primary,
                challenge.name()
            )));
        };
        if version != PROTOCOL_VERSION {
            return Err(ReplError::Refused(format!(
                "the primary {} speaks replication protocol version {version}; this standby speaks {PROTOCOL_VERSION}: run the same tickdb version on both",
                opts.primary
            )));
        }
        let mine = auth::nonce();
        protocol::write_message(
            &mut sock,
            &Message::Hello {
                version: PROTOCOL_VERSION,
                nonce: mine,
                proof: opts.secret.standby_proof(&nonce, &mine),
                from_seq: last_seq + 1,
                last_seq,
                last_crc,
                flags: if can_reseed { FLAG_CAN_RESEED } else { 0 },
                name: opts.name.clone(),
                http: opts.http.clone(),
                epochs: epochs.clone(),
            },
        )
        .await?;
        let answer = protocol::read_message(&mut sock, HANDSHAKE_FRAME_BYTES_MAX)
            .await?
            .ok_or_else(|| {
                ReplError::Protocol("the primary closed the connection after the Hello".into())
            })?;
        let authentic = |proof: &[u8; protocol::NONCE_BYTES]| {
            opts.secret
                .check(&opts.secret.primary_proof(&mine, &nonce), proof)
        };
        let not_authentic = || {
            ReplError::Refused(format!(
                "the primary {} failed authentication (it does not hold this standby's replication secret)",
                opts.primary
            ))
        };
        let (primary_seq, first_seq_held, mode, primary_epochs, role, p_http, p_ilp) = match answer
        {
            Message::Refuse { reason } => {
                return Err(ReplError::Refused(format!(
                    "the primary {} ({name}) refused: {reason}",
                    opts.primary
                )))
            }
            Message::Diverged {
                proof,
                keep_through,
                primary_epoch,
                reason,
            } => {
                if !authentic(&proof) {
                    return Err(not_authentic());
                }
                return Err(ReplError::Diverged {
                    keep_through,
                    primary_epoch,
                    reason,
                });
            }
            Message::Welcome {
                proof,
                primary_seq,
                first_seq_held,
                mode,
                epochs: primary_epochs,
                role,
                http,
                ilp,
                ..
            } => {
                if !authentic(&proof) {
                    return Err(not_authentic());
                }
                (
                    primary_seq,
                    first_seq_held,
                    mode,
                    primary_epochs,
                    role,
                    http,
                    ilp,
                )
            }
            other => {
                return Err(ReplError::Protocol(format!(
                    "expected Welcome, got {}",
                    other.name()
                )))
            }
        };
        if primary_epochs.last_epoch() < epochs.last_epoch() {
            return Err(ReplError::Refused(format!(
                "the primary {} ({name}) is at epoch {}, older than this journal's epoch {}: it was deposed; \
                 follow the current primary",
                opts.primary,
                primary_epochs.last_epoch(),
                epochs.last_epoch()
            )));
        }
        let schema = match protocol::read_message(&mut sock, FRAME_BYTES_MAX).await? {
            Some(Message::SchemaHistory { bytes }) => bytes,
            other => {
                return Err(ReplError::Protocol(format!(
                    "expected the schema history, got {}",
                    other.map(|m| m.name()).unwrap_or("the end of the stream")
                )))
            }
        };
        let from = last_seq + 1;
        let reseed = if can_reseed && from < first_seq_held && from <= primary_seq {
            match protocol::read_message(&mut sock, HANDSHAKE_FRAME_BYTES_MAX).await? {
                Some(Message::Reseed {
                    seq,
                    journal_from,
                    tables,
                    rows,
                }) => Some(ReseedHeader {
                    seq,
                    journal_from,
                    tables,
                    rows,
                }),
                Some(Message::Refuse { reason }) => {
                    return Err(ReplError::Refused(format!(
                        "the primary {} refused: {reason}",
                        opts.primary
                    )))
                }
                other => {
                    return Err(ReplError::Protocol(format!(
                        "expected a Reseed, got {}",
                        other.map(|m| m.name()).unwrap_or("the end of the stream")
                    )))
                }
            }
        } else {
            None
        };
        Ok(Connected {
            sock,
            primary_seq,
            first_seq_held,
            mode,
            epochs: primary_epochs,
            role,
            addr: opts.primary.clone(),
            http: p_http,
            ilp: p_ilp,
            schema_history: schema,
            reseed,
        })
    };
    tokio::time::timeout(Duration::from_secs(CONNECT_TIMEOUT_S), go)
        .await
        .map_err(|_| {
            ReplError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "connecting to the primary {}: no answer within {CONNECT_TIMEOUT_S} s",
                    opts.primary
                ),
            ))
        })?
}

/// `connect` to each address of `opts.primary` (a comma-separated list)
/// in turn, preferring the one that is the primary: a standby that chains
/// is followed only when no address is the primary. A refusal or a
/// divergence from the primary is returned at once; when no address
/// answers, the last error.
pub async fn connect_any(
    opts: &FollowOptions,
    last_seq: u64,
    last_crc: u32,
    epochs: &tickdb_journal::EpochHistory,
    can_reseed: bool,
) -> Result<Connected, ReplError> {
    let addrs: Vec<String> = opts
        .primary
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    if addrs.len() <= 1 {
        return connect(opts, last_seq, last_crc, epochs, can_reseed).await;
    }
    let mut chained: Option<Connected> = None;
    let mut last_err = None;
    for a in addrs {
        let one = FollowOptions {
            primary: a,
            ..opts.clone()
        };
        match connect(&one, last_seq, last_crc, epochs, can_reseed).await {
            Ok(c) if c.role == protocol::ROLE_PRIMARY => return Ok(c),
            Ok(c) if c.role == protocol::ROLE_STANDBY && chained.is_none() => chained = Some(c),
            Ok(_) => {}
            Err(e @ ReplError::Diverged { .. }) => return Err(e),
            Err(e) => last_err = Some(e),
        }
    }
    match (chained, last_err) {
        (Some(c), _) => Ok(c),
        (None, Some(e)) => Err(e),
        (None, None) => Err(ReplError::Refused(format!(
            "none of {} is a primary or a standby to follow",
            opts.primary
        ))),
    }
}

/// The primary's schema history for this standby's journal: installed
/// (durably) when the journal has none; otherwise it must be the same file,
/// or its start (schema changes the standby has yet to receive). Returns
/// the schema text the standby runs under now.
pub fn adopt_schema(journal_dir: &Path, primary_history: &[u8]) -> Result<String, ReplError> {
    use tickdb_journal::schema_history::{SchemaHistory, SCHEMA_HISTORY_FILE};
    let path = journal_dir.join(SCHEMA_HISTORY_FILE);
    let theirs = SchemaHistory::decode(primary_history, &path)
        .map_err(|e| ReplError::Protocol(format!("the primary's schema history: {e}")))?;
    match std::fs::read(&path) {
        Ok(ours) if ours == primary_history => {}
        // A standby that was away while its primary's schema changed at
        // run time (CREATE TABLE, ALTER TABLE) holds the start of the
        // primary's history: the changes it lacks come as schema-change
        // markers in the records it has yet to receive, and its journal
        // records each as it appends it. It runs under its own schema
        // until then.
        Ok(ours)
            if SchemaHistory::decode(&ours, &path)
                .is_ok_and(|o| theirs.entries().starts_with(o.entries())) =>
        {
            let ours = SchemaHistory::decode(&ours, &path)
                .map_err(|e| ReplError::Protocol(format!("this standby's schema history: {e}")))?;
            return Ok(ours.current().text.clone());
        }
        Ok(_) => {
            return Err(ReplError::Refused(format!(
                "this standby's schema history ({}) differs from its primary's: the primary's schema changed. \
                 Restart the standby with an empty data directory, or after the primary's change (it adopts the primary's schema at start)",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(journal_dir)?;
            theirs
                .write(&tickdb_journal::FsStorage, journal_dir)
                .map_err(|e| ReplError::Journal(format!("writing the schema history: {e}")))?;
        }
        Err(e) => return Err(ReplError::Io(e)),
    }
    Ok(theirs.current().text.clone())
}

/// The follower's state, shared with /status.
pub struct Follower {
    opts: FollowOptions,
    /// Raised to stop following (promotion); `run` returns once it is.
    halt: tokio::sync::watch::Sender<bool>,
    /// The address actually followed (one of `opts.primary`).
    following: Mutex<String>,
    status: Mutex<FollowerStatus>,
    heard: Mutex<Option<Instant>>,
    connects: AtomicU64,
    /// Per record: primary journal time to committed here, in µs.
    lag: Mutex<hdrhistogram::Histogram<u64>>,
}

/// The largest lag the histogram keeps apart, in µs (an hour).
const LAG_US_MAX: u64 = 3_600_000_000;

impl Follower {
    pub fn new(opts: FollowOptions) -> Arc<Follower> {
        Arc::new(Follower {
            halt: tokio::sync::watch::channel(false).0,
            following: Mutex::new(opts.primary.clone()),
            status: Mutex::new(FollowerStatus {
                primary: opts.primary.clone(),
                state: LinkState::Connecting,
                reason: None,
                mode: None,
                received_seq: 0,
                durable_seq: 0,
                applied_seq: 0,
                primary_seq: 0,
                primary_epoch: 0,
                lag_records: 0,
                heard_ms_ago: 0.0,
                connects: 0,
                lag_us: Default::default(),
            }),
            heard: Mutex::new(None),
            connects: AtomicU64::new(0),
            lag: Mutex::new(
                hdrhistogram::Histogram::new_with_bounds(1, LAG_US_MAX, 3)
                    .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).expect("a histogram")),
            ),
            opts,
        })
    }

    pub fn options(&self) -> &FollowOptions {
        &self.opts
    }

    /// The newest epoch this standby has heard its primary is at.
    pub fn primary_epoch(&self) -> u32 {
        self.status.lock().primary_epoch
    }

    /// Whether the link to the primary is up (catching up or streaming).
    pub fn linked(&self) -> bool {
        matches!(
            self.status.lock().state,
            crate::status::LinkState::CatchingUp | crate::status::LinkState::Streaming
        )
    }

    /// The primary this standby follows now (from its list of addresses).
    pub fn following(&self) -> String {
        self.following.lock().clone()
    }

    /// Stops following (promotion): `run` returns `ReplError::Refused("halted")`
    /// after the append in progress, if any, has been handed to the journal.
    pub fn halt(&self) {
        self.halt.send_replace(true);
    }

    pub fn status(&self, tp: &Tickerplant, applied: u64) -> FollowerStatus {
        let mut s = self.status.lock().clone();
        s.received_seq = tp.seq();
        s.durable_seq = tp.synced_seq();
        s.applied_seq = applied;
        s.primary_seq = s.primary_seq.max(s.received_seq);
        s.lag_records = s.primary_seq.saturating_sub(s.received_seq);
        s.heard_ms_ago = self
            .heard
            .lock()
            .map(|t| t.elapsed().as_secs_f64() * 1000.0)
            .unwrap_or(0.0);
        s.connects = self.connects.load(Ordering::Relaxed);
        let h = self.lag.lock();
        s.lag_us = crate::status::LagSummary {
            records: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        };
        s
    }

    /// Records each appended record's lag: now minus its journal time.
    fn note_lag(&self, times: &[i64]) {
        let now = crate::now_ns();
        let mut h = self.lag.lock();
        for t in times {
            let lag_us = ((now - t).max(1) / 1000) as u64;
            let _ = h.record(lag_us.clamp(1, LAG_US_MAX));
        }
    }

    /// Marks replication stopped before it started (the primary refused this
    /// standby when it started).
    pub fn stop(&self, reason: &str) {
        self.set(LinkState::Stopped, Some(reason.to_string()));
    }

    fn set(&self, state: LinkState, reason: Option<String>) {
        let mut s = self.status.lock();
        s.state = state;
        s.reason = reason;
    }

    /// Follows the primary until a refusal that retrying cannot fix
    /// (returned, and shown in /status). `first` is a handshake already
    /// made (a new standby's, before its tp opened). `applied` is the rdb's
    /// applied sequence.
    pub async fn run(
        self: Arc<Self>,
        tp: Arc<Tickerplant>,
        first: Option<Connected>,
        applied: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> ReplError {
        let mut halt = self.halt.subscribe();
        if *halt.borrow() {
            return ReplError::Refused("halted".into());
        }
        let me = self.clone();
        tokio::select! {
            e = me.run_until_refused(tp, first, applied) => e,
            _ = halt.wait_for(|h| *h) => {
                self.set(LinkState::Stopped, Some("halted: this node is being promoted".into()));
                ReplError::Refused("halted".into())
            }
        }
    }

    async fn run_until_refused(
        self: Arc<Self>,
        tp: Arc<Tickerplant>,
        first: Option<Connected>,
        applied: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> ReplError {
        let mut first = first;
        let mut delay = RECONNECT_DELAY_MS_MIN;
        loop {
            let conn = match first.take() {
                Some(c) => Ok(c),
                None => {
                    self.set(LinkState::Connecting, None);
                    let last = tp.seq();
                    let crc = last_crc(&tp, last);
                    match crc {
                        Ok(crc) => {
                            connect_any(&self.opts, last, crc, &tp.epoch_history(), false).await
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            let conn = match conn {
                Ok(c) => c,
                Err(ReplError::Refused(reason)) => {
                    tracing::error!("replication stopped: {reason}");
                    self.set(LinkState::Stopped, Some(reason.clone()));
                    return ReplError::Refused(reason);
                }
                Err(e @ ReplError::Diverged { .. }) => {
                    tracing::error!("replication stopped: {e}");
                    self.set(LinkState::Stopped, Some(e.to_string()));
                    return e;
                }
                Err(e) => {
                    self.set(LinkState::Connecting, Some(e.to_string()));
                    tracing::warn!("replication: {e}; retrying in {delay} ms");
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    delay = (delay * 2).min(RECONNECT_DELAY_MS_MAX);
                    continue;
                }
            };
            if let Err(e) = adopt_schema(&tp.config().journal_dir, &conn.schema_history) {
                let reason = e.to_string();
                tracing::error!("replication stopped: {reason}");
                self.set(LinkState::Stopped, Some(reason.clone()));
                return ReplError::Refused(reason);
            }
            delay = RECONNECT_DELAY_MS_MIN;
            *self.following.lock() = conn.addr.clone();
            tp.set_primary_endpoints(&conn.http, &conn.ilp);
            self.connects.fetch_add(1, Ordering::Relaxed);
            {
                let mut s = self.status.lock();
                s.mode = Some(conn.mode);
                s.primary_seq = conn.primary_seq;
                s.primary_epoch = s.primary_epoch.max(conn.epochs.last_epoch());
            }
            *self.heard.lock() = Some(Instant::now());
            self.set(
                if conn.primary_seq > tp.seq() {
                    LinkState::CatchingUp
                } else {
                    LinkState::Streaming
                },
                None,
            );
            tracing::info!(
                "replication: following {} from seq {} ({} mode; primary at seq {})",
                conn.addr,
                tp.seq() + 1,
                conn.mode.name(),
                conn.primary_seq
            );
            match self.stream(&tp, conn, applied.clone()).await {
                Err(ReplError::Refused(reason)) | Err(ReplError::Journal(reason)) => {
                    tracing::error!("replication stopped: {reason}");
                    self.set(LinkState::Stopped, Some(reason.clone()));
                    return ReplError::Refused(reason);
                }
                Err(e) => {
                    tracing::warn!(
                        "replication: link to {} lost: {e}; reconnecting",
                        self.opts.primary
                    );
                    self.set(LinkState::Connecting, Some(e.to_string()));
                }
                Ok(()) => {
                    tracing::warn!(
                        "replication: the primary {} closed the link; reconnecting",
                        self.opts.primary
                    );
                    self.set(
                        LinkState::Connecting,
                        Some("the primary closed the link".into()),
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS_MIN)).await;
        }
    }

    async fn stream(
        &self,
        tp: &Arc<Tickerplant>,
        conn: Connected,
        applied: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<(), ReplError> {
        let (mut rd, mut wr) = conn.sock.into_split();
        let (tx, mut rx) = tokio::sync::mpsc::channel(RECEIVE_FRAMES_AHEAD);
        // Frames are read in their own task: a half-read frame must not be
        // dropped by the select below.
        let reader = tokio::spawn(async move {
            loop {
                let m = protocol::read_message(&mut rd, FRAME_BYTES_MAX).await;
                let end = !matches!(m, Ok(Some(_)));
                if tx.send(m).await.is_err() || end {
                    return;
                }
            }
        });
        let mut last_ack = (u64::MAX, u64::MAX, u64::MAX, Instant::now());
        let mut ticker = tokio::time::interval(Duration::from_millis(ACK_INTERVAL_MS));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        let result = loop {
            let got = tokio::select! {
                m = rx.recv() => m,
                _ = ticker.tick() => {
                    if last_heard.elapsed() > Duration::from_millis(LINK_SILENCE_MS) {
                        break Err(ReplError::Io(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no word from the primary for {LINK_SILENCE_MS} ms (it heartbeats every {} ms): the link is down", crate::shipper::HEARTBEAT_MS),
                        )));
                    }
                    if let Err(e) = ack(&mut wr, tp, &applied, &mut last_ack).await {
                        break Err(e);
                    }
                    continue;
                }
            };
            last_heard = Instant::now();
            let msg = match got {
                None | Some(Ok(None)) => break Ok(()),
                Some(Err(e)) => break Err(e),
                Some(Ok(Some(m))) => m,
            };
            let mut items = Vec::new();
            let mut next = Some(msg);
            // Everything already received goes to the journal as one group
            // (one commit, one fsync).
            while let Some(m) = next.take() {
                match m {
                    Message::SegmentStart {
                        first_seq,
                        created_ns,
                    } => items.push(ReplicatedItem::SegmentStart {
                        first_seq,
                        created_unix_ns: created_ns,
                    }),
                    Message::Records { bytes } => items.push(ReplicatedItem::Records(bytes)),
                    Message::Heartbeat { primary_seq, .. } => {
                        self.status.lock().primary_seq = primary_seq;
                        *self.heard.lock() = Some(Instant::now());
                    }
                    Message::Refuse { reason } => {
                        return Err(ReplError::Refused(format!(
                            "the primary stopped the link: {reason}"
                        )))
                    }
                    other => {
                        return Err(ReplError::Protocol(format!(
                            "unexpected {} from the primary",
                            other.name()
                        )))
                    }
                }
                if let Ok(Ok(Some(m))) = rx.try_recv() {
                    next = Some(m);
                }
            }
            if items.is_empty() {
                continue;
            }
            *self.heard.lock() = Some(Instant::now());
            let times = record_times(&items);
            match tp.append_replicated(items).await {
                Ok(seq) => {
                    self.note_lag(&times);
                    let mut s = self.status.lock();
                    s.primary_seq = s.primary_seq.max(seq);
                    if s.state == LinkState::CatchingUp && seq >= s.primary_seq {
                        s.state = LinkState::Streaming;
                    }
                }
                Err(e) => break Err(ReplError::Journal(format!(
                    "a record from the primary {} does not fit this standby's journal (at seq {}): {e}",
                    self.opts.primary,
                    tp.seq()
                ))),
            }
            if let Err(e) = ack(&mut wr, tp, &applied, &mut last_ack).await {
                break Err(e);
            }
        };
        reader.abort();
        if let Err(ReplError::Journal(reason)) = &result {
            let _ = protocol::write_message(
                &mut wr,
                &Message::Refuse {
                    reason: reason.clone(),
                },
            )
            .await;
        }
        let _ = wr.shutdown().await;
        result
    }
}

/// Sends an acknowledgement when something changed, or as a keepalive.
async fn ack(
    wr: &mut StreamWrite,
    tp: &Tickerplant,
    applied: &Arc<dyn Fn() -> u64 + Send + Sync>,
    last: &mut (u64, u64, u64, Instant),
) -> Result<(), ReplError> {
    let now = (tp.seq(), tp.synced_seq(), applied());
    if now == (last.0, last.1, last.2) && last.3.elapsed() < Duration::from_millis(ACK_KEEPALIVE_MS)
    {
        return Ok(());
    }
    *last = (now.0, now.1, now.2, Instant::now());
    protocol::write_message(
        wr,
        &Message::Ack {
            received_seq: now.0,
            durable_seq: now.1,
            applied_seq: now.2,
        },
    )
    .await
}

/// The journal time (the primary's receive time) of each record in `items`,
/// read from their headers (bytes 16..24).
fn record_times(items: &[ReplicatedItem]) -> Vec<i64> {
    let mut out = Vec::new();
    for item in items {
        let ReplicatedItem::Records(bytes) = item else {
            continue;
        };
        let mut at = 0usize;
        while at + 32 <= bytes.len() {
            let len = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                as usize;
            let mut t = [0u8; 8];
            t.copy_from_slice(&bytes[at + 16..at + 24]);
            out.push(i64::from_le_bytes(t));
            at += 32 + len;
        }
    }
    out
}

/// The CRC32C of the journal's record at `seq` (0 for seq 0).
pub fn last_crc(tp: &Tickerplant, seq: u64) -> Result<u32, ReplError> {
    if seq == 0 {
        return Ok(0);
    }
    let mut r =
        tickdb_journal::RawReader::open(&tp.config().journal_dir, seq, seq).map_err(|e| {
            ReplError::Journal(format!(
                "reading this standby's last record (seq {seq}): {e}"
            ))
        })?;
    let mut buf = Vec::new();
    match r.read_into(&mut buf) {
        Ok(Some(_)) if buf.len() >= 8 => Ok(u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]])),
        Ok(_) => Err(ReplError::Journal(format!(
            "this standby's record at seq {seq} is missing"
        ))),
        Err(e) => Err(ReplError::Journal(e.to_string())),
    }
}
